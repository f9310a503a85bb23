with

runs as (

    select * from {{ ref('stg_silver_runs') }}

),

per_source as (

    select
        source_name,
        max_by(struct(consistent_ts, consistency, finished_at), finished_at) as latest_run,
        max(silver_seq) as silver_seq
    from runs
    group by source_name

),

latest as (

    select
        source_name,
        latest_run.consistent_ts,
        latest_run.consistency,
        latest_run.finished_at,
        silver_seq
    from per_source
    where latest_run.consistent_ts is not null

)

select * from latest
