with

source as (

    select * from {{ source('silver', 'row_changes') }}

),

renamed as (

    select
        source as source_name,
        database as upstream_database,
        `table` as upstream_table,
        op,
        case
            when array_contains(flags, 'snapshot') then 3
            when op = 'delete' then 0
            when op = 'update' then 1
            else 2
        end as op_order,
        commit_ts,
        row_key,
        before,
        after,
        column_types,
        flags,
        silver_seq,
        topic,
        `partition` as kafka_partition,
        `offset` as kafka_offset,
        event_index
    from source

)

select * from renamed
