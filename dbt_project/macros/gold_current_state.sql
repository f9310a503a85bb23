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
  - rebuild: the gold table does not exist, its schema fingerprint differs from the latest published
    schema (a DDL changed columns, names or keys), a TRUNCATE was published since, or a rebuild was
    asked for (`dbt run --full-refresh`, `ticdc-lake gold --rebuild`); the table is replaced from
    silver in one commit;
  - incremental: only the keys that changed are recomputed, from every change silver holds for them
    (not only the new ones), so a late row never overwrites a newer one and a delete stays deleted.
    Changed keys are those with a change silver gained since the last run (silver_seq) or a change the
    consistent timestamp has just passed.
-#}

{#- The order of one row's changes, newest first: commit ts, then deletes before inserts at one ts (TiCDC
    splits a key change into delete + insert), then Kafka order. -#}
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
    {%- set _ = [ref('int_gold_tables'), ref('stg_row_changes')] -%}
    {%- if not execute -%}
        {{ return({'mode': 'rebuild', 'columns': [], 'exists': false}) }}
    {%- endif -%}
    {%- set source_name = var('source_name') -%}
    {%- set table_query -%}
        select to_json(columns), schema_fingerprint, consistent_ts, truncated_at_ts, upstream_database, upstream_table,
               consistency
        from {{ ref('int_gold_tables') }}
        where source_name = {{ sql_string(source_name) }} and table_uid = {{ sql_string(table_uid) }}
    {%- endset -%}
    {%- set rows = run_query(table_query).rows -%}
    {%- if rows | length == 0 -%}
        {{ exceptions.raise_compiler_error("no published schema for table " ~ table_uid ~ " of source " ~ source_name) }}
    {%- endif -%}
    {%- set table = rows[0] -%}
    {%- set seq_query -%}
        select coalesce(max(silver_seq), 0) from {{ ref('stg_row_changes') }}
        where source_name = {{ sql_string(source_name) }}
    {%- endset -%}
    {%- set silver_seq = run_query(seq_query).columns[0].values()[0] -%}
    {%- set plan = {
        'exists': false, 'mode': 'rebuild', 'reason': 'new table',
        'columns': fromjson(table[0]), 'fingerprint': table[1], 'consistent_ts': table[2],
        'truncated_at_ts': table[3], 'silver_seq': silver_seq,
        'upstream': table[4] ~ '.' ~ table[5], 'consistency': table[6],
        'previous_consistent_ts': none, 'previous_silver_seq': none} -%}
    {%- set existing = adapter.get_relation(database=this.database, schema=this.schema, identifier=this.identifier) -%}
    {%- if existing is not none -%}
        {%- set props = {} -%}
        {%- for row in run_query("show tblproperties " ~ existing).rows -%}
            {%- do props.update({row[0]: row[1]}) -%}
        {%- endfor -%}
        {%- do plan.update({'exists': true,
                            'previous_consistent_ts': props.get('ticdc.consistent-ts'),
                            'previous_silver_seq': props.get('ticdc.silver-seq')}) -%}
        {%- if flags.FULL_REFRESH -%}
            {%- do plan.update({'reason': 'rebuild requested'}) -%}
        {%- elif props.get('ticdc.schema-fingerprint') != plan.fingerprint -%}
            {%- do plan.update({'reason': 'schema changed'}) -%}
        {%- elif plan.truncated_at_ts is not none and (plan.previous_consistent_ts is none
                 or plan.truncated_at_ts | int > plan.previous_consistent_ts | int) -%}
            {%- do plan.update({'reason': 'truncated'}) -%}
        {%- elif plan.previous_consistent_ts is none or plan.previous_silver_seq is none -%}
            {%- do plan.update({'reason': 'no record of the last run'}) -%}
        {%- else -%}
            {%- do plan.update({'mode': 'incremental', 'reason': 'changes since the last run'}) -%}
        {%- endif -%}
    {%- endif -%}
    {{ return(plan) }}
{% endmacro %}


{#- The model body: rows to publish (rebuild) or to merge (incremental, deletes included). -#}
{% macro gold_current_state(table_uid) %}
{%- set source_name = var('source_name') -%}
{%- set plan = gold_refresh_plan(table_uid) -%}

with

table_changes as (

    select * from {{ ref('int_table_changes') }}
    where source_name = {{ sql_string(source_name) }}
      and table_uid = {{ sql_string(table_uid) }}

),

gold_table as (

    select * from {{ ref('int_gold_tables') }}
    where source_name = {{ sql_string(source_name) }}
      and table_uid = {{ sql_string(table_uid) }}

),

published_changes as (

    select table_changes.*
    from table_changes
    inner join gold_table
        on table_changes.commit_ts <= gold_table.consistent_ts
        and table_changes.commit_ts > coalesce(gold_table.truncated_at_ts, -1)

),

{%- if plan.mode == 'incremental' %}

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
        transform(
            gold_table.columns,
            c -> case
                when exists(latest.version_columns, v -> v.id = c.id)
                    then element_at(latest.after, filter(latest.version_columns, v -> v.id = c.id)[0].name)
                else c.origin_default
            end
        ) as _values
    from latest
    cross join gold_table

),

typed as (

    select
        _row_key,
        _commit_ts,
        _op
        {%- for column in plan.columns %},
        {{ cast_canonical('_values[' ~ loop.index0 ~ ']', column['type']) }} as {{ quote_name(column['name']) }}
        {%- endfor %}
    from shaped

)

select * from typed
{% endmacro %}


{#- Table properties that record what a gold table is consistent as of and what it has consumed. -#}
{% macro gold_table_properties(plan, table_uid) -%}
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
    'ticdc.schema-fingerprint' = {{ sql_string(plan.fingerprint) }}
{%- endmacro %}


{% materialization gold_current_state, adapter='spark' %}
    {%- set table_uid = config.require('table_uid') -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set plan = gold_refresh_plan(table_uid) -%}
    {{ run_hooks(pre_hooks) }}
    {%- if plan.mode == 'rebuild' -%}
        {{ log("gold " ~ target_relation ~ ": rebuilt from silver (" ~ plan.reason ~ ")", info=true) }}
        {% call statement('main') -%}
            create or replace table {{ target_relation }}
            using iceberg
            partitioned by (bucket(16, _row_key))
            tblproperties ({{ gold_table_properties(plan, table_uid) }})
            as {{ sql }}
        {%- endcall %}
    {%- else -%}
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
        {%- if changed > 0 or plan.previous_consistent_ts | string != plan.consistent_ts | string
              or plan.previous_silver_seq | string != plan.silver_seq | string -%}
            {% call statement('record_progress') -%}
                alter table {{ target_relation }} set tblproperties ({{ gold_table_properties(plan, table_uid) }})
            {%- endcall %}
        {%- endif -%}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
