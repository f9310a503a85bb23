#!/bin/bash
# Run by the postgres image once, when its volume is first initialised (/docker-entrypoint-initdb.d): the Hive
# metastore's role `hive` and database `metastore`, beside Airflow's (POSTGRES_USER / POSTGRES_DB). The
# password comes from the environment (METASTORE_DB_PASSWORD), never from this file.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set=metastore_password="$METASTORE_DB_PASSWORD" <<'SQL'
CREATE ROLE hive LOGIN PASSWORD :'metastore_password';
CREATE DATABASE metastore OWNER hive;
SQL
