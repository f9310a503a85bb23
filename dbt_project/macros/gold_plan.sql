{#-
  The plan of a source's gold run: one row per live upstream table saying what the run does to its gold and
  history tables, computed once for every table of the source (the model `gold_<source>__plan`, generated with the
  source's gold models, materializes it in lake_staging).

  A table is untouched when nothing since its recorded state (gold.tables: the consistent ts and silver_seq it is
  known right as of) can change it: no change silver gained since, no change the consistent timestamp has just
  passed, no DDL, no TRUNCATE, no snapshot, no rebuild asked for. Its rows upstream were the same at the new
  consistent timestamp as at the old one, so it is exactly right at the new one with no work at all, and the run
  neither builds, tests, counts nor commits it. The changes are found in one pass over what silver gained: the
  literal bounds (the source's oldest recorded state) let silver's file statistics skip every older file.

  Modes, per layer: `rebuild` (new, renamed, truncated, snapshot loaded since, or asked for), `schema` (the
  schema changed: the materialization widens in place or rebuilds), `incremental` (changes to apply),
  `unchanged`. `check`: what the run's checks read of the table (`whole` after a rebuild or a schema change, or when
  a full check is asked for; `changed`: the rows the run changed; null: nothing).

  A rebuild or a full check is asked for with the var `gold_request` ({source, rebuild_gold, rebuild_history,
  full_check}; a rebuild list is [[database, table], ...] or true for every table), given only when asked.
-#}

{#- The oldest recorded state of the source's gold tables: the bounds of what the run must read; none before the
    source's first gold run. -#}
{% macro gold_baseline(source_name) -%}
    {%- if not execute -%} {{ return(none) }} {%- endif -%}
    {%- set query -%}
        select min(consistent_ts), min(silver_seq)
        from {{ ref('stg_gold_tables') }}
        where source_name = {{ sql_string(source_name) }}
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {%- if row[0] is none or row[1] is none -%} {{ return(none) }} {%- endif -%}
    {{ return({'ts': row[0], 'seq': row[1]}) }}
{%- endmacro %}


{#- A SQL predicate: the table is among the upstream tables `asked` ([[database, table], ...], true: all). -#}
{% macro gold_asked_for(asked, database_column, table_column) -%}
    {%- if asked is sameas true -%} true
    {%- elif not asked -%} false
    {%- else -%}
        ({%- for pair in asked -%}
            {{ ' or ' if not loop.first }}({{ database_column }} = {{ sql_string(pair[0]) }} and {{ table_column }} = {{ sql_string(pair[1]) }})
        {%- endfor -%})
    {%- endif -%}
{%- endmacro %}


{% macro gold_plan(source_name) %}
{%- set baseline = gold_baseline(source_name) -%}
{%- set request = var('gold_request', {}) -%}
{%- set request = request if request.get('source') == source_name else {} -%}

with

gold_tables as (

    select * from {{ ref('int_gold_tables') }}
    where source_name = {{ sql_string(source_name) }}

),

recorded as (

    select * from {{ ref('stg_gold_tables') }}
    where source_name = {{ sql_string(source_name) }}

),

new_changes as (

    select table_uid, silver_seq, commit_ts
    from {{ ref('int_table_changes') }}
    where source_name = {{ sql_string(source_name) }}
    {%- if baseline is not none %}
      and (silver_seq > {{ sql_integer(baseline.seq) }} or commit_ts > {{ sql_integer(baseline.ts) }})
    {%- endif %}

),

changed_tables as (

    select
        new_changes.table_uid,
        count(*) as changes,
        bool_or(new_changes.commit_ts <= recorded.consistent_ts) as late
    from new_changes
    inner join gold_tables
        on new_changes.table_uid = gold_tables.table_uid
        and new_changes.commit_ts <= gold_tables.consistent_ts
    inner join recorded
        on new_changes.table_uid = recorded.table_uid
    where new_changes.silver_seq > recorded.silver_seq
       or new_changes.commit_ts > recorded.consistent_ts
    group by new_changes.table_uid

),

compared as (

    select
        gold_tables.*,
        recorded.table_uid is not null as recorded,
        recorded.consistent_ts as previous_consistent_ts,
        recorded.silver_seq as previous_silver_seq,
        recorded.columns as previous_columns,
        recorded.key_columns as previous_key_columns,
        coalesce(changed_tables.changes, 0) as changes,
        coalesce(changed_tables.late, false) as late,
        case
            when recorded.table_uid is null then 'new table'
            when recorded.upstream_database <> gold_tables.upstream_database
                or recorded.upstream_table <> gold_tables.upstream_table then 'renamed'
            when gold_tables.truncated_at_ts > recorded.consistent_ts then 'truncated'
            when gold_tables.snapshot_at_ts > recorded.consistent_ts then 'a Dumpling snapshot was loaded'
        end as rebuild_reason,
        recorded.schema_fingerprint is distinct from gold_tables.schema_fingerprint as schema_changed,
        {{ gold_asked_for(request.get('rebuild_gold'), 'gold_tables.upstream_database', 'gold_tables.upstream_table') }}
            as rebuild_gold_asked,
        {{ gold_asked_for(request.get('rebuild_history'), 'gold_tables.upstream_database', 'gold_tables.upstream_table') }}
            as rebuild_history_asked
    from gold_tables
    left join recorded
        on gold_tables.table_uid = recorded.table_uid
    left join changed_tables
        on gold_tables.table_uid = changed_tables.table_uid

),

planned as (

    select
        compared.*,
        case
            when rebuild_gold_asked then 'rebuild'
            when rebuild_reason is not null then 'rebuild'
            when schema_changed then 'schema'
            when changes > 0 then 'incremental'
            else 'unchanged'
        end as gold_mode,
        case
            when rebuild_history_asked then 'rebuild'
            when rebuild_reason is not null then 'rebuild'
            when schema_changed then 'schema'
            when changes > 0 then 'incremental'
            else 'unchanged'
        end as history_mode,
        coalesce(
            case when rebuild_gold_asked or rebuild_history_asked then 'rebuild requested' end,
            rebuild_reason,
            case when schema_changed then 'schema changed' end,
            case when changes > 0 then 'changes since the last run' end,
            'nothing to apply'
        ) as reason
    from compared

),

checked as (

    select
        planned.*,
        case
            when {{ 'true' if request.get('full_check') else 'false' }} then 'whole'
            when gold_mode in ('rebuild', 'schema') then 'whole'
            when gold_mode = 'incremental' then 'changed'
        end as gold_check,
        case
            when {{ 'true' if request.get('full_check') else 'false' }} then 'whole'
            when history_mode in ('rebuild', 'schema') then 'whole'
            when history_mode = 'incremental' then 'changed'
        end as history_check
    from planned

)

select * from checked
{% endmacro %}
