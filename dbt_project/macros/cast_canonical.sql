{#- Canonical value text (docs/canonical-event.md) to the Spark type of a gold column, per canonical MySQL type.
    The README's type map is this macro; keep them together. -#}
{% macro gold_type(mysql_type) -%}
    {%- set t = mysql_type | lower -%}
    {%- set base = t.split('(')[0].split(' ')[0] -%}
    {%- if base in ['tinyint', 'smallint', 'mediumint'] -%} int
    {%- elif base == 'int' -%} {{ 'bigint' if 'unsigned' in t else 'int' }}
    {%- elif base == 'bigint' -%} {{ 'decimal(20,0)' if 'unsigned' in t else 'bigint' }}
    {%- elif base == 'decimal' -%} {{ gold_decimal_type(t) }}
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

{#- DECIMAL(p,s) as Spark's decimal when Spark can hold it (p <= 38); wider ones and an unknown scale as
    decimal(38,10) or string. Only digits we parsed reach the SQL. -#}
{% macro gold_decimal_type(mysql_type) -%}
    {%- set m = modules.re.fullmatch('decimal\\(([0-9]+),([0-9]+)\\)( unsigned)?', mysql_type) -%}
    {%- if m is none -%} decimal(38,10)
    {%- elif m.group(1) | int <= 38 -%} decimal({{ m.group(1) | int }},{{ m.group(2) | int }})
    {%- else -%} string
    {%- endif -%}
{%- endmacro %}
