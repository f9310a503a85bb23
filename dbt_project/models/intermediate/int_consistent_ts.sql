{{ config(materialized='table') }}

with

runs as (

    select * from {{ ref('stg_silver_runs') }}

),

ranked as (

    select
        source_name,
        consistent_ts,
        consistency,
        finished_at,
        max(silver_seq) over (partition by source_name) as silver_seq,
        row_number() over (partition by source_name order by finished_at desc) as run_rank
    from runs

),

latest as (

    select
        source_name,
        consistent_ts,
        consistency,
        finished_at,
        silver_seq
    from ranked
    where run_rank = 1 and consistent_ts is not null

)

select * from latest
