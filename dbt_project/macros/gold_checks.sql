{#-
  The checks of a source's gold run, in one query for every table the run built (and every table, when a full
  check is asked for): the generic test `gold_run_checks`, which each source's `gold_<source>__checks` model
  carries. Per table, where the plan says (spark_jobs/gold/plan.py: `gold_check` / `history_check`):

  - gold: `_row_key` unique and not null and `_op` insert or update among the rows it checks; and as many of those
    rows as keys silver says are live (the key's newest published change, after the last truncation or snapshot,
    is not a delete); a keyless table's change table holds every change, deletes too. By the table's delete mode:
    soft keeps a row for every key, `_op` delete exactly where `_deleted_at` is set; ignore counts a key live
    unless its newest change is a delete the mode applies (half of a key change, gold_current_state);
  - history: no version listed twice, at most one open version per key.

  `whole` checks every row of the table (after a rebuild or a schema change, or a full check); `changed` checks
  the keys the run changed: silver's new changes (read between the plan's literal bounds, so the check costs what
  the run's delta costs), or with a late change every change of those keys. Each failing row names the table, the
  problem and a key or the two counts.
-#}

{#- The tables a run checks: one dict per table, from the plan and the graph (relations by the models' config), its
    `position` the table_index its rows carry in the checks. -#}
{% macro gold_checked_tables(source_name, plan_relation) %}
    {%- if not execute -%} {{ return([]) }} {%- endif -%}
    {%- set query -%}
        select table_uid, gold_check, history_check, previous_consistent_ts, previous_silver_seq, late,
               to_json(versions), consistent_ts, truncated_at_ts, snapshot_at_ts, size(key_columns) = 0,
               coalesce(delete_mode, 'hard')
        from {{ plan_relation }}
        where gold_check is not null or history_check is not null
    {%- endset -%}
    {%- set planned = {} -%}
    {%- for row in run_query(query).rows -%}
        {%- do planned.update({row[0]: {'uid': row[0], 'gold_check': row[1], 'history_check': row[2],
                                        'previous_ts': row[3], 'previous_seq': row[4], 'late': row[5],
                                        'versions': fromjson(row[6]), 'consistent_ts': row[7],
                                        'truncated_at_ts': row[8], 'snapshot_at_ts': row[9],
                                        'keyless': row[10], 'delete_mode': row[11]}}) -%}
    {%- endfor -%}
    {%- for node in graph.nodes.values() -%}
        {%- set uid = node.config.get('table_uid') -%}
        {%- if node.resource_type == 'model' and node.config.get('source_name') == source_name and uid in planned -%}
            {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
            {%- set layer = 'gold' if node.config.materialized == 'gold_current_state' else 'history' -%}
            {%- do planned[uid].update({layer: relation}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set checked = planned.values() | list -%}
    {%- for table in checked -%} {%- do table.update({'position': loop.index}) -%} {%- endfor -%}
    {{ return(checked) }}
{% endmacro %}


{#- The checked tables as rows, with what the checks need of each as columns: the query grows by a row per table,
    never by a CASE branch per table (CASEs over 1,000 tables exhausted Spark's optimizer). Per table: its
    relations; whether its checks read it whole; whether they read every change it has (whole, or with a late
    change) or only those new to it (silver gained them, or the consistent ts has just passed them: `since_seq`,
    `since_ts`); which changes are published (after its last truncation and snapshot; a change table keeps the
    changes before a truncation); whether every key has a gold row; whether its deletes are ignored. -#}
{% macro gold_checked_table_rows(tables) -%}
    select * from values
    {%- for table in tables %}
        {{ ', ' if not loop.first }}({{ table.position }},
            {{ sql_string(table.gold) if table.gold is defined else 'cast(null as string)' }},
            {{ sql_string(table.history) if table.history is defined else 'cast(null as string)' }},
            {{ 'true' if table.gold_check and table.gold is defined else 'false' }},
            {{ 'true' if table.gold_check == 'whole' else 'false' }},
            {{ 'true' if table.gold_check == 'whole' or table.late else 'false' }},
            cast({{ sql_integer(table.previous_seq if table.previous_seq is not none else -1) }} as bigint),
            cast({{ gold_check_since(table) }} as bigint),
            cast({{ sql_integer(-1 if table.keyless or table.truncated_at_ts is none else table.truncated_at_ts) }} as bigint),
            cast({{ sql_integer(-1 if table.keyless or table.snapshot_at_ts is none else table.snapshot_at_ts) }} as bigint),
            {{ gold_check_every_key(table) }},
            {{ gold_check_ignores_deletes(table) }})
    {%- endfor %}
    as checked_tables(table_index, gold_relation, history_relation, gold_checked, checked_whole, read_all, since_seq,
                      since_ts, truncated_at_ts, snapshot_at_ts, every_key, ignores_deletes)
{%- endmacro %}


{#- The names each checked table had, and while it had them, as rows: a silver change is a table's when its
    name and commit ts fall in one of them. -#}
{% macro gold_checked_version_rows(tables) -%}
    {%- set rows = [] -%}
    {%- for table in tables -%}
        {%- for version in table.versions -%}
            {%- do rows.append('(' ~ table.position ~ ', ' ~ sql_string(version.database) ~ ', ' ~ sql_string(version.table)
                               ~ ', cast(' ~ sql_integer(version.from_ts) ~ ' as bigint), cast('
                               ~ sql_integer(version.get('to_ts')) ~ ' as bigint))') -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if rows -%}
    select * from values
        {{ rows | join(',\n        ') }}
    as checked_versions(table_index, upstream_database, upstream_table, from_ts, to_ts)
    {%- else -%}
    select cast(null as int) as table_index, cast(null as string) as upstream_database,
        cast(null as string) as upstream_table, cast(null as bigint) as from_ts, cast(null as bigint) as to_ts
    where false
    {%- endif -%}
{%- endmacro %}


{#- Per checked table: the consistent ts it was recorded right as of (-1: none). -#}
{% macro gold_check_since(table) -%}
    {{ sql_integer(table.previous_ts if table.previous_ts is not none else -1) }}
{%- endmacro %}

{% macro gold_check_keyless(table) -%}
    {{ 'true' if table.keyless else 'false' }}
{%- endmacro %}

{#- Whether every key has a gold row, deletes too: a change table, or soft deletes. -#}
{% macro gold_check_every_key(table) -%}
    {{ 'true' if table.keyless or table.delete_mode == 'soft' else 'false' }}
{%- endmacro %}

{% macro gold_check_ignores_deletes(table) -%}
    {{ 'true' if not table.keyless and table.delete_mode == 'ignore' else 'false' }}
{%- endmacro %}


{#- How many tasks read each of the check's unions of tables: as many as a shuffle of the session has
    (`spark.shuffle_partitions` in the configuration), the parallelism the check's aggregations run with. A task
    per file of every table cost a first build of 60 small tables 565 tasks and a third of its check's time. -#}
{% macro gold_check_union_tasks() -%}
    {{ return(run_query('set spark.sql.shuffle.partitions').rows[0][1] | int) }}
{%- endmacro %}


{% test gold_run_checks(model, source_name) %}
{%- set inputs = {'changes': ref('stg_row_changes')} -%}
{%- set tables = gold_checked_tables(source_name, model) -%}
{%- set gold = tables | selectattr('gold_check') | selectattr('gold', 'defined') | list -%}
{%- set history = tables | selectattr('history_check') | selectattr('history', 'defined') | list -%}
{%- set bounded = tables | selectattr('gold_check', 'equalto', 'changed') | rejectattr('late') | list -%}
{%- set union_tasks = gold_check_union_tasks() if tables else none -%}  {#- no tables: a parse, or nothing to check -#}

with

{%- if tables | length == 0 %}

problems as (

    select cast(null as string) as relation, cast(null as string) as problem, cast(null as string) as detail
    where false

)

{%- else %}

checked_tables as (

    {{ gold_checked_table_rows(tables) }}

),

checked_versions as (

    {{ gold_checked_version_rows(tables) }}

),

silver_rows as (

    select
        checked_tables.table_index,
        checked_tables.checked_whole,
        checked_tables.read_all,
        checked_tables.since_seq,
        checked_tables.since_ts,
        checked_tables.truncated_at_ts,
        checked_tables.snapshot_at_ts,
        checked_tables.every_key,
        checked_tables.ignores_deletes,
        changes.row_key,
        changes.op,
        struct(changes.commit_ts, changes.op_order, changes.kafka_partition, changes.kafka_offset, changes.event_index)
            as change_order,
        changes.commit_ts,
        changes.silver_seq,
        array_contains(changes.flags, 'key_change_split') as key_change_split
    from {{ inputs.changes }} as changes
    inner join checked_versions
        on changes.upstream_database = checked_versions.upstream_database
        and changes.upstream_table = checked_versions.upstream_table
        and changes.commit_ts >= checked_versions.from_ts
        and (checked_versions.to_ts is null or changes.commit_ts < checked_versions.to_ts)
    inner join checked_tables
        on checked_versions.table_index = checked_tables.table_index
    where changes.source_name = {{ sql_string(source_name) }}
      and changes.commit_ts <= {{ sql_integer(tables[0].consistent_ts) }}
    {%- if bounded | length == tables | length %}
      and (changes.silver_seq > {{ sql_integer(bounded | map(attribute='previous_seq') | min) }}
           or changes.commit_ts > {{ sql_integer(bounded | map(attribute='previous_ts') | min) }})
    {%- endif %}

),
{%- set ignoring = tables | selectattr('delete_mode', 'equalto', 'ignore') | rejectattr('keyless') | list %}

applied_rows as (

    {%- if ignoring %}
    select * from (
        select *, bool_or(op = 'insert') over (partition by table_index, commit_ts) as insert_at_ts
        from silver_rows
    )
    where not (op = 'delete' and not key_change_split and not insert_at_ts and ignores_deletes)
    {%- else %}
    select * from silver_rows
    {%- endif %}

),

silver_keys as (

    select
        table_index,
        row_key,
        max(struct(change_order, op)).op as newest_op,  {#- a struct's max: cheaper than max_by over a struct #}
        bool_or(checked_whole or silver_seq > since_seq or commit_ts > since_ts) as changed,
        bool_or(every_key) as every_key
    from applied_rows
    where commit_ts > truncated_at_ts
      and commit_ts >= snapshot_at_ts
      and (read_all or silver_seq > since_seq or commit_ts > since_ts)
    group by table_index, row_key

),

silver_live_keys as (

    select table_index, count_if(newest_op <> 'delete' or every_key) as live_keys
    from silver_keys
    where changed
    group by table_index

),

{%- set late = gold | selectattr('late') | list %}

gold_rows as (

    {%- set queries = [] %}
    {%- for table in gold %}
    {%- set query %}
    select
        {{ table.position }} as table_index,
        _row_key,
        _op,
        {{ gold_check_keyless(table) }} as keyless,
        {{ '_deleted_at is not null' if table.delete_mode == 'soft' and not table.keyless else 'false' }} as soft_deleted
    from {{ table.gold }}
    {%- if table.gold_check == 'changed' and not table.late %}
    where _commit_ts > {{ gold_check_since(table) }}
    {%- endif %}
    {%- endset %}
    {%- do queries.append(query) %}
    {%- endfor %}
    {%- if queries %}
    {{ union_all(queries, tasks=union_tasks) }}
    {%- else %}
    select
        0 as table_index, cast(null as string) as _row_key, cast(null as string) as _op, false as keyless,
        false as soft_deleted
    where false
    {%- endif %}

),

checked_gold as (

    {%- if late %}
    select gold_rows.*
    from gold_rows
    left semi join silver_keys
        on gold_rows.table_index = silver_keys.table_index
        and gold_rows._row_key = silver_keys.row_key
        and silver_keys.changed
    where gold_rows.table_index in ({% for table in late %}{{ ', ' if not loop.first }}{{ table.position }}{% endfor %})
    union all
    select * from gold_rows
    where gold_rows.table_index not in ({% for table in late %}{{ ', ' if not loop.first }}{{ table.position }}{% endfor %})
    {%- else %}
    select * from gold_rows
    {%- endif %}

),

gold_keys as (

    select
        table_index,
        _row_key,
        count(*) as copies,
        bool_or(
            _op is null
            or not (_op in ('insert', 'update') and not soft_deleted or (keyless or soft_deleted) and _op = 'delete')
        ) as bad_op
    from checked_gold
    group by table_index, _row_key

),

gold_counts as (

    select table_index, count(*) as gold_rows  {#- counted from the rows, not from gold_keys: no second shuffle #}
    from checked_gold
    group by table_index

),

history_versions as (

    {%- set queries = [] %}
    {%- for table in history %}
    {%- set query %}
    select
        {{ table.position }} as table_index,
        _row_key,
        _valid_from_ts,
        _valid_to_ts,
        {{ 'true' if table.history_check == 'whole' else '_valid_from_ts > ' ~ gold_check_since(table) ~ ' or _valid_to_ts > ' ~ gold_check_since(table) }}
            as touched
    from {{ table.history }}
    {%- if table.history_check == 'changed' %}
    where _valid_from_ts > {{ gold_check_since(table) }} or _valid_to_ts > {{ gold_check_since(table) }} or _valid_to_ts is null
    {%- endif %}
    {%- endset %}
    {%- do queries.append(query) %}
    {%- endfor %}
    {%- if queries %}
    {{ union_all(queries, tasks=union_tasks) }}
    {%- else %}
    select
        0 as table_index, cast(null as string) as _row_key, cast(null as bigint) as _valid_from_ts,
        cast(null as bigint) as _valid_to_ts, false as touched
    where false
    {%- endif %}

),

history_starts as (

    {#- per version start, then per key: two plain aggregations, cheaper than one with a count(distinct) -#}
    select
        table_index,
        _row_key,
        _valid_from_ts,
        count_if(touched) as copies,
        count_if(_valid_to_ts is null) as open_versions,
        bool_or(touched) as touched
    from history_versions
    group by table_index, _row_key, _valid_from_ts

),

history_keys as (

    select
        table_index,
        _row_key,
        sum(copies) - count_if(copies > 0 and _valid_from_ts is not null) as repeated,
        sum(open_versions) as open_versions
    from history_starts
    group by table_index, _row_key
    having bool_or(touched)

),

problems as (

    select
        checked_tables.gold_relation as relation,
        case
            when gold_keys._row_key is null then '_row_key is null'
            when gold_keys.copies > 1 then 'a _row_key more than once'
            else '_op is not insert or update (or delete, with _deleted_at, of a soft-deleted row)'
        end as problem,
        gold_keys._row_key as detail
    from gold_keys
    inner join checked_tables on gold_keys.table_index = checked_tables.table_index
    where gold_keys._row_key is null or gold_keys.copies > 1 or gold_keys.bad_op
    union all
    select
        checked_tables.gold_relation as relation,
        'gold rows differ from the keys silver says are live' as problem,
        concat('gold ', coalesce(gold_counts.gold_rows, 0), ', silver ', coalesce(silver_live_keys.live_keys, 0)) as detail
    from checked_tables
    left join gold_counts on checked_tables.table_index = gold_counts.table_index
    left join silver_live_keys on checked_tables.table_index = silver_live_keys.table_index
    where checked_tables.gold_checked
      and coalesce(gold_counts.gold_rows, 0) <> coalesce(silver_live_keys.live_keys, 0)
    union all
    select
        checked_tables.history_relation as relation,
        case when history_keys.repeated > 0 then 'a version listed more than once' else 'more than one open version' end
            as problem,
        history_keys._row_key as detail
    from history_keys
    inner join checked_tables on history_keys.table_index = checked_tables.table_index
    where history_keys.repeated > 0 or history_keys.open_versions > 1

)

{%- endif %}

select * from problems

{% endtest %}
