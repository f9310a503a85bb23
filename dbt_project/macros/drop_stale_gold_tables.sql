{#-
  Drop the gold tables of a source that no published upstream table wants any more: the table was
  dropped upstream, or renamed (its gold table now has the new name). Run by build_gold with
  `dbt run-operation drop_stale_gold_tables --args {namespace, keep}`: arguments, not vars, so the
  build's dbt commands share one set of vars and dbt parses the project once, not once per command.
-#}
{% macro drop_stale_gold_tables(namespace, keep) %}
    {%- for row in run_query('show tables in ' ~ quote_name(namespace)).rows -%}
        {%- set table = row[1] -%}
        {%- if not row[2] and table not in keep -%}
            {{ log("gold " ~ namespace ~ "." ~ table ~ ": dropped (its upstream table was dropped or renamed)", info=true) }}
            {%- do run_query('drop table if exists ' ~ quote_name(namespace) ~ '.' ~ quote_name(table)) -%}
        {%- endif -%}
    {%- endfor -%}
{% endmacro %}
