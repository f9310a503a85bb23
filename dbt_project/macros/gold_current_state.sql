{#-
  Gold: the current state of one upstream table (identified by its table_uid, which survives renames)
  as of its source's consistent timestamp, in the table's latest published shape.

  Every gold model calls `gold_current_state(table_uid)` and uses the `gold_current_state`
  materialization below. The shape comes from the DDL history (int_schema_versions): each row's values
  are taken from its last change and mapped, column by column, through the stable column ids of the
  schema version that change was written under, to the columns the table has now. A column added
  after the row's last change shows the value TiDB gives existing rows (origin_default); a column
  dropped and added again is a new id, so old values never come back; a renamed column keeps its id.

  The materialization decides per run (gold_refresh_plan):
  - rebuild: the gold table does not exist, its shape differs from the latest published schema in
    more than widened types (a DDL added, dropped or renamed columns, changed the key or changed a type
    so that values change), a TRUNCATE or a Dumpling snapshot (backfill snapshot) was published since, or a
    rebuild was asked for (`dbt run
    --full-refresh`, `ticdc-lake rebuild gold|history`: the var `rebuild_tables` lists the aliases); the
    table is replaced from silver in one commit;
  - widened in place: the only change is a type whose gold type stays or widens as Iceberg can promote
    it (int -> bigint, float -> double, a decimal's precision): the columns are altered in place, then
    the run goes on incrementally;
  - incremental: only the keys that changed are recomputed. Changed keys are those with a change silver
    gained since the last run (silver_seq) or a change the consistent timestamp has just passed. When all
    those changes are newer than what the last run published, the newest of them decides each key, and the
    run reads only them (silver's file statistics on silver_seq and commit_ts skip the rest, so the cost
    follows the delta, not the table). When some came late, every change silver holds for the changed keys
    is read, so a late row never overwrites a newer one and a delete stays deleted.
-#}

{#- The order of one row's changes, newest first: commit ts, then deletes before inserts at one ts (TiCDC
    splits a key change into delete + insert) and a Dumpling snapshot's row after both, then Kafka order. A
    snapshot at ts T is the table's state then: changes before T do not count (published_changes). -#}
{% macro newest_change_first() -%}
    commit_ts desc, op_order desc, kafka_partition desc, kafka_offset desc, event_index desc
{%- endmacro %}


{#- The JSON shape of silver.ddl_events.table_schema that the replay reads (spark_jobs/ddl.py writes it). -#}
{% macro gold_schema_json_type() -%}
    struct<columns: array<struct<id: int, name: string, type: string, nullable: boolean, origin_default: string>>, key_columns: array<string>>
{%- endmacro %}


{#- What this run does for one gold table, read from the table's properties and the DDL history. -#}
{% macro gold_refresh_plan(table_uid) %}
    {#- declared here, where dbt's parser sees them, though only read at execution -#}
    {%- set _ = [ref('int_gold_tables'), ref('int_table_changes')] -%}
    {%- if not execute -%}
        {{ return({'mode': 'rebuild', 'columns': [], 'exists': false}) }}
    {%- endif -%}
    {%- set source_name = var('source_name') -%}
    {%- set table_query -%}
        select to_json(columns), schema_fingerprint, consistent_ts, truncated_at_ts, upstream_database, upstream_table,
               consistency, to_json(key_columns), silver_seq, snapshot_at_ts
        from {{ ref('int_gold_tables') }}
        where source_name = {{ sql_string(source_name) }} and table_uid = {{ sql_string(table_uid) }}
    {%- endset -%}
    {%- set rows = run_query(table_query).rows -%}
    {%- if rows | length == 0 -%}
        {{ exceptions.raise_compiler_error("no published schema for table " ~ table_uid ~ " of source " ~ source_name) }}
    {%- endif -%}
    {%- set table = rows[0] -%}
    {%- set silver_seq = table[8] if table[8] is not none else 0 -%}
    {%- set plan = {
        'exists': false, 'mode': 'rebuild', 'reason': 'new table',
        'columns': fromjson(table[0]), 'fingerprint': table[1], 'consistent_ts': table[2],
        'truncated_at_ts': table[3], 'snapshot_at_ts': table[9], 'silver_seq': silver_seq,
        'upstream': table[4] ~ '.' ~ table[5], 'consistency': table[6],
        'previous_consistent_ts': none, 'previous_silver_seq': none, 'widened': []} -%}
    {%- do plan.update({'shape': gold_shape(plan.columns, fromjson(table[7]))}) -%}
    {%- set props = table_properties(this) -%}
    {%- if props is not none -%}
        {%- do plan.update({'exists': true,
                            'previous_consistent_ts': props.get('ticdc.consistent-ts'),
                            'previous_silver_seq': props.get('ticdc.silver-seq')}) -%}
        {%- set widened = gold_widened_columns(props.get('ticdc.shape'), plan.shape) -%}
        {%- if flags.FULL_REFRESH or this.identifier in var('rebuild_tables', []) -%}
            {%- do plan.update({'reason': 'rebuild requested'}) -%}
        {%- elif plan.truncated_at_ts is not none and (plan.previous_consistent_ts is none
                 or plan.truncated_at_ts | int > plan.previous_consistent_ts | int) -%}
            {%- do plan.update({'reason': 'truncated'}) -%}
        {%- elif plan.snapshot_at_ts is not none and (plan.previous_consistent_ts is none
                 or plan.snapshot_at_ts | int > plan.previous_consistent_ts | int) -%}
            {%- do plan.update({'reason': 'a Dumpling snapshot was loaded'}) -%}
        {%- elif plan.previous_consistent_ts is none or plan.previous_silver_seq is none -%}
            {%- do plan.update({'reason': 'no record of the last run'}) -%}
        {%- elif props.get('ticdc.schema-fingerprint') != plan.fingerprint and widened is none -%}
            {%- do plan.update({'reason': 'schema changed: columns, key or a type that changes values'}) -%}
        {%- else -%}
            {%- do plan.update({'mode': 'incremental', 'reason': 'changes since the last run', 'widened': widened or [],
                                'late_changes': gold_late_changes(table_uid, plan)}) -%}
        {%- endif -%}
    {%- endif -%}
    {{ return(plan) }}
{% endmacro %}


{#- A table's properties (a dict); none when the table does not exist. -#}
{% macro table_properties(relation) -%}
    {%- set existing = adapter.get_relation(database=relation.database, schema=relation.schema,
                                            identifier=relation.identifier) -%}
    {%- if existing is none -%} {{ return(none) }} {%- endif -%}
    {%- set props = {} -%}
    {%- for row in run_query("show tblproperties " ~ existing).rows -%}
        {%- do props.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {{ return(props) }}
{%- endmacro %}


{#- How many changes silver gained since the last run that are not newer than what that run published (a partition
    that lagged, a replayed quarantine): then a changed key's newest change may be an old one, and the run reads
    every change of the changed keys. Otherwise every new change is newer than anything published, and the run
    reads only the new ones, which silver's file statistics find without reading the rest. -#}
{% macro gold_late_changes(table_uid, plan) -%}
    {%- set query -%}
        select count(*)
        from {{ ref('int_table_changes') }}
        where source_name = {{ sql_string(var('source_name')) }}
          and table_uid = {{ sql_string(table_uid) }}
          and silver_seq > {{ sql_integer(plan.previous_silver_seq) }}
          and commit_ts <= {{ sql_integer(plan.previous_consistent_ts) }}
    {%- endset -%}
    {{ return(run_query(query).columns[0].values()[0]) }}
{%- endmacro %}


{#- What a gold table holds: its key and its columns' ids, names and gold types (a column dropped and added
    again under its old name is a new id, whose old values must not come back). -#}
{% macro gold_shape(columns, key_columns) -%}
    {%- set shaped = [] -%}
    {%- for column in columns -%}
        {%- do shaped.append([column['id'], column['name'], gold_type(column['type']) | trim]) -%}
    {%- endfor -%}
    {{ return({'key': key_columns, 'columns': shaped}) }}
{%- endmacro %}


{#- The columns to widen in place to go from the recorded shape (JSON) to `shape`: [] when nothing changes,
    none when the change is more than Iceberg's type promotions (the table is then rebuilt). -#}
{% macro gold_widened_columns(recorded_json, shape) -%}
    {%- if recorded_json is none -%} {{ return(none) }} {%- endif -%}
    {%- set recorded = fromjson(recorded_json) -%}
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


{#- A change's values in the table's latest shape (gold_table.columns), by stable column id through the
    schema version the change was written under: a column added after the change shows the value TiDB gives
    existing rows (origin_default); a column dropped and added again is a new id, so old values never come
    back; a renamed column keeps its id. Canonical text, in gold_table's column order. -#}
{% macro gold_values(change) -%}
    transform(
            gold_table.columns,
            c -> case
                when exists({{ change }}.version_columns, v -> v.id = c.id)
                    then element_at({{ change }}.after, filter({{ change }}.version_columns, v -> v.id = c.id)[0].name)
                else c.origin_default
            end
        )
{%- endmacro %}


{#- The `_values` array as the table's typed, named columns, each after a comma. -#}
{% macro gold_typed_columns(plan) -%}
    {%- for column in plan.columns %},
        {{ cast_canonical('_values[' ~ loop.index0 ~ ']', column['type']) }} as {{ quote_name(column['name']) }}
    {%- endfor -%}
{%- endmacro %}


{#- The import CTEs of a gold or history model: the table's row changes (every schema version, resolved to
    its identity) and its published schema. -#}
{% macro gold_table_inputs(table_uid) -%}
table_changes as (

    select * from {{ ref('int_table_changes') }}
    where source_name = {{ sql_string(var('source_name')) }}
      and table_uid = {{ sql_string(table_uid) }}

),

gold_table as (

    select * from {{ ref('int_gold_tables') }}
    where source_name = {{ sql_string(var('source_name')) }}
      and table_uid = {{ sql_string(table_uid) }}

),
{%- endmacro %}


{#- The CTEs after `published_changes` in a gold or history model: the published changes to apply. Rebuild: all.
    Incremental: the changes silver recorded or published since the last run, which are all newer than what that
    run published unless some came late (gold_late_changes); then every change of the keys they touch. -#}
{% macro candidate_changes(plan) -%}
{%- if plan.mode == 'incremental' and plan.late_changes == 0 %}

candidate_changes as (

    select * from published_changes
    where silver_seq > {{ sql_integer(plan.previous_silver_seq) }}
       or commit_ts > {{ sql_integer(plan.previous_consistent_ts) }}

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


{#- The model body: rows to publish (rebuild) or to merge (incremental, deletes included). -#}
{% macro gold_current_state(table_uid) %}
{%- set source_name = var('source_name') -%}
{%- set plan = gold_refresh_plan(table_uid) -%}

with

{{ gold_table_inputs(table_uid) }}

published_changes as (

    select table_changes.*
    from table_changes
    inner join gold_table
        on table_changes.commit_ts <= gold_table.consistent_ts
        and table_changes.commit_ts > coalesce(gold_table.truncated_at_ts, -1)
        and table_changes.commit_ts >= coalesce(gold_table.snapshot_at_ts, -1)

),

{{ candidate_changes(plan) }}

ranked as (

    select
        *,
        row_number() over (partition by row_key order by {{ newest_change_first() }}) as version_rank
    from candidate_changes

),

latest as (

    select * from ranked
    where version_rank = 1
    {%- if plan.mode != 'incremental' %}
      and op <> 'delete'
    {%- endif %}

),

shaped as (

    select
        latest.row_key as _row_key,
        latest.commit_ts as _commit_ts,
        latest.op as _op,
        {{ gold_values('latest') }} as _values
    from latest
    cross join gold_table

),

typed as (

    select
        _row_key,
        _commit_ts,
        _op
        {{- gold_typed_columns(plan) }}
    from shaped

)

select * from typed
{% endmacro %}


{#- Table properties that record what a gold table is consistent as of and what it has consumed. -#}
{% macro gold_table_properties(kind, plan, table_uid) -%}
    'format-version' = '2',
    'write.delete.mode' = 'merge-on-read',
    'write.update.mode' = 'merge-on-read',
    'write.merge.mode' = 'merge-on-read',
    'ticdc.source' = {{ sql_string(var('source_name')) }},
    'ticdc.table-uid' = {{ sql_string(table_uid) }},
    'ticdc.upstream-table' = {{ sql_string(plan.upstream) }},
    'ticdc.consistent-ts' = '{{ sql_integer(plan.consistent_ts) }}',
    'ticdc.consistency' = {{ sql_string(plan.consistency) }},
    'ticdc.silver-seq' = '{{ sql_integer(plan.silver_seq) }}',
    'ticdc.schema-fingerprint' = {{ sql_string(plan.fingerprint) }},
    'ticdc.shape' = {{ sql_string(tojson(plan.shape)) }},
    'ticdc.layer' = {{ sql_string(kind) }},
    'ticdc.changed-after-ts' = '{{ sql_integer(plan.previous_consistent_ts) if plan.mode == 'incremental' else '' }}'
{%- endmacro %}


{% materialization gold_current_state, adapter='spark' %}
    {%- set table_uid = config.require('table_uid') -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set plan = gold_refresh_plan(table_uid) -%}
    {{ run_hooks(pre_hooks) }}
    {%- if plan.mode == 'rebuild' -%}
        {{ gold_replace_table('gold', target_relation, plan, table_uid, sql) }}
    {%- else -%}
        {{ gold_widen_columns('gold', target_relation, plan) }}
        {%- set changed = run_query("select count(*) from (" ~ sql ~ ")").columns[0].values()[0] -%}
        {%- if changed > 0 -%}
            {% call statement('main') -%}
                merge into {{ target_relation }} as t
                using ({{ sql }}) as s
                on t._row_key = s._row_key
                when matched and s._op = 'delete' then delete
                when matched then update set *
                when not matched and s._op <> 'delete' then insert *
            {%- endcall %}
        {%- else -%}
            {% call statement('main') -%} select 'no changes for {{ target_relation }}' {%- endcall %}
        {%- endif -%}
        {{ gold_record_progress('gold', target_relation, plan, table_uid, changed) }}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}


{#- What the gold and history materializations share: the table replaced from silver in one commit, -#}
{#- columns widened in place, and the run's progress recorded in the table's properties. -#}
{% macro gold_replace_table(kind, target_relation, plan, table_uid, sql) %}
    {{ log(kind ~ " " ~ target_relation ~ ": rebuilt from silver (" ~ plan.reason ~ ")", info=true) }}
    {% call statement('main') -%}
        create or replace table {{ target_relation }}
        using iceberg
        partitioned by (bucket(16, _row_key))
        tblproperties ({{ gold_table_properties(kind, plan, table_uid) }})
        as {{ sql }}
    {%- endcall %}
{% endmacro %}


{% macro gold_widen_columns(kind, target_relation, plan) %}
    {%- for name, gold_type in plan.widened -%}
        {{ log(kind ~ " " ~ target_relation ~ ": column widened in place to " ~ gold_type, info=true) }}
        {% call statement('widen_' ~ loop.index) -%}
            alter table {{ target_relation }} alter column {{ quote_name(name) }} type {{ gold_type }}
        {%- endcall %}
    {%- endfor -%}
{% endmacro %}


{#- Properties are written when something changed or the consistent ts / silver seq moved: a run with -#}
{#- nothing new commits nothing. -#}
{% macro gold_record_progress(kind, target_relation, plan, table_uid, changed) %}
    {%- if changed > 0 or plan.widened or plan.previous_consistent_ts | string != plan.consistent_ts | string
          or plan.previous_silver_seq | string != plan.silver_seq | string -%}
        {% call statement('record_progress') -%}
            alter table {{ target_relation }} set tblproperties ({{ gold_table_properties(kind, plan, table_uid) }})
        {%- endcall %}
    {%- endif -%}
{% endmacro %}
