with

source as (

    select * from {{ source('silver', 'ddl_events') }}

),

renamed as (

    select
        source as source_name,
        database as upstream_database,
        `table` as upstream_table,
        commit_ts,
        ddl_type,
        ddl_sql,
        table_schema,
        schema_origin
    from source

)

select * from renamed
