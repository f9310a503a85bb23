{#-
  What the data tests of a gold or history table check after a run. A rebuild is checked whole. An incremental
  run is checked where it wrote: the rows it changed, found from the table property `ticdc.changed-after-ts`
  (the consistent ts of the run before) and silver's file statistics, so that a run's tests cost what its
  delta costs, not what the table holds. A generic test asks for this with `where: __ticdc_changed_rows__`.
-#}

{#- What the table's last run changed: `after`, the consistent ts after which it changed rows, and
    `changed_rows`, a predicate on the table's rows that selects them. After a rebuild, for a table that is not
    gold, or one this lakehouse does not have (`dbt docs generate` compiles the tests of every configured
    source): `after` none and `changed_rows` true. -#}
{% macro gold_last_run(relation) -%}
    {%- set whole = {'after': none, 'changed_rows': 'true'} -%}
    {%- if not execute or relation.identifier is not defined -%} {{ return(whole) }} {%- endif -%}
    {%- set props = table_properties(relation) or {} -%}
    {%- set after = props.get('ticdc.changed-after-ts') -%}
    {%- if not after -%} {{ return(whole) }} {%- endif -%}
    {%- set after = sql_integer(after) -%}
    {%- if props.get('ticdc.layer') == 'history' -%}
        {{ return({'after': after, 'changed_rows': '(_valid_from_ts > ' ~ after ~ ' or _valid_to_ts > ' ~ after ~ ')'}) }}
    {%- endif -%}
    {{ return({'after': after, 'changed_rows': '_commit_ts > ' ~ after}) }}
{%- endmacro %}


{#- dbt's own `where` for tests, plus `__ticdc_changed_rows__`, which stands for the rows the last run changed. -#}
{% macro default__get_where_subquery(relation) -%}
    {%- if config.get('where', '') != '__ticdc_changed_rows__' -%}
        {{ return(dbt.default__get_where_subquery(relation)) }}
    {%- endif -%}
    {%- set filtered -%}
        (select * from {{ relation }} where {{ gold_last_run(relation)['changed_rows'] }}) dbt_subquery
    {%- endset -%}
    {{ return(filtered) }}
{%- endmacro %}
