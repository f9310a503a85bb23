{#- The JSON shape of silver.ddl_events.table_schema that the replay reads (spark_jobs/ddl writes it). -#}
{% macro gold_schema_json_type() -%}
    struct<columns: array<struct<id: int, name: string, type: string, nullable: boolean, origin_default: string, left_out: boolean, `boolean`: boolean, fsp: int>>, key_columns: array<string>>
{%- endmacro %}
