{#-
  Gold: the current state of one upstream table (identified by its table_uid, which survives renames)
  as of its source's consistent timestamp, in the table's latest published shape.

  Every gold model calls `gold_current_state(source_name, table_uid)` and uses the `gold_current_state`
  materialization below. The shape comes from the DDL history (int_schema_versions): each row's values
  are taken from its last change and mapped, column by column, through the stable column ids of the
  schema version that change was written under, to the columns the table has now. A column added
  after the row's last change shows the value TiDB gives existing rows (origin_default); a column
  dropped and added again is a new id, so old values never come back; a renamed column keeps its id.

  What a run does to the table is the source's plan (spark_jobs/gold/plan.py, one row per table, decided once per
  run and read here from the source `gold_<source>__plan`):
  - rebuild: the table is new, renamed, truncated or snapshot-loaded since its recorded state, or a rebuild was
    asked for: it is replaced from silver in one commit;
  - schema: its schema changed; when the only change is a type whose gold type widens as Iceberg can promote
    it (int -> bigint, float -> double, a decimal's precision) the columns are altered in place and the run goes
    on incrementally, otherwise the table is rebuilt;
  - incremental: only the keys that changed are recomputed and merged. When every change is newer than the
    table's recorded consistent ts, the newest of them decides each key and the run reads only them (silver's
    file statistics on silver_seq and commit_ts skip the rest); when one came late, every change of the changed
    keys is read, so a late row never overwrites a newer one and a delete stays deleted.
  A table the plan leaves unchanged is not built at all (the run does not select its model).

  A table without a handle key (no primary key and no NOT NULL unique key upstream; TiCDC replicates it with
  `force-replicate`) has no row identity, so its gold table is its change table instead: one row per change, deletes
  included (the row's before image), `_row_key` the change's identity (spark_jobs/silver/decode.py, `change_key`),
  appended in commit order as the consistent ts passes them (docs/architecture.md, decision 16).
-#}

{#- The order of one row's changes, newest first: commit ts, then deletes before inserts at one ts (TiCDC
    splits a key change into delete + insert) and a Dumpling snapshot's row after both, then Kafka order. A
    snapshot at ts T is the table's state then: changes before T do not count (published_changes). -#}
{% macro newest_change_first() -%}
    commit_ts desc, op_order desc, kafka_partition desc, kafka_offset desc, event_index desc
{%- endmacro %}


{#- The plan's row of one table (spark_jobs/gold/plan.py), with the shape it is built in and the columns to widen. -#}
{% macro gold_refresh_plan(source_name, table_uid, layer) %}
    {%- set plan_name = gold_plan_model(source_name) | trim -%}
    {%- set plan_model = source(plan_name, plan_name) -%}
    {%- if not execute -%}  {#- parsing: what the models' SQL needs to name its inputs -#}
        {{ return({'mode': 'rebuild', 'columns': [], 'source_name': source_name, 'consistent_ts': 0, 'versions': [],
                   'truncations': [], 'truncated_at_ts': none, 'snapshot_at_ts': none, 'late': false,
                   'delete_mode': 'hard', 'partition_sql': none, 'sort_sql': none, 'types': {}}) }}
    {%- endif -%}
    {%- set row = gold_plan_rows(plan_model, source_name).get(table_uid) -%}
    {%- if row is none -%}
        {{ exceptions.raise_compiler_error("no plan for table " ~ table_uid ~ " of source " ~ source_name) }}
    {%- endif -%}
    {%- set plan = {
        'source_name': source_name, 'mode': row[13] if layer == 'gold' else row[23], 'reason': row[14],
        'columns': fromjson(row[0]), 'fingerprint': row[2], 'consistent_ts': gold_integer(row[3]),
        'consistency': row[4], 'silver_seq': gold_integer(row[5]), 'upstream': row[6] ~ '.' ~ row[7],
        'previous_consistent_ts': gold_integer(row[8]), 'previous_silver_seq': gold_integer(row[9]), 'late': row[12],
        'truncated_at_ts': gold_integer(row[15]), 'snapshot_at_ts': gold_integer(row[16]), 'versions': fromjson(row[17]),
        'truncations': fromjson(row[18]), 'delete_mode': row[19] or 'hard', 'partition_sql': row[20],
        'sort_sql': row[21], 'types': fromjson(row[22]) if row[22] else {}, 'widened': []} -%}
    {%- do plan.update({'shape': gold_shape(plan.columns, fromjson(row[1]), plan.types), 'keyless': not fromjson(row[1])}) -%}
    {%- if plan.mode == 'schema' -%}
        {%- set widened = gold_widened_columns(gold_shape(fromjson(row[10]), fromjson(row[11]), plan.types), plan.shape) -%}
        {%- if widened is none -%}
            {%- do plan.update({'mode': 'rebuild', 'reason': 'schema changed: columns, key or a type that changes values'}) -%}
        {%- else -%}
            {%- do plan.update({'mode': 'incremental', 'widened': widened}) -%}
        {%- endif -%}
    {%- endif -%}
    {{ return(plan) }}
{% endmacro %}


{#- Every row of the run's plan, by table_uid (gold's mode at index 13, history's at 23): read once per dbt command
    rather than once per model, which cost every model of a first build a Spark statement of its own. Kept in
    `graph`, the one dict a command's models (and threads) share, under the command's invocation id, so no other
    command reads it. -#}
{% macro gold_plan_rows(plan_model, source_name) %}
    {%- set key = 'ticdc_gold_plan ' ~ invocation_id ~ ' ' ~ source_name -%}
    {%- if key not in graph -%}
        {%- set query -%}
            select columns, to_json(key_columns), schema_fingerprint, consistent_ts, consistency, silver_seq,
                   upstream_database, upstream_table, previous_consistent_ts, previous_silver_seq, previous_columns,
                   to_json(previous_key_columns), late, gold_mode, reason, truncated_at_ts, snapshot_at_ts,
                   to_json(versions), to_json(truncations), delete_mode, partition_sql, sort_sql,
                   type_mappings, history_mode, table_uid
            from {{ plan_model }}
        {%- endset -%}
        {%- set rows = {} -%}
        {%- for row in run_query(query).rows -%} {%- do rows.update({row[24]: row}) -%} {%- endfor -%}
        {%- do graph.update({key: rows}) -%}
    {%- endif -%}
    {{ return(graph[key]) }}
{% endmacro %}


{#- A number of the plan row as an int (the query gives decimals), so that the plan is JSON. -#}
{% macro gold_integer(value) -%}
    {{ return(none if value is none else value | int) }}
{%- endmacro %}


{#- The plan as one comment line of the model's compiled SQL, first after our own header, which the materialization
    reads back (`gold_compiled_plan`): a table's plan row is read once per model, not once more to run it. JSON
    holds no raw line break, so the line ends where the plan does. -#}
{% macro gold_plan_comment(plan) -%}
-- gold plan: {{ tojson(plan) ~ '\n' }}
{%- endmacro %}


{#- The plan the model's body was compiled with: the first plan line of its compiled SQL. -#}
{% macro gold_compiled_plan(sql) %}
    {%- set marker = '-- gold plan: ' -%}
    {%- set found = [] -%}
    {%- for line in sql.split('\n') if line.startswith(marker) and not found -%}
        {%- do found.append(fromjson(line[marker | length:])) -%}
    {%- endfor -%}
    {%- set plan = found[0] if found else none -%}
    {%- if plan is not mapping -%}
        {{ exceptions.raise_compiler_error('the compiled SQL of ' ~ this ~ ' holds no gold plan line') }}
    {%- endif -%}
    {{ return(plan) }}
{% endmacro %}


{#- The model holding the plan of a source's gold run. -#}
{% macro gold_plan_model(source_name) -%}
    gold_{{ source_name }}__plan
{%- endmacro %}


{#- What a gold table holds: its key and its columns' ids, names and gold types (a column dropped and added
    again under its old name is a new id, whose old values must not come back). A DECIMAL kept as text has its
    scale in its type here, and a TIME its fsp: every value's text changes with it (decimal_text_at_scale,
    time_text_at_fsp). -#}
{% macro gold_shape(columns, key_columns, types) -%}
    {%- set shaped = [] -%}
    {%- for column in columns -%}
        {%- set spark_type = gold_type(column['type'], types) | trim -%}
        {%- set fsp = time_fsp(column['type'] | lower) | trim -%}
        {%- set wide_scale = wide_decimal_scale(column['type'] | lower) | trim -%}
        {%- if spark_type == 'string' and wide_scale != '' -%}
            {%- set spark_type = 'string at scale ' ~ wide_scale -%}
        {%- elif fsp -%}
            {%- set spark_type = 'string at fsp ' ~ fsp -%}
        {%- endif -%}
        {%- do shaped.append([column['id'], column['name'], spark_type]) -%}
    {%- endfor -%}
    {{ return({'key': key_columns, 'columns': shaped}) }}
{%- endmacro %}


{#- The columns to widen in place to go from the recorded shape to `shape`: [] when nothing changes, none when
    the change is more than Iceberg's type promotions (the table is then rebuilt). -#}
{% macro gold_widened_columns(recorded, shape) -%}
    {%- if recorded['key'] != shape['key'] or recorded['columns'] | length != shape['columns'] | length -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set widened = [] -%}
    {%- for old, new in zip(recorded['columns'], shape['columns']) -%}
        {%- if old[0] != new[0] or old[1] != new[1] -%} {{ return(none) }} {%- endif -%}
        {%- if old[2] != new[2] -%}
            {%- if not gold_type_promotes(old[2], new[2]) -%} {{ return(none) }} {%- endif -%}
            {%- do widened.append([new[1], new[2]]) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(widened) }}
{%- endmacro %}


{#- Iceberg's type promotions: the values stay what they were. -#}
{% macro gold_type_promotes(old, new) -%}
    {%- if (old, new) in [('int', 'bigint'), ('float', 'double')] -%} {{ return(true) }} {%- endif -%}
    {%- set pattern = 'decimal\\(([0-9]+),([0-9]+)\\)' -%}
    {%- set a = modules.re.fullmatch(pattern, old) -%}
    {%- set b = modules.re.fullmatch(pattern, new) -%}
    {{ return(a is not none and b is not none and a.group(2) == b.group(2) and b.group(1) | int > a.group(1) | int) }}
{%- endmacro %}


{#- A `_values` array (canonical text in the table's latest column order) as the table's typed, named columns,
    each after a comma. -#}
{% macro gold_typed_columns(plan, values='_values') -%}
    {%- for column in plan.columns %},
        {{ cast_canonical(values ~ '[' ~ loop.index0 ~ ']', column['type'], plan.types, plan.upstream ~ '.' ~ column['name']) }}
            as {{ quote_name(column['name']) }}
    {%- endfor -%}
{%- endmacro %}


{#- The table's row changes, each with its values in the table's latest shape (`_values`, canonical text in the
    latest column order): every change silver holds under a name the table had, while it had it (a change under
    another table's name, or after a drop, is not the table's), up to the consistent ts. The schema versions come
    from the plan, so the table's changes are read in one pass over silver with no join: per version, each latest
    column is found under its name then (by its stable id), or shows its origin_default when it was added since.
    `bounded` keeps only the changes silver gained or the consistent ts passed since the recorded state (literal
    bounds that silver's file statistics use to skip every older file); `cutoff` leaves out what a truncation or
    a snapshot replaced (gold's current state; history closes versions there instead). -#}
{% macro gold_changes(plan, bounded, cutoff) -%}
    select
        source_name,
        row_key,
        commit_ts,
        op,
        op_order,
        kafka_partition,
        kafka_offset,
        event_index,
        silver_seq,
        array_contains(flags, 'key_change_split') as key_change_split,
        case
        {%- for version in plan.versions %}
            when {{ gold_version_predicate(version) }} then {{ gold_version_values(plan, version) }}
        {%- endfor %}
        end as _values
    from {{ ref('stg_row_changes') }}
    where source_name = {{ sql_string(plan.source_name) }}
      and commit_ts <= {{ sql_integer(plan.consistent_ts) }}
    {%- if bounded %}
      and (silver_seq > {{ sql_integer(plan.previous_silver_seq) }}
           or commit_ts > {{ sql_integer(plan.previous_consistent_ts) }})
    {%- endif %}
    {%- if cutoff and plan.truncated_at_ts is not none %}
      and commit_ts > {{ sql_integer(plan.truncated_at_ts) }}
    {%- endif %}
    {%- if cutoff and plan.snapshot_at_ts is not none %}
      and commit_ts >= {{ sql_integer(plan.snapshot_at_ts) }}
    {%- endif %}
      and ({% for version in plan.versions %}{{ ' or ' if not loop.first }}({{ gold_version_predicate(version) }}){% else %}false{% endfor %})
{%- endmacro %}


{#- A change belongs to a schema version: it carried the name the table had then, while the version was valid. -#}
{% macro gold_version_predicate(version) -%}
    upstream_database = {{ sql_string(version.database) }} and upstream_table = {{ sql_string(version.table) }}
    and commit_ts >= {{ sql_integer(version.from_ts) }}
    {%- if version.get('to_ts') is not none %} and commit_ts < {{ sql_integer(version.to_ts) }}{% endif %}
{%- endmacro %}


{#- The latest columns' values of a change written under `version`: by stable column id, the column's name then
    (converted through each type the column took between that version and its latest one, as TiDB converted the
    stored value at each MODIFY), or its origin_default (a column added after the change). A keyless table's
    change table, and a table whose deletes are soft, show a delete's row too (its before image). -#}
{% macro gold_version_values(plan, version) -%}
    {%- set image = 'coalesce(after, before)' if plan.get('keyless') or plan.get('delete_mode') == 'soft' else 'after' -%}
    {%- set names, through = {}, {} -%}
    {%- for column in version.columns -%}
        {%- do names.update({column.id: column.name}) -%}
        {%- do through.update({column.id: column.through or []}) -%}
    {%- endfor -%}
    array(
    {%- for column in plan.columns %}
        {{- ', ' if not loop.first -}}
        {%- if column.id in names -%}
            {%- set value = namespace(sql='element_at(' ~ image ~ ', ' ~ sql_string(names[column.id]) ~ ')') -%}
            {%- for mysql_type in through[column.id] -%}
                {%- set value.sql = canonical_through(value.sql, mysql_type) | trim -%}
            {%- endfor -%}
            {{ value.sql }}
        {%- elif column.get('origin_default') is not none -%}
            {{ sql_string(column.origin_default) }}
        {%- else -%}
            cast(null as string)
        {%- endif -%}
    {%- endfor -%}
    )
{%- endmacro %}


{#- The changes a gold or history model applies, after `published_changes`. Rebuild: all. Incremental: the
    changes silver gained or the consistent ts passed since the recorded state, which are all newer than what it
    recorded unless some came late; then every change of the keys they touch. -#}
{% macro candidate_changes(plan) -%}
{%- if plan.mode == 'incremental' and not plan.late %}

candidate_changes as (

    select * from published_changes

),

{%- elif plan.mode == 'incremental' %}

changed_keys as (

    select distinct row_key
    from published_changes
    where silver_seq > {{ sql_integer(plan.previous_silver_seq) }}
       or commit_ts > {{ sql_integer(plan.previous_consistent_ts) }}

),

candidate_changes as (

    select published_changes.*
    from published_changes
    left semi join changed_keys
        on published_changes.row_key = changed_keys.row_key

),

{%- else %}

candidate_changes as (

    select * from published_changes

),

{%- endif %}
{%- endmacro %}


{#- The model body: rows to publish (rebuild) or to merge (incremental, deletes included). How a delete lands is
    the table's delete mode (README, "How deletes land"):
    - hard: the row goes;
    - soft: the row stays with its last values (the newest change before the delete that is not one; the delete's
      own before image when the run reads none, which a merge never applies to a row gold has), `_op` delete and
      `_deleted_at` the delete's commit time; an insert of the key again brings it back to life;
    - ignore: a delete is not applied, unless it is half of an update that changed the row's key: flagged so by
      the decoder (sent unsplit), or sharing its commit ts with an insert into the table (TiCDC splits a key change
      into a delete and an insert of one commit; a transaction that deletes one row and inserts another is read
      the same way, so `output-raw-change-event = true` makes the mode exact). -#}
{% macro gold_current_state(source_name, table_uid) %}
{%- set plan = gold_refresh_plan(source_name, table_uid, 'gold') -%}
{{ gold_plan_comment(plan) }}
{%- set keyed = not plan.get('keyless') -%}
{%- set soft = keyed and plan.delete_mode == 'soft' -%}

with

silver_changes as (

    {{ gold_changes(plan, plan.mode == 'incremental' and not plan.late, keyed) }}

),

published_changes as (

    select * from silver_changes
    {%- if keyed and plan.delete_mode == 'ignore' %}
    where op <> 'delete'
       or key_change_split
       or commit_ts in (select commit_ts from silver_changes where op = 'insert')
    {%- endif %}

),

{{ candidate_changes(plan) }}

ranked as (

    select
        *,
        row_number() over (partition by row_key order by {{ newest_change_first() }}) as version_rank
        {%- if soft %},
        first(case when op <> 'delete' then _values end, true) over (
            partition by row_key order by {{ newest_change_first() }}
            rows between unbounded preceding and unbounded following
        ) as last_values
        {%- endif %}
    from candidate_changes

),

latest as (

    select * from ranked
    where version_rank = 1
    {%- if plan.mode != 'incremental' and keyed and not soft %}
      and op <> 'delete'
    {%- endif %}

),

typed as (

    select
        row_key as _row_key,
        commit_ts as _commit_ts,
        op as _op
        {%- if soft %},
        case when op = 'delete' then {{ tidb_ts_time('commit_ts') }} end as _deleted_at
        {%- if plan.mode == 'incremental' %},
        last_values is not null as _values_read
        {%- endif %}
        {%- endif %}
        {{- gold_typed_columns(plan, 'coalesce(last_values, _values)' if soft else '_values') }}
    from latest

)

select * from typed
{% endmacro %}


{#- The properties of a gold or history table: what it is. What it is consistent as of is the source's
    publication (gold.publications, gold.tables), written once per run for every table. -#}
{% macro gold_table_properties(kind, plan, table_uid) -%}
    'format-version' = '2',
    'write.delete.mode' = 'merge-on-read',
    'write.update.mode' = 'merge-on-read',
    'write.merge.mode' = 'merge-on-read',
    'write.distribution-mode' = 'none',
    'write.merge.distribution-mode' = 'none',
    'write.spark.fanout.enabled' = 'true',
    'ticdc.source' = {{ sql_string(plan.source_name) }},
    'ticdc.table-uid' = {{ sql_string(table_uid) }},
    'ticdc.upstream-table' = {{ sql_string(plan.upstream) }},
    'ticdc.layer' = {{ sql_string(kind) }}
{%- endmacro %}


{% materialization gold_current_state, adapter='spark' %}
    {%- set table_uid = config.require('table_uid') -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set plan = gold_compiled_plan(sql) -%}
    {{ run_hooks(pre_hooks) }}
    {%- if plan.mode == 'rebuild' -%}
        {{ gold_replace_table('gold', target_relation, plan, table_uid, sql) }}
    {%- elif plan.mode == 'incremental' -%}
        {{ gold_widen_columns('gold', target_relation, plan) }}
        {% call statement('main') -%}
            merge into {{ target_relation }} as t
            using ({{ sql }}) as s
            on t._row_key = s._row_key
            {%- if plan.keyless %}
            when not matched then insert *
            {%- elif plan.delete_mode == 'soft' %}
            when matched and s._op = 'delete' and not s._values_read then
                update set t._commit_ts = s._commit_ts, t._op = s._op, t._deleted_at = s._deleted_at
            when matched then update set *
            when not matched then insert *
            {%- else %}
            when matched and s._op = 'delete' then delete
            when matched then update set *
            when not matched and s._op <> 'delete' then insert *
            {%- endif %}
        {%- endcall %}
    {%- else -%}
        {% call statement('main') -%} select 'nothing to apply to {{ target_relation }}' {%- endcall %}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}


{#- What the gold and history materializations share: the table replaced from silver in one commit, in its layout
    (the plan's partition fields and sort order, from gold.layouts: spark_jobs/gold/layout.py), and columns widened
    in place. -#}
{% macro gold_replace_table(kind, target_relation, plan, table_uid, sql) %}
    {{ log(kind ~ " " ~ target_relation ~ ": rebuilt from silver (" ~ plan.reason ~ ")", info=true) }}
    {% call statement('main') -%}
        create or replace table {{ target_relation }}
        using iceberg
        {%- if plan.partition_sql %}
        partitioned by ({{ plan.partition_sql }})
        {%- endif %}
        tblproperties ({{ gold_table_properties(kind, plan, table_uid) }})
        as {{ sql }}
    {%- endcall %}
    {%- if plan.sort_sql %}
    {% call statement('sort_order') -%}
        alter table {{ target_relation }} write ordered by {{ plan.sort_sql }}
    {%- endcall %}
    {%- endif %}
{% endmacro %}


{% macro gold_widen_columns(kind, target_relation, plan) %}
    {%- for name, gold_type in plan.widened -%}
        {{ log(kind ~ " " ~ target_relation ~ ": column widened in place to " ~ gold_type, info=true) }}
        {% call statement('widen_' ~ loop.index) -%}
            alter table {{ target_relation }} alter column {{ quote_name(name) }} type {{ gold_type }}
        {%- endcall %}
    {%- endfor -%}
{% endmacro %}
