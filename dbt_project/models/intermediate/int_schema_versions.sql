{#-
  Every version of every upstream table's schema, published up to its source's consistent timestamp:
  one row per DDL that touched the table, valid from its commit ts until the next one. The table's
  identity (table_uid) survives renames, so a version says which name the table had while it was valid.
-#}

with

ddl_events as (

    select * from {{ ref('stg_ddl_events') }}

),

consistent as (

    select * from {{ ref('int_consistent_ts') }}

),

published as (

    select ddl_events.*
    from ddl_events
    inner join consistent
        on ddl_events.source_name = consistent.source_name
        and ddl_events.commit_ts <= consistent.consistent_ts
    where ddl_events.table_uid is not null

),

parsed as (

    select
        source_name,
        table_uid,
        upstream_database,
        upstream_table,
        ddl_type,
        commit_ts,
        needs_snapshot,
        understood,
        from_json(table_schema, '{{ gold_schema_json_type() }}') as table_schema
    from published

),

versions as (

    select
        source_name,
        table_uid,
        upstream_database,
        upstream_table,
        ddl_type,
        commit_ts as valid_from_ts,
        lead(commit_ts) over (partition by source_name, table_uid order by commit_ts) as valid_to_ts,
        -- a column the source's table rules leave out (spark_jobs.silver.merges.within_rules) is not gold's
        transform(
            filter(table_schema.columns, c -> not coalesce(c.left_out, false)),
            -- MySQL's BOOL (the interpreter flags a tinyint(1)) keeps its width: gold.types may map it to boolean;
            -- a TIME its fractional digits, which gold's text has
            c -> named_struct(
                'id', c.id,
                'name', c.name,
                'type', case
                    when coalesce(c.boolean, false) then 'tinyint(1)'
                    when c.type = 'time' and c.fsp is not null then concat('time(', cast(c.fsp as string), ')')
                    else c.type
                end,
                'nullable', c.nullable,
                'origin_default', c.origin_default
            )
        ) as columns,
        table_schema.key_columns,
        table_schema is null or ddl_type in ('drop_table', 'drop_database') as is_dropped,
        needs_snapshot,
        understood
    from parsed

)

select * from versions
