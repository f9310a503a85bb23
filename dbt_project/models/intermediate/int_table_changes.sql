{#-
  Row changes joined to the table identity and schema version in force at their commit ts: the name a
  change carries is resolved to the table it meant then, whatever the table is called now.
-#}
with

row_changes as (

    select * from {{ ref('stg_row_changes') }}

),

versions as (

    select * from {{ ref('int_schema_versions') }}
    where not is_dropped

),

resolved as (

    select
        row_changes.*,
        versions.table_uid,
        versions.valid_from_ts as version_from_ts,
        versions.columns as version_columns
    from row_changes
    inner join versions
        on row_changes.source_name = versions.source_name
        and row_changes.upstream_database = versions.upstream_database
        and row_changes.upstream_table = versions.upstream_table
        and row_changes.commit_ts >= versions.valid_from_ts
        and (versions.valid_to_ts is null or row_changes.commit_ts < versions.valid_to_ts)

)

select * from resolved
