{#- A history table holds each version of a row once, and at most one open version per row. -#}
{% test unique_versions(model) %}

with

versions as (

    select * from {{ model }}

),

repeated_versions as (

    select _row_key, _valid_from_ts, 'version listed more than once' as problem
    from versions
    group by _row_key, _valid_from_ts
    having count(*) > 1

),

several_open_versions as (

    select _row_key, max(_valid_from_ts) as _valid_from_ts, 'more than one open version' as problem
    from versions
    where _valid_to_ts is null
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
