{#-
  The gold tables a source publishes: per upstream table identity its latest published schema, the name
  it has now, the last truncation, the last Dumpling snapshot loaded, and whether it needs a fresh snapshot.
  Dropped tables are not here.
-#}

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
        max_by(
            struct(upstream_database, upstream_table, columns, key_columns, valid_to_ts, is_dropped), valid_from_ts
        ) as latest,
        max(case when ddl_type = 'truncate_table' then valid_from_ts end) as truncated_at_ts,
        max(case when ddl_type = 'snapshot' then valid_from_ts end) as snapshot_at_ts,
        max(valid_from_ts) as schema_commit_ts,
        bool_or(not understood) as has_unknown_ddl,
        collect_list(case when needs_snapshot then valid_from_ts end) as needing_snapshot_since
    from versions
    group by source_name, table_uid

),

gold_tables as (

    select
        per_table.source_name,
        per_table.table_uid,
        per_table.latest.upstream_database,
        per_table.latest.upstream_table,
        per_table.latest.columns,
        per_table.latest.key_columns,
        sha2(
            to_json(
                struct(
                    per_table.latest.upstream_database,
                    per_table.latest.upstream_table,
                    per_table.latest.columns,
                    per_table.latest.key_columns
                )
            ),
            256
        ) as schema_fingerprint,
        per_table.schema_commit_ts,
        per_table.truncated_at_ts,
        per_table.snapshot_at_ts,
        exists(
            per_table.needing_snapshot_since, ts -> ts > coalesce(per_table.snapshot_at_ts, -1)
        ) as needs_snapshot,
        per_table.has_unknown_ddl,
        consistent.consistent_ts,
        consistent.consistency,
        consistent.silver_seq
    from per_table
    inner join consistent
        on per_table.source_name = consistent.source_name
    where per_table.latest.valid_to_ts is null and not per_table.latest.is_dropped

)

select * from gold_tables
