"""What every job runs on: the SparkSession, the Iceberg runtime, table definitions, SQL helpers."""
