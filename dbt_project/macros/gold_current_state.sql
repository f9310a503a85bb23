{#-
  The current state of one upstream table as of its source's consistent timestamp: the last change
  of every row (by commit ts, deletes before inserts at one ts, then Kafka order), shaped to the
  table's latest schema. Incremental runs take only the changes after the timestamp the table was
  last published at, and merge them (deletes delete). Every gold model calls this one macro.
-#}
{% macro gold_current_state(upstream_database, upstream_table) %}
{%- set source_name = var('source_name') -%}
{%- set columns = gold_columns(source_name, upstream_database, upstream_table) -%}
{%- set published_ts = gold_published_ts() if is_incremental() else none -%}

with

changes as (

    select * from {{ ref('stg_row_changes') }}
    where source_name = '{{ source_name }}'
      and upstream_database = '{{ upstream_database }}'
      and upstream_table = '{{ upstream_table }}'

),

consistent as (

    select * from {{ ref('int_consistent_ts') }}
    where source_name = '{{ source_name }}'

),

published_changes as (

    select changes.*
    from changes
    inner join consistent
        on changes.commit_ts <= consistent.consistent_ts
    {%- if published_ts is not none %}
    where changes.commit_ts > {{ published_ts }}
    {%- endif %}

),

ranked as (

    select
        *,
        row_number() over (
            partition by row_key
            order by commit_ts desc, op_order desc, kafka_partition desc, kafka_offset desc, event_index desc
        ) as version_rank
    from published_changes

),

latest as (

    select * from ranked
    where version_rank = 1
    {%- if published_ts is none %}
      and op <> 'delete'
    {%- endif %}

),

shaped as (

    select
        row_key as _row_key,
        commit_ts as _commit_ts,
        op as _op,
        {%- for column in columns %}
        {{ cast_canonical("after['" ~ column['name'] ~ "']", column['type']) }} as `{{ column['name'] }}`{{ ',' if not loop.last }}
        {%- endfor %}
    from latest

)

select * from shaped
{% endmacro %}


{#- The table's columns (name, canonical type) from its latest published schema. -#}
{% macro gold_columns(source_name, upstream_database, upstream_table) %}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set query -%}
        select table_schema from {{ ref('int_table_schemas') }}
        where source_name = '{{ source_name }}' and upstream_database = '{{ upstream_database }}'
          and upstream_table = '{{ upstream_table }}'
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {%- if rows | length == 0 or rows[0][0] is none -%}
        {{ exceptions.raise_compiler_error("no published schema for " ~ upstream_database ~ "." ~ upstream_table ~ " in source " ~ source_name) }}
    {%- endif -%}
    {{ return(fromjson(rows[0][0])['columns']) }}
{% endmacro %}


{#- The consistent timestamp this gold table was last published at (a table property). -#}
{% macro gold_published_ts() %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set rows = run_query("show tblproperties " ~ this ~ " ('ticdc.consistent-ts')").rows -%}
    {%- set value = rows[0][1] if rows | length > 0 else none -%}
    {{ return(value if value is not none and value is number or (value is string and value.isdigit()) else none) }}
{% endmacro %}


{#- Post-hook: record the TiDB timestamp the table is consistent as of (a metadata-only commit). -#}
{% macro record_consistent_ts() %}
    {%- if not execute -%}
        {{ return('select 1') }}
    {%- endif -%}
    {%- set source_name = var('source_name') -%}
    {%- set rows = run_query("select consistent_ts, consistency from " ~ ref('int_consistent_ts') ~ " where source_name = '" ~ source_name ~ "'").rows -%}
    {%- if rows | length > 0 -%}
    alter table {{ this }} set tblproperties ('ticdc.consistent-ts' = '{{ rows[0][0] }}', 'ticdc.consistency' = '{{ rows[0][1] }}', 'ticdc.source' = '{{ source_name }}')
    {%- else -%}
    select 1
    {%- endif -%}
{% endmacro %}
