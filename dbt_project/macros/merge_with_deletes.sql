{#-
  Gold's incremental merge: a source row whose `_op` is delete removes the target row, any other
  updates or inserts it. dbt-spark admits no custom strategy names, so this replaces its merge
  (only gold models use merge here). A batch with no rows merges nothing and commits no snapshot.
-#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- set pending = run_query('select count(*) from ' ~ source).columns[0].values()[0] -%}
  {%- if pending == 0 -%}
    select 'no changes for {{ target }}' as merge_skipped
  {%- else -%}
    merge into {{ target }} as t
        using {{ source }} as s
        on t.{{ unique_key }} = s.{{ unique_key }}
        when matched and s._op = 'delete' then delete
        when matched then update set *
        when not matched and s._op <> 'delete' then insert *
  {%- endif -%}
{% endmacro %}
