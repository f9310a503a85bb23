{#-
  A gold or history table as the source's newest publication pinned it: `from {{ published('gold_shop.shop__orders',
  'shop') }}`. Every table read this way within one model is at the same TiDB timestamp, whatever commits while
  the model runs: the publication row (spark_jobs/gold/publish.py, written last) names each table's snapshot id.
-#}
{% macro published(relation, source_name) -%}
    {%- if not execute -%}
        {{ relation }}
    {%- else -%}
        {%- set newest -%}
            select tag, try_element_at(filter(tables, t -> t.relation = {{ sql_string(relation) }}), 1).snapshot_id as pinned
            from gold.publications
            where source = {{ sql_string(source_name) }}
            order by finished_at desc, consistent_ts desc
            limit 1
        {%- endset -%}
        {%- set rows = run_query(newest).rows -%}
        {%- if rows | length == 0 -%}
            {{ exceptions.raise_compiler_error("source " ~ source_name ~ " has no gold publication yet") }}
        {%- endif -%}
        {%- if rows[0][1] is none -%}
            {{ exceptions.raise_compiler_error("publication " ~ rows[0][0] ~ " of source " ~ source_name
                ~ " pins no snapshot of " ~ relation) }}
        {%- endif -%}
        {{ relation }} version as of {{ rows[0][1] | int }}
    {%- endif -%}
{%- endmacro %}
