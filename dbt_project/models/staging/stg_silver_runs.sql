with

source as (

    select * from {{ source('silver', 'runs') }}

),

renamed as (

    select
        run_id,
        source as source_name,
        kind as run_kind,
        bronze_snapshot_id,
        messages,
        decoded,
        row_changes,
        ddl_events,
        watermarks,
        quarantined,
        waiting,
        consistent_ts,
        consistency,
        finished_at,
        silver_seq
    from source

)

select * from renamed
