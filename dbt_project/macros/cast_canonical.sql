{#- Canonical value text (ARCHITECTURE.md) to the Spark type of a gold column, per canonical MySQL type. -#}
{% macro gold_type(mysql_type) -%}
    {%- set t = mysql_type | lower -%}
    {%- set base = t.split('(')[0].split(' ')[0] -%}
    {%- if base in ['tinyint', 'smallint', 'mediumint'] -%} int
    {%- elif base == 'int' -%} {{ 'bigint' if 'unsigned' in t else 'int' }}
    {%- elif base == 'bigint' -%} {{ 'decimal(20,0)' if 'unsigned' in t else 'bigint' }}
    {%- elif base == 'decimal' -%} {{ t if '(' in t else 'decimal(38,10)' }}
    {%- elif base == 'float' -%} float
    {%- elif base == 'double' -%} double
    {%- elif base == 'date' -%} date
    {%- elif base in ['datetime', 'timestamp'] -%} timestamp
    {%- elif base == 'year' -%} int
    {%- elif base == 'bit' -%} decimal(20,0)
    {%- elif base in ['binary', 'varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob'] -%} binary
    {%- else -%} string
    {%- endif -%}
{%- endmacro %}

{% macro cast_canonical(expression, mysql_type) -%}
    {%- set spark_type = gold_type(mysql_type) | trim -%}
    {%- if spark_type == 'binary' -%} unbase64({{ expression }})
    {%- elif spark_type == 'string' -%} {{ expression }}
    {%- else -%} cast({{ expression }} as {{ spark_type }})
    {%- endif -%}
{%- endmacro %}
