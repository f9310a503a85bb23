{#-
  The checks of a source's gold run, in one query for every table the run built (and every table, when a full
  check is asked for): the generic test `gold_run_checks`, which each source's `gold_<source>__checks` model
  carries. Per table, where the plan says (gold_plan.sql: `gold_check` / `history_check`):

  - gold: `_row_key` unique and not null and `_op` insert or update among the rows it checks; and as many of those
    rows as keys silver says are live (the key's newest published change, after the last truncation or snapshot,
    is not a delete);
  - history: no version listed twice, at most one open version per key.

  `whole` checks every row of the table (after a rebuild or a schema change, or a full check); `changed` checks
  the keys the run changed: silver's new changes (read between the plan's literal bounds, so the check costs what
  the run's delta costs), or with a late change every change of those keys. Each failing row names the table, the
  problem and a key or the two counts.
-#}

{#- The tables a run checks: one dict per table, from the plan and the graph (relations by the models' config). -#}
{% macro gold_checked_tables(source_name, plan_relation) %}
    {%- if not execute -%} {{ return([]) }} {%- endif -%}
    {%- set query -%}
        select table_uid, gold_check, history_check, previous_consistent_ts, previous_silver_seq, late
        from {{ plan_relation }}
        where gold_check is not null or history_check is not null
    {%- endset -%}
    {%- set planned = {} -%}
    {%- for row in run_query(query).rows -%}
        {%- do planned.update({row[0]: {'uid': row[0], 'gold_check': row[1], 'history_check': row[2],
                                        'previous_ts': row[3], 'previous_seq': row[4], 'late': row[5]}}) -%}
    {%- endfor -%}
    {%- for node in graph.nodes.values() -%}
        {%- set uid = node.config.get('table_uid') -%}
        {%- if node.resource_type == 'model' and node.config.get('source_name') == source_name and uid in planned -%}
            {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
            {%- set layer = 'gold' if node.config.materialized == 'gold_current_state' else 'history' -%}
            {%- do planned[uid].update({layer: relation}) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(planned.values() | list) }}
{% endmacro %}


{#- The rows of one table's check: `gold` or `history`, `whole` or the keys the run changed (table_keys). -#}
{% macro gold_checked_rows(table, layer, index) -%}
    {%- if table[layer ~ '_check'] == 'whole' -%}
        select * from {{ table[layer] }}
    {%- else -%}
        select checked.* from {{ table[layer] }} as checked
        left semi join table_keys
            on table_keys.table_index = {{ index }} and checked._row_key = table_keys.row_key
    {%- endif -%}
{%- endmacro %}


{% test gold_run_checks(model, source_name) %}
{%- set inputs = {'gold_tables': ref('int_gold_tables'), 'changes': ref('int_table_changes')} -%}
{%- set tables = gold_checked_tables(source_name, model) -%}
{%- set bounded = tables | selectattr('gold_check', 'equalto', 'changed') | rejectattr('late') | list -%}
{%- set seq = bounded | map(attribute='previous_seq') | min if bounded else none -%}
{%- set ts = bounded | map(attribute='previous_ts') | min if bounded else none -%}

with

{%- if tables | length == 0 %}

problems as (

    select cast(null as string) as relation, cast(null as string) as problem, cast(null as string) as detail
    where false

)

{%- else %}

checked_tables as (

    {%- for table in tables %}
    {{ 'union all' if not loop.first }}
    select
        {{ loop.index }} as table_index,
        {{ sql_string(table.uid) }} as table_uid,
        {{ 'true' if table.gold_check == 'whole' or table.late else 'false' }} as all_changes,
        {{ sql_integer(table.previous_ts if table.previous_ts is not none else -1) }} as previous_ts,
        {{ sql_integer(table.previous_seq if table.previous_seq is not none else -1) }} as previous_seq,
        {{ 'true' if table.gold_check == 'whole' else 'false' }} as whole
    {%- endfor %}

),

gold_tables as (

    select * from {{ inputs.gold_tables }}
    where source_name = {{ sql_string(source_name) }}

),

published_changes as (

    select
        checked_tables.table_index,
        checked_tables.all_changes,
        checked_tables.whole,
        checked_tables.previous_ts,
        checked_tables.previous_seq,
        table_changes.*
    from {{ inputs.changes }} as table_changes
    inner join checked_tables
        on table_changes.table_uid = checked_tables.table_uid
    inner join gold_tables
        on table_changes.table_uid = gold_tables.table_uid
        and table_changes.commit_ts <= gold_tables.consistent_ts
        and table_changes.commit_ts > coalesce(gold_tables.truncated_at_ts, -1)
        and table_changes.commit_ts >= coalesce(gold_tables.snapshot_at_ts, -1)
    where table_changes.source_name = {{ sql_string(source_name) }}
    {%- if seq is not none and bounded | length == tables | length %}
      and (table_changes.silver_seq > {{ sql_integer(seq) }} or table_changes.commit_ts > {{ sql_integer(ts) }})
    {%- endif %}

),

new_changes as (

    select * from published_changes
    where silver_seq > previous_seq or commit_ts > previous_ts

),

table_keys as (

    select distinct table_index, row_key from new_changes

),

silver_changes as (

    select * from published_changes where whole
    union all
    select published_changes.*
    from published_changes
    left semi join table_keys
        on published_changes.table_index = table_keys.table_index and published_changes.row_key = table_keys.row_key
    where all_changes and not whole
    union all
    select * from new_changes where not all_changes

),

silver_live_keys as (

    select table_index, count_if(op <> 'delete') as live_keys
    from (
        select
            table_index,
            op,
            row_number() over (partition by table_index, row_key order by {{ newest_change_first() }}) as version_rank
        from silver_changes
    )
    where version_rank = 1
    group by table_index

),

{%- set branches = [] %}
{%- for table in tables %}
    {%- set index = loop.index %}
    {%- if table.gold_check and table.gold is defined %}
        {%- set branch %}
    select {{ sql_string(table.gold) }} as relation, problem, detail
    from (
        select
            case
                when _row_key is null then '_row_key is null'
                when count(*) > 1 then 'a _row_key more than once'
                else '_op is not insert or update'
            end as problem,
            _row_key as detail
        from ({{ gold_checked_rows(table, 'gold', index) }})
        group by _row_key
        having _row_key is null or count(*) > 1 or bool_or(_op is null or _op not in ('insert', 'update'))
    )
    union all
    select
        {{ sql_string(table.gold) }} as relation,
        'gold rows differ from the keys silver says are live' as problem,
        concat('gold ', gold_rows, ', silver ', live_keys) as detail
    from (
        select
            (select count(*) from ({{ gold_checked_rows(table, 'gold', index) }})) as gold_rows,
            (select coalesce(max(live_keys), 0) from silver_live_keys where table_index = {{ index }}) as live_keys
    )
    where gold_rows <> live_keys
        {%- endset %}
        {%- do branches.append(branch) %}
    {%- endif %}
    {%- if table.history_check and table.history is defined %}
        {%- set branch %}
    select {{ sql_string(table.history) }} as relation, problem, detail
    from (
        select 'a version listed more than once' as problem, concat(_row_key, ' from ', _valid_from_ts) as detail
        from ({{ gold_checked_rows(table, 'history', index) }})
        group by _row_key, _valid_from_ts
        having count(*) > 1
        union all
        select 'more than one open version' as problem, _row_key as detail
        from ({{ gold_checked_rows(table, 'history', index) }})
        where _valid_to_ts is null
        group by _row_key
        having count(*) > 1
    )
        {%- endset %}
        {%- do branches.append(branch) %}
    {%- endif %}
{%- endfor %}

problems as (
{{ branches | join('\n    union all\n') }}
{%- if not branches %}
    select cast(null as string) as relation, cast(null as string) as problem, cast(null as string) as detail
    where false
{%- endif %}

)

{%- endif %}

select * from problems

{% endtest %}
