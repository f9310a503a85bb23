{#- A gold table holds exactly the rows silver says are live as of the consistent timestamp: one per key
    whose newest published change (after the last truncation) is not a delete. Fails with both counts. After an
    incremental run, the keys whose newest change is newer than the run before (gold_last_run) are counted:
    both sides of the count are then what the run changed. -#}
{% test gold_rows_match_silver(model, table_uid) %}
{%- set last_run = gold_last_run(model) -%}

with

gold_table as (

    select * from {{ ref('int_gold_tables') }}
    where source_name = {{ sql_string(var('source_name')) }} and table_uid = {{ sql_string(table_uid) }}

),

published_changes as (

    select table_changes.*
    from {{ ref('int_table_changes') }} as table_changes
    inner join gold_table
        on table_changes.source_name = gold_table.source_name
        and table_changes.table_uid = gold_table.table_uid
        and table_changes.commit_ts <= gold_table.consistent_ts
        and table_changes.commit_ts > coalesce(gold_table.truncated_at_ts, -1)
    {%- if last_run['after'] is not none %}
    where table_changes.commit_ts > {{ last_run['after'] }}
    {%- endif %}

),

newest as (

    select op, row_number() over (partition by row_key order by {{ newest_change_first() }}) as version_rank
    from published_changes

),

counts as (

    select
        (select count(*) from newest where version_rank = 1 and op <> 'delete') as silver_live_keys,
        (select count(*) from {{ model }} where {{ last_run['changed_rows'] }}) as gold_rows

)

select * from counts
where silver_live_keys <> gold_rows

{% endtest %}
