with

source as (

    select * from {{ source('silver', 'runs') }}

),

renamed as (

    select
        run_id,
        source as source_name,
        bronze_snapshot_id,
        messages,
        row_changes,
        ddl_events,
        watermarks,
        quarantined,
        waiting,
        consistent_ts,
        consistency,
        finished_at
    from source

)

select * from renamed
