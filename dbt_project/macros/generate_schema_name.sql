{#- Models land in the namespace they name (gold, lake_staging), not <target>_<name>. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}
