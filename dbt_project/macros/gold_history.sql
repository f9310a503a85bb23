{#-
  History: every version of every row of one upstream table (by table_uid), up to its source's consistent
  timestamp, in the table's latest shape. Built from every change silver holds, not from run-to-run
  snapshots: two updates of a row inside one run are two versions.

  A change that is not a delete opens a version at its commit ts; the row's next change closes it (a delete
  only closes), and so does the first TRUNCATE TABLE or Dumpling snapshot after it (a snapshot is the table's
  state at its ts: what was open before is closed there, and its rows open versions). `_valid_to_ts` is null while the version is
  current. Values are shaped exactly as gold's (gold_values): renames, drops and retypes apply to history as
  to the current table.

  The `gold_history` materialization shares gold's plan (gold_refresh_plan, read from this table's own
  properties): it rebuilds when gold would. Otherwise, when every new change is newer than what the last run
  published, it closes the open version of each changed key at the key's first new change and appends the
  versions the new changes open, reading only the new changes; when a change came late (gold_late_changes), it
  recomputes every version of the keys that changed (a late change splits the version it falls into),
  replacing those keys' versions.
-#}

{#- Oldest change first: the reverse of newest_change_first. -#}
{% macro oldest_change_first() -%}
    commit_ts, op_order, kafka_partition, kafka_offset, event_index
{%- endmacro %}


{#- The keys with a change that silver gained since the last run or that the consistent ts has just passed, each
    with the commit ts of the first such change. -#}
{% macro history_changed_keys(table_uid, plan) %}
    select table_changes.row_key, min(table_changes.commit_ts) as first_change_ts
    from {{ ref('int_table_changes') }} as table_changes
    inner join {{ ref('int_gold_tables') }} as gold_table
        on table_changes.source_name = gold_table.source_name
        and table_changes.table_uid = gold_table.table_uid
        and table_changes.commit_ts <= gold_table.consistent_ts
    where gold_table.source_name = {{ sql_string(var('source_name')) }}
      and gold_table.table_uid = {{ sql_string(table_uid) }}
      and (table_changes.silver_seq > {{ sql_integer(plan.previous_silver_seq) }}
           or table_changes.commit_ts > {{ sql_integer(plan.previous_consistent_ts) }})
    group by table_changes.row_key
{% endmacro %}


{#- The model body: the versions to publish (rebuild) or the versions of the changed keys (incremental). -#}
{% macro gold_history(table_uid) %}
{%- set source_name = var('source_name') -%}
{%- set plan = gold_refresh_plan(table_uid) -%}

with

{{ gold_table_inputs(table_uid) }}

truncations as (

    select coalesce(collect_list(valid_from_ts), array()) as truncated_at
    from {{ ref('int_schema_versions') }}
    where source_name = {{ sql_string(source_name) }}
      and table_uid = {{ sql_string(table_uid) }}
      and ddl_type in ('truncate_table', 'snapshot')

),

published_changes as (

    select table_changes.*
    from table_changes
    inner join gold_table
        on table_changes.commit_ts <= gold_table.consistent_ts

),

{{ candidate_changes(plan) }}

sequenced as (

    select
        *,
        lead(commit_ts) over (partition by row_key order by {{ oldest_change_first() }}) as next_change_ts
    from candidate_changes

),

versions as (

    select
        sequenced.*,
        least(
            sequenced.next_change_ts,
            array_min(filter(truncations.truncated_at, t -> t > sequenced.commit_ts))
        ) as closed_at_ts
    from sequenced
    cross join truncations
    where sequenced.op <> 'delete'

),

open_for_a_while as (

    select * from versions
    where closed_at_ts is null or closed_at_ts > commit_ts

),

shaped as (

    select
        open_for_a_while.row_key as _row_key,
        open_for_a_while.commit_ts as _valid_from_ts,
        open_for_a_while.closed_at_ts as _valid_to_ts,
        open_for_a_while.op as _op,
        {{ gold_values('open_for_a_while') }} as _values
    from open_for_a_while
    cross join gold_table

),

typed as (

    select
        _row_key,
        _valid_from_ts,
        _valid_to_ts,
        {{ tidb_ts_time('_valid_from_ts') }} as _valid_from,
        {{ tidb_ts_time('_valid_to_ts') }} as _valid_to,
        _op,
        _valid_to_ts is null as _is_current
        {{- gold_typed_columns(plan) }}
    from shaped

)

select * from typed
{% endmacro %}


{#- The physical time of a TiDB timestamp (TSO): its high bits are milliseconds since the Unix epoch. -#}
{% macro tidb_ts_time(expression) -%}
    timestamp_millis(shiftright({{ expression }}, 18))
{%- endmacro %}


{#- Rows of a history table as they were at TiDB timestamp `ts`: the versions open at that moment. The
    history table's own columns (`_valid_from_ts` ...) come along; select the table's columns by name to
    drop them. -#}
{% macro as_of(history_relation, ts) -%}
    select * from {{ history_relation }}
    where _valid_from_ts <= {{ sql_integer(ts) }}
      and (_valid_to_ts is null or _valid_to_ts > {{ sql_integer(ts) }})
{%- endmacro %}


{% materialization gold_history, adapter='spark' %}
    {%- set table_uid = config.require('table_uid') -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set plan = gold_refresh_plan(table_uid) -%}
    {{ run_hooks(pre_hooks) }}
    {%- if plan.mode == 'rebuild' -%}
        {{ gold_replace_table('history', target_relation, plan, table_uid, sql) }}
    {%- else -%}
        {{ gold_widen_columns('history', target_relation, plan) }}
        {%- set changed = run_query("select count(*) from (" ~ history_changed_keys(table_uid, plan) ~ ")").columns[0].values()[0] -%}
        {%- if changed > 0 and plan.late_changes == 0 -%}
            {#- every change is newer than the history: it closes each changed key's open version and adds its own.
                Versions newer than the recorded consistent ts are a killed run's, appended again below. -#}
            {% call statement('drop_unrecorded_versions') -%}
                delete from {{ target_relation }}
                where _valid_from_ts > {{ sql_integer(plan.previous_consistent_ts) }}
            {%- endcall %}
            {% call statement('close_versions') -%}
                merge into {{ target_relation }} as t
                using ({{ history_changed_keys(table_uid, plan) }}) as s
                on t._row_key = s.row_key and t._valid_to_ts is null
                when matched then update set
                    t._valid_to_ts = s.first_change_ts,
                    t._valid_to = {{ tidb_ts_time('s.first_change_ts') }},
                    t._is_current = false
            {%- endcall %}
        {%- elif changed > 0 -%}
            {#- a late change splits a version: every version of the changed keys is computed again -#}
            {% call statement('replace_versions') -%}
                delete from {{ target_relation }}
                where _row_key in (select row_key from ({{ history_changed_keys(table_uid, plan) }}))
            {%- endcall %}
        {%- endif -%}
        {%- if changed > 0 -%}
            {% call statement('main') -%}
                insert into {{ target_relation }} {{ sql }}
            {%- endcall %}
        {%- else -%}
            {% call statement('main') -%} select 'no changes for {{ target_relation }}' {%- endcall %}
        {%- endif -%}
        {{ gold_record_progress('history', target_relation, plan, table_uid, changed) }}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
