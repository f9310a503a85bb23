{#-
  The gold tables a source publishes: per upstream table identity its latest published schema, the name
  it has now, the last truncation, the last Dumpling snapshot loaded, and whether it needs a fresh snapshot.
  Dropped tables are not here.
-#}

{{ config(materialized='table') }}

with

versions as (

    select * from {{ ref('int_schema_versions') }}

),

consistent as (

    select * from {{ ref('int_consistent_ts') }}

),

per_table as (

    select
        source_name,
        table_uid,
        max(case when ddl_type = 'truncate_table' then valid_from_ts end) as truncated_at_ts,
        max(case when ddl_type = 'snapshot' then valid_from_ts end) as snapshot_at_ts,
        max(valid_from_ts) as schema_commit_ts,
        bool_or(not understood) as has_unknown_ddl
    from versions
    group by source_name, table_uid

),

needing_snapshot as (

    select
        versions.source_name,
        versions.table_uid,
        bool_or(versions.needs_snapshot and versions.valid_from_ts > coalesce(per_table.snapshot_at_ts, -1))
            as needs_snapshot
    from versions
    inner join per_table
        on versions.source_name = per_table.source_name
        and versions.table_uid = per_table.table_uid
    group by versions.source_name, versions.table_uid

),

latest as (

    select * from versions
    where valid_to_ts is null and not is_dropped

),

gold_tables as (

    select
        latest.source_name,
        latest.table_uid,
        latest.upstream_database,
        latest.upstream_table,
        latest.columns,
        latest.key_columns,
        sha2(to_json(struct(latest.upstream_database, latest.upstream_table, latest.columns, latest.key_columns)), 256)
            as schema_fingerprint,
        per_table.schema_commit_ts,
        per_table.truncated_at_ts,
        per_table.snapshot_at_ts,
        needing_snapshot.needs_snapshot,
        per_table.has_unknown_ddl,
        consistent.consistent_ts,
        consistent.consistency,
        consistent.silver_seq
    from latest
    inner join per_table
        on latest.source_name = per_table.source_name
        and latest.table_uid = per_table.table_uid
    inner join needing_snapshot
        on latest.source_name = needing_snapshot.source_name
        and latest.table_uid = needing_snapshot.table_uid
    inner join consistent
        on latest.source_name = consistent.source_name

)

select * from gold_tables
