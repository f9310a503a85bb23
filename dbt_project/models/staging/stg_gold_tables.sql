with

source as (

    select * from {{ source('gold', 'tables') }}

),

renamed as (

    select
        source as source_name,
        table_uid,
        upstream_database,
        upstream_table,
        gold_relation,
        history_relation,
        columns,
        key_columns,
        schema_fingerprint,
        consistent_ts,
        silver_seq,
        gold_snapshot_id,
        history_snapshot_id,
        `rows`,
        versions,
        changed_ts,
        ddl_events,
        updated_at
    from source

)

select * from renamed
