{#-
  The dbt side's one quoting helper: upstream names and values reach SQL only through these.
  An identifier is backtick-quoted with backticks doubled; a string is a SQL literal with backslashes and
  quotes escaped (Spark's default string-literal rules), so nothing in a name can change what runs.
-#}
{% macro quote_name(name) -%}
    `{{ name | replace('`', '``') }}`
{%- endmacro %}

{% macro sql_string(value) -%}
    '{{ value | string | replace('\\', '\\\\') | replace("'", "\\'") }}'
{%- endmacro %}

{#- An integer we computed (a timestamp, a count) checked to be one before it is written into SQL. -#}
{% macro sql_integer(value) -%}
    {%- if value is none -%} null
    {%- elif modules.re.fullmatch('-?[0-9]+', value | string | trim) -%} {{ value | string | trim }}
    {%- else -%} {{ exceptions.raise_compiler_error("not an integer: " ~ value) }}
    {%- endif -%}
{%- endmacro %}
