{#-
  History: every version of every row of one upstream table (by table_uid), up to its source's consistent
  timestamp, in the table's latest shape. Built from every change silver holds, not from run-to-run
  snapshots: two updates of a row inside one run are two versions.

  A change that is not a delete opens a version at its commit ts; the row's next change closes it (a delete
  only closes), and so does the first TRUNCATE TABLE or Dumpling snapshot after it (a snapshot is the table's
  state at its ts: what was open before is closed there, and its rows open versions). `_valid_to_ts` is null while
  the version is current. Values are shaped exactly as gold's (gold_changes): renames, drops and retypes apply to
  history as to the current table.

  The `gold_history` materialization follows the plan's history mode (spark_jobs/gold/plan.py): rebuild replaces the table
  from silver; incremental, when every change is newer than the recorded state, reads only the new changes and
  in one MERGE closes each changed key's open version at the key's first new change and adds the versions the new
  changes open; when a change came late it recomputes every version of the changed keys (a late change splits the
  version it falls into), replacing those keys' versions.

  A keyless table's history holds its changes as its gold table does (deletes too), each a version of its own
  that only a TRUNCATE or a snapshot closes: rows without identity have no versions to follow.

  The MERGE is safe to run again over what a killed run wrote: a version is matched by its key and start (and
  written again, equal), and only a version still open and older than the key's first new change is closed.
-#}

{#- Oldest change first: the reverse of newest_change_first. -#}
{% macro oldest_change_first() -%}
    commit_ts, op_order, kafka_partition, kafka_offset, event_index
{%- endmacro %}


{#- The model body: the versions to publish (rebuild), or for an incremental run the versions the candidate
    changes open with one `_close_at_ts` row per changed key: the key's first new change, where its open version
    ends (with a late change, every version of those keys is replaced instead). -#}
{% macro gold_history(source_name, table_uid) %}
{%- set plan = gold_refresh_plan(source_name, table_uid, 'history') -%}
{{ gold_plan_comment(plan) }}
{%- set closing = plan.mode == 'incremental' -%}

with

published_changes as (

    {{ gold_changes(plan, closing and not plan.late, false) }}

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
        *,
        least(
            next_change_ts,
            array_min(filter(
                cast(array({% for ts in plan.truncations %}{{ ', ' if not loop.first }}{{ sql_integer(ts) }}{% endfor %}) as array<bigint>),
                t -> t > commit_ts
            ))
        ) as closed_at_ts
    from sequenced
    {%- if not plan.get('keyless') %}
    where op <> 'delete'
    {%- endif %}

),

open_for_a_while as (

    select * from versions
    where closed_at_ts is null or closed_at_ts > commit_ts

),

typed as (

    select
        row_key as _row_key,
        commit_ts as _valid_from_ts,
        closed_at_ts as _valid_to_ts,
        {{ tidb_ts_time('commit_ts') }} as _valid_from,
        {{ tidb_ts_time('closed_at_ts') }} as _valid_to,
        op as _op,
        closed_at_ts is null as _is_current
        {{- gold_typed_columns(plan) }}
    from open_for_a_while

)

{%- if closing %},

closings as (

    select row_key as _row_key, min(commit_ts) as _close_at_ts
    from candidate_changes
    group by row_key

),

merged as (

    select typed.*, cast(null as bigint) as _close_at_ts from typed
    union all
    select
        closings._row_key,
        cast(null as bigint) as _valid_from_ts,
        cast(null as bigint) as _valid_to_ts,
        cast(null as timestamp) as _valid_from,
        cast(null as timestamp) as _valid_to,
        cast(null as string) as _op,
        cast(null as boolean) as _is_current
        {%- for column in plan.columns %},
        cast(null as {{ gold_type(column['type'], plan.types) | trim }}) as {{ quote_name(column['name']) }}
        {%- endfor %},
        closings._close_at_ts
    from closings

)

select * from merged
{%- else %}

select * from typed
{%- endif %}
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
    {%- set plan = gold_compiled_plan(sql) -%}
    {{ run_hooks(pre_hooks) }}
    {%- if plan.mode == 'rebuild' -%}
        {{ gold_replace_table('history', target_relation, plan, table_uid, sql) }}
    {%- elif plan.mode == 'incremental' -%}
        {{ gold_widen_columns('history', target_relation, plan) }}
        {%- set columns = ['_row_key', '_valid_from_ts', '_valid_to_ts', '_valid_from', '_valid_to', '_op', '_is_current'] -%}
        {%- for column in plan.columns -%} {%- do columns.append(quote_name(column['name'])) -%} {%- endfor -%}
        {%- if not plan.late -%}
            {#- a version is written once (matched again by key and start), and a key's open version closes at
                the key's first new change -#}
            {% call statement('main') -%}
                merge into {{ target_relation }} as t
                using ({{ sql }}) as s
                on t._row_key = s._row_key
                   and ((s._close_at_ts is null and t._valid_from_ts = s._valid_from_ts)
                        or (s._close_at_ts is not null and t._valid_to_ts is null and t._valid_from_ts < s._close_at_ts))
                when matched and s._close_at_ts is not null then update set
                    t._valid_to_ts = s._close_at_ts,
                    t._valid_to = {{ tidb_ts_time('s._close_at_ts') }},
                    t._is_current = false
                when matched then update set {% for column in columns %}{{ ', ' if not loop.first }}t.{{ column }} = s.{{ column }}{% endfor %}
                when not matched and s._close_at_ts is null then insert ({{ columns | join(', ') }})
                    values ({% for column in columns %}{{ ', ' if not loop.first }}s.{{ column }}{% endfor %})
            {%- endcall %}
        {%- else -%}
            {#- a late change splits a version: every version of the changed keys is computed again -#}
            {% call statement('replace_versions') -%}
                delete from {{ target_relation }}
                where _row_key in (select _row_key from ({{ sql }}) where _close_at_ts is not null)
            {%- endcall %}
            {% call statement('main') -%}
                insert into {{ target_relation }} ({{ columns | join(', ') }})
                select {{ columns | join(', ') }} from ({{ sql }}) where _close_at_ts is null
            {%- endcall %}
        {%- endif -%}
    {%- else -%}
        {% call statement('main') -%} select 'nothing to apply to {{ target_relation }}' {%- endcall %}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
