"""The operator's window inside Airflow: the pipeline status page and the dbt docs site (see plugins/README.md)."""
