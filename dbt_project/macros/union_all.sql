{#-
  Queries (each a whole SELECT with the same columns) as one UNION ALL, nested in halves. Spark's parser reads a
  chain of N unions N levels deep and overflows its stack near a thousand (the checks of a first build of 1,000
  tables did); halves nest log2(N) levels, and Spark's optimizer makes one union of them all the same.
-#}
{% macro union_all(queries) -%}
    {%- if queries | length == 1 -%}
        {{ queries[0] }}
    {%- else -%}
        {%- set half = (queries | length) // 2 -%}
        ({{ union_all(queries[:half]) }})
        union all
        ({{ union_all(queries[half:]) }})
    {%- endif -%}
{%- endmacro %}
