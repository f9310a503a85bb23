{#-
  A gold or history table as the source's newest publication tagged it: `from {{ published('gold_shop.shop__orders',
  'shop') }}`. Every table read this way within one model is at the same TiDB timestamp, whatever commits while
  the model runs (spark_jobs/gold/publish.py writes the tags, then the gold.publications row, last).
-#}
{% macro published(relation, source_name) -%}
    {%- if not execute -%}
        {{ relation }}
    {%- else -%}
        {%- set newest -%}
            select tag from gold.publications
            where source = {{ sql_string(source_name) }}
            order by finished_at desc, consistent_ts desc
            limit 1
        {%- endset -%}
        {%- set rows = run_query(newest).rows -%}
        {%- if rows | length == 0 -%}
            {{ exceptions.raise_compiler_error("source " ~ source_name ~ " has no gold publication yet") }}
        {%- endif -%}
        {{ relation }} version as of {{ sql_string(rows[0][0]) }}
    {%- endif -%}
{%- endmacro %}
