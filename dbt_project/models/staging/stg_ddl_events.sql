with

source as (

    select * from {{ source('silver', 'ddl_events') }}

),

renamed as (

    select
        source as source_name,
        database as upstream_database,
        `table` as upstream_table,
        old_database as previous_database,
        old_table as previous_table,
        table_uid,
        commit_ts,
        ddl_type,
        ddl_sql,
        table_schema,
        schema_origin,
        needs_snapshot,
        understood
    from source

)

select * from renamed
