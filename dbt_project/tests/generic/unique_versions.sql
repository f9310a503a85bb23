{#- A history table holds each version of a row once, and at most one open version per row. After an
    incremental run, the versions it opened or closed are checked, and the open versions of their rows. -#}
{% test unique_versions(model) %}
{%- set changed_rows = gold_last_run(model)['changed_rows'] -%}

with

versions as (

    select * from {{ model }}

),

changed_versions as (

    select * from versions
    where {{ changed_rows }}

),

open_versions_of_changed_rows as (

    select versions.*
    from versions
    {%- if changed_rows != 'true' %}
    left semi join changed_versions
        on versions._row_key = changed_versions._row_key
    {%- endif %}
    where versions._valid_to_ts is null

),

repeated_versions as (

    select _row_key, _valid_from_ts, 'version listed more than once' as problem
    from changed_versions
    group by _row_key, _valid_from_ts
    having count(*) > 1

),

several_open_versions as (

    select _row_key, max(_valid_from_ts) as _valid_from_ts, 'more than one open version' as problem
    from open_versions_of_changed_rows
    group by _row_key
    having count(*) > 1

),

problems as (

    select * from repeated_versions
    union all
    select * from several_open_versions

)

select * from problems

{% endtest %}
