with

ddl_events as (

    select * from {{ ref('stg_ddl_events') }}

),

consistent as (

    select * from {{ ref('int_consistent_ts') }}

),

published_ddl as (

    select ddl_events.*
    from ddl_events
    inner join consistent
        on ddl_events.source_name = consistent.source_name
        and ddl_events.commit_ts <= consistent.consistent_ts
    where ddl_events.upstream_table is not null

),

ranked as (

    select
        *,
        row_number() over (
            partition by source_name, upstream_database, upstream_table
            order by commit_ts desc
        ) as schema_rank
    from published_ddl

),

latest as (

    select
        source_name,
        upstream_database,
        upstream_table,
        commit_ts as schema_commit_ts,
        ddl_type as last_ddl_type,
        table_schema,
        table_schema is null or ddl_type = 'drop_table' as is_dropped
    from ranked
    where schema_rank = 1

)

select * from latest
