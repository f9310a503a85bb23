"""Status of each source for operators: numbers from the tables written as a snapshot after every run
(Spark, in the ingest DAG), and the broker's offsets asked live (in the Airflow API server, without Spark)."""
