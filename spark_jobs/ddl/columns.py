"""Column definitions: type, nullability, default, charset, as MySQL and TiDB spell them."""

from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    parse_type,
)
from spark_jobs.ddl.literals import _Literal, _literal, _value_text
from spark_jobs.ddl.model import _NotUnderstood
from spark_jobs.ddl.schema import _quoted
from spark_jobs.ddl.tokens import _Cursor

# spellings MySQL accepts in a column definition beyond those values.parse_type knows
_TYPE_ALIASES = {
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "nchar": "char",
    "nvarchar": "varchar",
}

_KNOWN_TYPES = frozenset(
    (*INTEGER_TYPES, *CHAR_TYPES, *BINARY_TYPES, "date", "datetime", "timestamp", "time", "year")
    + ("decimal", "numeric", "dec", "fixed", "float", "double", "real", "bit", "bool", "boolean", "integer")
    + ("enum", "set", "json", "serial", "long", "vector", "geometry", "point", "linestring", "polygon")
    + ("multipoint", "multilinestring", "multipolygon", "geometrycollection")
)

_TO_BINARY = {"char": "binary", "varchar": "varbinary", **{t: t.replace("text", "blob") for t in CHAR_TYPES[2:]}}


@dataclass
class _ColumnSpec:
    """A column definition as the statement wrote it."""

    name: str
    definition: str  # the full MySQL type: "decimal(10,2)", "datetime(3)", "enum('a','b')"
    nullable: bool | None = None  # None: not said
    default: _Literal | None = None
    primary: bool = False
    unique: bool = False
    auto_increment: bool = False
    generated: str | None = None  # VIRTUAL or STORED
    position: tuple[str, ...] = ()  # (), ("FIRST",) or ("AFTER", name)

    def declared_default(self) -> str | None:
        """The DEFAULT as schema text: canonical value, CURRENT_TIMESTAMP[(n)], or the expression's SQL."""
        lit = self.default
        if lit is None or lit.kind == "null":
            return None
        if lit.kind == "now":
            return "CURRENT_TIMESTAMP" + (f"({lit.value})" if lit.value else "")
        if lit.kind == "expression":
            sql: str = lit.value
            return sql
        return _value_text(lit, self.definition)


def _column_type(cur: _Cursor) -> tuple[str, bool]:
    """(full MySQL type, whether it is SERIAL) from a column definition's type words."""
    word = cur.word().lower()
    if word == "national":
        cur.next()
        word = cur.word().lower()
    if word not in _KNOWN_TYPES and word not in _TYPE_ALIASES:
        raise _NotUnderstood(f"unknown column type {cur.where()}")
    cur.next()
    if word in ("char", "character", "nchar") and (cur.accept("VARYING") or cur.accept("VARCHAR")):
        word = "varchar"
    elif word == "long":
        word = "mediumblob" if cur.accept("VARBINARY") else "mediumtext"
        cur.accept("VARCHAR") or cur.accept("CHAR", "VARYING")
    elif word == "double":
        cur.accept("PRECISION")
    base = _TYPE_ALIASES.get(word, word)
    if base == "serial":
        return "bigint unsigned", True
    args = None
    if cur.at_punct("("):
        inner = cur.group()
        parts = []
        while not inner.at_end():
            t = inner.next()
            if t.kind not in ("string", "number"):
                raise _NotUnderstood(f"unexpected {t.text!r} in the type of a column")
            parts.append(_quoted(t.text.rstrip(" ")) if t.kind == "string" else t.text)
            inner.accept_punct(",")
        args = ",".join(parts)
    if base == "float" and args and "," not in args and int(args) > 24:
        base, args = "double", None
    if base in ("decimal", "numeric", "dec", "fixed"):
        args = "10,0" if args is None else args if "," in args else args + ",0"
    elif base in ("binary", "char", "bit") and args is None:
        args = "1"
    unsigned = False
    while cur.at("UNSIGNED") or cur.at("SIGNED") or cur.at("ZEROFILL"):
        unsigned |= cur.next().word != "SIGNED"
    definition = base + (f"({args})" if args is not None else "")
    return definition + (" unsigned" if unsigned and parse_type(base)[0] in INTEGER_TYPES else ""), False


def _accept_charset(cur: _Cursor) -> str | None:
    if cur.accept("CHARACTER", "SET") or cur.accept("CHAR", "SET") or cur.accept("CHARSET"):
        cur.accept_punct("=")
        return cur.next().text.lower()
    if cur.accept("ASCII"):
        return "latin1"
    if cur.accept("UNICODE"):
        return "ucs2"
    return None


def _column_spec(cur: _Cursor) -> _ColumnSpec:
    """`name type [attributes] [FIRST | AFTER name]`."""
    spec = _ColumnSpec(cur.name(), "")
    spec.definition, serial = _column_type(cur)
    if serial:
        spec.nullable, spec.auto_increment, spec.unique = False, True, True
    charset = None
    while not cur.at_element_end():
        if cur.accept("NOT", "NULL"):
            spec.nullable = False
        elif cur.accept("NULL"):
            spec.nullable = True
        elif cur.accept("DEFAULT"):
            spec.default = _literal(cur)
        elif cur.accept("AUTO_INCREMENT"):
            spec.auto_increment = True
        elif cur.accept("AUTO_RANDOM"):
            if cur.at_punct("("):
                cur.group()
        elif cur.accept("PRIMARY", "KEY") or cur.accept("KEY"):
            spec.primary = True
            cur.accept("CLUSTERED") or cur.accept("NONCLUSTERED")
        elif cur.accept("UNIQUE"):
            spec.unique = True
            cur.accept("KEY") or cur.accept("INDEX")
        elif cur.accept("COMMENT") or cur.accept("COLLATE") or cur.accept("COLUMN_FORMAT") or cur.accept("STORAGE"):
            cur.value()
        elif cur.accept("ON", "UPDATE"):
            _literal(cur)
        elif cur.accept("GENERATED", "ALWAYS", "AS") or cur.accept("AS"):
            cur.group()
            spec.generated = "STORED" if cur.accept("STORED") or cur.accept("PERSISTENT") else "VIRTUAL"
            cur.accept("VIRTUAL")
        elif cur.accept("SERIAL", "DEFAULT", "VALUE"):
            spec.nullable, spec.auto_increment, spec.unique = False, True, True
        elif cur.at("CONSTRAINT") or cur.at("CHECK"):
            if cur.accept("CONSTRAINT") and not cur.at("CHECK"):
                cur.name()
            cur.expect("CHECK")
            cur.group()
            cur.accept("NOT")
            cur.accept("ENFORCED")
        elif cur.accept("REFERENCES"):
            _skip_reference(cur)
        elif cur.accept("SRID"):
            cur.next()
        elif cur.accept("FIRST"):
            spec.position = ("FIRST",)
        elif cur.accept("AFTER"):
            spec.position = ("AFTER", cur.name())
        elif any(cur.accept(w) for w in ("VISIBLE", "INVISIBLE", "BINARY", "BYTE")):
            pass
        else:
            found = _accept_charset(cur)
            if found is None:
                raise _NotUnderstood(f"unknown column attribute {cur.where()}")
            charset = found
    base = parse_type(spec.definition)[0]
    if charset == "binary" and base in _TO_BINARY:
        spec.definition = _TO_BINARY[base] + spec.definition[len(base) :]
    return spec


_REFERENCE_ACTIONS = (("SET", "NULL"), ("SET", "DEFAULT"), ("NO", "ACTION"))


def _skip_reference(cur: _Cursor) -> None:
    """`REFERENCES t (cols) [MATCH …] [ON DELETE|UPDATE action]…`: a foreign key changes no schema."""
    cur.table_name(None)
    cur.group()
    while True:
        if cur.accept("MATCH"):
            cur.next()
        elif cur.accept("ON"):
            cur.next()  # DELETE or UPDATE
            if not any(cur.accept(*action) for action in _REFERENCE_ACTIONS):
                cur.next()  # CASCADE, RESTRICT
        else:
            return
