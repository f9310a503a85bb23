{#-
  What the data tests of a gold or history table check after a run. A rebuild is checked whole. An incremental
  run is checked where it wrote: the rows it changed, found from the table property `ticdc.changed-after-ts`
  (the consistent ts of the run before) and silver's file statistics, so that a run's tests cost what its
  delta costs, not what the table holds. A generic test asks for this with `where: __ticdc_changed_rows__`.
-#}

{#- What the table's last run was: `after`, the consistent ts after which it changed rows (none after a rebuild,
    or for a table that is not gold), and `layer` (gold or history); none for a table that does not exist. -#}
{% macro gold_last_run(relation) -%}
    {%- if not execute or relation.identifier is not defined -%} {{ return(none) }} {%- endif -%}
    {#- not built in this lakehouse (`dbt docs generate` compiles the tests of every configured source) -#}
    {%- set existing = adapter.get_relation(database=relation.database, schema=relation.schema,
                                            identifier=relation.identifier) -%}
    {%- if existing is none -%} {{ return(none) }} {%- endif -%}
    {%- set props = {} -%}
    {%- for row in run_query("show tblproperties " ~ existing).rows -%}
        {%- do props.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {%- set after = props.get('ticdc.changed-after-ts') -%}
    {{ return({'after': after | int if after else none, 'layer': props.get('ticdc.layer')}) }}
{%- endmacro %}


{#- A predicate on the table's rows: the ones its last run changed (true after a rebuild). -#}
{% macro gold_changed_rows(relation) -%}
    {%- set scope = gold_last_run(relation) -%}
    {%- if scope is none or scope['after'] is none -%}
        {{ return('true') }}
    {%- elif scope['layer'] == 'history' -%}
        {{ return('(_valid_from_ts > ' ~ sql_integer(scope['after']) ~ ' or _valid_to_ts > ' ~ sql_integer(scope['after']) ~ ')') }}
    {%- else -%}
        {{ return('_commit_ts > ' ~ sql_integer(scope['after'])) }}
    {%- endif -%}
{%- endmacro %}


{#- dbt's own `where` for tests, plus `__ticdc_changed_rows__`, which stands for gold_changed_rows. -#}
{% macro default__get_where_subquery(relation) -%}
    {%- set where = config.get('where', '') -%}
    {%- if where == '__ticdc_changed_rows__' -%}
        {%- set where = gold_changed_rows(relation) -%}
    {%- endif -%}
    {%- if where -%}
        {%- set filtered -%}
            (select * from {{ relation }} where {{ where }}) dbt_subquery
        {%- endset -%}
        {{ return(filtered) }}
    {%- else -%}
        {{ return(relation) }}
    {%- endif -%}
{%- endmacro %}
