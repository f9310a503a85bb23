{#- The columns together identify a row of the model: no combination of their values occurs twice (nulls count
    as equal values, as silver's merges compare them with <=>). Fails with each repeated combination and how
    often it occurs. -#}
{% test unique_combination(model, columns) %}

with

combinations as (

    select
        {{ columns | join(',\n        ') }},
        count(*) as occurrences
    from {{ model }}
    group by {{ columns | join(', ') }}

),

repeated as (

    select * from combinations
    where occurrences > 1

)

select * from repeated

{% endtest %}
