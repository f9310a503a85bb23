{#-
  Queries (each a whole SELECT with the same columns) as one UNION ALL, nested in halves. Spark's parser reads a
  chain of N unions N levels deep and overflows its stack near a thousand (the checks of a first build of 1,000
  tables did); halves nest log2(N) levels, and Spark's optimizer makes one union of them all the same.

  `tasks`: at most that many tasks read the union. A union has a task per file of every query, and every task
  carries the whole plan and reports every node's metrics, so a task per table makes a union of N tables cost N²
  (the checks of 1,000 tables took four minutes); coalesced, the tasks read several tables each.
-#}
{% macro union_all(queries, tasks=none) -%}
    {%- if tasks is not none and queries | length > tasks -%}
        select /*+ COALESCE({{ tasks | int }}) */ * from ({{ union_all(queries) }})
    {%- elif queries | length == 1 -%}
        {{ queries[0] }}
    {%- else -%}
        {%- set half = (queries | length) // 2 -%}
        ({{ union_all(queries[:half]) }})
        union all
        ({{ union_all(queries[half:]) }})
    {%- endif -%}
{%- endmacro %}
