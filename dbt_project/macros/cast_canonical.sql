{#- Canonical value text (docs/canonical-event.md) to the Spark type of a gold column, per canonical MySQL type.
    The README's type map is this macro; keep them together. `types` is the source's type mappings
    (config.TypeMappings, from the run's plan): BIGINT UNSIGNED as bigint, DECIMAL wider than 38 digits as
    decimal(38, its scale), TINYINT(1) (MySQL's BOOL) as boolean. -#}
{% macro gold_type(mysql_type, types={}) -%}
    {%- set t = mysql_type | lower -%}
    {%- set base = t.split('(')[0].split(' ')[0] -%}
    {%- if t == 'tinyint(1)' and types.get('tinyint1', 'int') == 'boolean' -%} boolean
    {%- elif base in ['tinyint', 'smallint', 'mediumint'] -%} int
    {%- elif base == 'int' -%} {{ 'bigint' if 'unsigned' in t else 'int' }}
    {%- elif base == 'bigint' -%}
        {{ 'decimal(20,0)' if 'unsigned' in t and types.get('bigint_unsigned', 'decimal') == 'decimal' else 'bigint' }}
    {%- elif base == 'decimal' -%} {{ gold_decimal_type(t, types) }}
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

{#- A value's canonical text as its gold type. Where a type mapping narrows the type (see gold_type), a value past
    the narrower range stops the run with an error naming `column` (upstream db.table.column, a literal) rather
    than becoming null. -#}
{% macro cast_canonical(expression, mysql_type, types={}, column='') -%}
    {%- set spark_type = gold_type(mysql_type, types) | trim -%}
    {%- set wide_scale = wide_decimal_scale(mysql_type | lower) | trim -%}
    {%- set fsp = time_fsp(mysql_type | lower) | trim -%}
    {%- set narrowed = (spark_type == 'bigint' and 'unsigned' in mysql_type | lower)
                       or (spark_type.startswith('decimal(38,') and wide_scale != '') -%}
    {%- if spark_type == 'binary' -%} unbase64({{ expression }})
    {%- elif spark_type == 'boolean' -%} ({{ expression }} <> '0')
    {%- elif spark_type == 'string' and wide_scale != '' -%}
        {{ decimal_text_at_scale(expression, wide_scale) }}
    {%- elif fsp -%}
        {{ time_text_at_fsp(expression, fsp) }}
    {%- elif spark_type == 'string' -%} {{ expression }}
    {%- elif narrowed -%}
        case
            when {{ expression }} is not null and try_cast({{ expression }} as {{ spark_type }}) is null
                then raise_error(concat({{ sql_string(column ~ ': ') }}, {{ expression }},
                    {{ sql_string(' does not fit ' ~ spark_type ~ ' (gold.types maps ' ~ mysql_type ~ ' to it)') }}))
            else cast({{ expression }} as {{ spark_type }})
        end
    {%- else -%} cast({{ expression }} as {{ spark_type }})
    {%- endif -%}
{%- endmacro %}

{#- DECIMAL(p,s) as Spark's decimal when Spark can hold it (p <= 38); wider ones as string, or as decimal(38,s)
    when the mappings say so. A DECIMAL whose scale the protocol does not say (Avro's string decimals, a table
    typed by its rows alone) as string, the value's text as sent: any Spark decimal would be a guess that rounds or
    drops some values. Only digits we parsed reach the SQL. -#}
{% macro gold_decimal_type(mysql_type, types={}) -%}
    {%- set m = modules.re.fullmatch('decimal\\(([0-9]+),([0-9]+)\\)( unsigned)?', mysql_type) -%}
    {%- if m is none -%} string
    {%- elif m.group(1) | int <= 38 -%} decimal({{ m.group(1) | int }},{{ m.group(2) | int }})
    {%- elif types.get('wide_decimal', 'string') == 'decimal38' -%} decimal(38,{{ m.group(2) | int }})
    {%- else -%} string
    {%- endif -%}
{%- endmacro %}


{#- The scale, as text, of a DECIMAL(p,s) wider than Spark's 38 digits, whose values gold keeps as text at that
    scale (unless the mappings make it decimal(38,s)); '' for any other type. -#}
{% macro wide_decimal_scale(mysql_type) -%}
    {%- set m = modules.re.fullmatch('decimal\\(([0-9]+),([0-9]+)\\)( unsigned)?', mysql_type) -%}
    {{- m.group(2) | int if m is not none and m.group(1) | int > 38 else '' -}}
{%- endmacro %}


{#- A value's canonical text after TiDB converted it to `mysql_type` (a MODIFY COLUMN it went through before its
    column's latest type): a number loses what that type cannot hold (`'007'` as an INT is `7`, `1.25` as a
    DECIMAL(5,1) is `1.3`); text in any other type stays as it is. -#}
{% macro canonical_through(expression, mysql_type) -%}
    {%- set t = mysql_type | lower -%}
    {%- set base = t.split('(')[0].split(' ')[0] -%}
    {%- set fsp = time_fsp(t) | trim -%}
    {%- if base in ['tinyint', 'smallint', 'mediumint', 'int', 'bigint'] -%} {{ decimal_text_at_scale(expression, 0) }}
    {%- elif base == 'decimal' and '(' in t -%} {{ decimal_text_at_scale(expression, decimal_scale(t)) }}
    {%- elif fsp -%} {{ time_text_at_fsp(expression, fsp) }}
    {%- else -%} {{ expression }}
    {%- endif -%}
{%- endmacro %}


{#- The fractional digits of a TIME(fsp) type, as text; '' for any other type, or a TIME whose fsp is not known
    (a table typed by its rows alone). -#}
{% macro time_fsp(mysql_type) -%}
    {%- set m = modules.re.fullmatch('time\\(([0-6])\\)', mysql_type) -%}
    {{- m.group(1) if m is not none else '' -}}
{%- endmacro %}


{#- A TIME's text (`[-]HH:MM:SS[.f]`, hours past 24) with exactly `fsp` fractional digits, as TiDB shows it:
    rounded half away from zero (a MODIFY to fewer digits; Debezium sends six whatever the column has). Text of
    another form stays as it is. -#}
{% macro time_text_at_fsp(expression, fsp) -%}
    {%- set fsp = fsp | int -%}
    {%- set seconds = "round(cast(regexp_extract(_time, '^-?([0-9]+):', 1) as decimal(20,6)) * 3600"
        ~ " + cast(regexp_extract(_time, ':([0-9]{2}):', 1) as int) * 60"
        ~ " + cast(regexp_extract(_time, ':([0-9]{2}([.][0-9]*)?)$', 1) as decimal(20,6)), " ~ fsp ~ ")" -%}
    element_at(transform(array({{ expression }}), _time ->
        if(_time rlike '^-?[0-9]+:[0-9]{2}:[0-9]{2}([.][0-9]{0,6})?$',
           element_at(transform(array({{ seconds }}), _seconds -> concat(
               if(_time like '-%' and _seconds > 0, '-', ''),
               format_string('%02d:%02d:%02d', cast(floor(_seconds / 3600) as bigint),
                             cast(floor(_seconds / 60) % 60 as int), cast(floor(_seconds) % 60 as int))
               {%- if fsp > 0 %},
               '.', lpad(cast(cast((_seconds - floor(_seconds)) * {{ 10 ** fsp }} as bigint) as string), {{ fsp }}, '0')
               {%- endif %}
           )), 1),
           _time)), 1)
{%- endmacro %}


{#- The scale of a DECIMAL(p,s) type (0 when none is given). -#}
{% macro decimal_scale(mysql_type) -%}
    {%- set m = modules.re.fullmatch('decimal\\(([0-9]+),([0-9]+)\\)( unsigned)?', mysql_type) -%}
    {{- m.group(2) | int if m is not none else 0 -}}
{%- endmacro %}


{#- A number's text (digits, a point, an optional minus) with exactly `scale` digits after the point and no
    leading zero, as TiDB shows a value after a MODIFY COLUMN to that scale: zeros added, or rounded half away
    from zero. Gold keeps a DECIMAL wider than Spark's 38 digits as this text, so a value written before a change
    of scale must be brought to the new one here (a narrower one is cast, which does the same). Each step binds
    its input once (a one-element `transform`), so that the expression, and a chain of these, stays small. -#}
{% macro decimal_text_at_scale(expression, scale) -%}
    {%- set scale = scale | int -%}
    {%- set fraction = "regexp_extract(_number, '[.]([0-9]*)$', 1)" -%}
    {#- the digits kept, without the point: the integer part and the fraction cut or padded to the scale -#}
    {%- set digits = "concat(regexp_extract(_number, '^-?([0-9]*)', 1), rpad(" ~ fraction ~ ", " ~ scale ~ ", '0'))" -%}
    {#- plus one in the last kept digit: the trailing nines become zeros and the digit before them goes up -#}
    {%- set head = "regexp_replace(_digits, '9*$', '')" -%}
    {%- set plus_one = "concat(if(" ~ head ~ " = '', '1', concat(substr(" ~ head ~ ", 1, length(" ~ head ~ ") - 1), "
        ~ "cast(cast(substr(" ~ head ~ ", -1) as int) + 1 as string))), repeat('0', length(_digits) - length("
        ~ head ~ ")))" -%}
    {%- set rounded = "regexp_replace(if(substr(" ~ fraction ~ ", " ~ (scale + 1) ~ ", 1) >= '5', " ~ plus_one
        ~ ", _digits), '^0+(?=[0-9]{" ~ (scale + 1) ~ "})', '')" -%}
    {%- set sign = "if(_number like '-%' and _rounded rlike '[1-9]', '-', '')" -%}
    element_at(transform(array({{ expression }}), _number ->
        element_at(transform(array({{ digits }}), _digits ->
            element_at(transform(array({{ rounded }}), _rounded ->
    {%- if scale == 0 %}
                concat({{ sign }}, _rounded)
    {%- else %}
                concat({{ sign }}, substr(_rounded, 1, length(_rounded) - {{ scale }}), '.', substr(_rounded, -{{ scale }}))
    {%- endif %}
            ), 1)), 1)), 1)
{%- endmacro %}
