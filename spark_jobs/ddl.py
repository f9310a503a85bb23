"""The one interpreter of TiDB DDL: what a statement is, and every table's schema after it.

Every protocol's DDL is classified here and every schema change is derived here, so that gold can replay
the upstream database exactly. The statement is read with sqlglot's MySQL tokenizer and a small parser of
the MySQL/TiDB DDL grammar over its tokens; sqlglot's own parser gives up on much of what TiDB sends
(RENAME TABLE lists, `ADD (a, b)`, partition maintenance, AUTO_RANDOM, NONCLUSTERED) and a statement half
understood must never become a wrong schema. What this module does not understand keeps the previous
schema, with understood=False and the reason in the note.

The schema (a JSON-able dict) extends `codecs.events.table_schema`:
  {"database", "table", "table_uid", "key_columns", "next_column_id",
   "columns": [{"id", "name", "type", "nullable", "elements" (enum/set only), "default", "origin_default"}]}
Column ids stay with a column through renames and type changes and are never reused, so a column dropped
and added again is a new column; table_uid stays with a table through renames and truncates.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from spark_jobs.codecs.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_type,
    canonical_value,
    decimal_scale,
    enum_elements,
    fsp_of,
    parse_type,
)

Schema = dict[str, Any]


@dataclass(frozen=True)
class TableChange:
    """One table's part in a DDL statement (a statement may touch several tables)."""

    ddl_type: str
    database: str | None  # names after the statement
    table: str | None
    old_database: str | None  # names before; differ only for renames
    old_table: str | None
    schema_after: Schema | None  # None when the table is gone (or was never known)
    clauses: tuple[str, ...] = ()  # the kind of each clause, in order
    needs_snapshot: bool = False  # the statement deleted or changed rows TiCDC does not send
    understood: bool = True
    note: str = ""  # why not understood, or what was assumed


class _NotUnderstood(Exception):
    """The statement, or one of its clauses, is outside what this interpreter knows; the message says why."""


# ---- public API --------------------------------------------------------------------------------------


def classify(sql: str) -> str:
    """The canonical ddl_type of a statement, without any schema (what the codecs put in ddl_type)."""
    try:
        return _parse(sql, None).ddl_type
    except _NotUnderstood:
        return "other"


def interpret(
    sql: str,
    *,
    database: str | None,
    table: str | None,
    commit_ts: int,
    schemas: Mapping[tuple[str, str], Schema],
    protocol_schema: Schema | None = None,
) -> list[TableChange]:
    """One TableChange per table the statement affects, in statement order.

    `schemas` holds the schemas in force before the statement; `database`/`table` are the names the
    TiCDC event carries (the default database of unqualified names). A schema the protocol carries with
    the DDL (`protocol_schema`) wins on column types, nullability and enum labels; ids, table_uid and
    origin defaults come from the statement read against the previous schema, or, when the statement is
    not understood, from the previous schema's same-named columns.
    """
    run = _Run(schemas, commit_ts, protocol_schema, (database, table))
    try:
        statement = _parse(sql, database)
    except _NotUnderstood as exc:
        run.not_understood("other", (database, table), (), str(exc))
        return run.changes
    statement.apply(run)
    return [run.with_protocol_types(change) for change in run.changes]


def inferred_schema(
    database: str,
    table: str,
    columns: list[tuple[str, str]],
    key_columns: list[str],
    commit_ts: int,
    nullable: Mapping[str, bool] | None = None,
    *,
    elements: Mapping[str, list[str]] | None = None,
    previous: Schema | None = None,
) -> Schema:
    """The schema messages show for a table, where no DDL says it: a table seen in rows (or a Simple
    bootstrap) with no DDL in the stream, or an Avro writer schema that changed.

    Nullability is unknown unless given: key columns are NOT NULL, the others nullable. ENUM/SET labels are
    known only where `elements` gives them. With `previous` (the schema in force), same-named columns keep
    their ids and defaults and the table keeps its uid; a new name gets a new id, so values of a column that
    disappeared never come back under it.
    """
    nullable = nullable or {}
    elements = elements or {}
    kept = {c["name"].casefold(): c for c in (previous or {}).get("columns", [])}
    next_id = previous["next_column_id"] if previous else 1
    entries = []
    for name, column_type in columns:
        old = kept.get(name.casefold())
        if old is None:
            column_id, next_id = next_id, next_id + 1
        else:
            column_id = old["id"]
        entry: dict[str, Any] = {
            "id": column_id,
            "name": name,
            "type": column_type,
            "nullable": nullable.get(name, name not in key_columns),
        }
        if column_type in ("enum", "set") and elements.get(name) is not None:
            entry["elements"] = list(elements[name])
        entry["default"] = old["default"] if old else None
        entry["origin_default"] = old["origin_default"] if old else None
        entries.append(entry)
    uid = previous["table_uid"] if previous else _table_uid(database, table, commit_ts)
    return _schema(database, table, uid, entries, list(key_columns), next_id if previous else None)


# ---- schema helpers ----------------------------------------------------------------------------------


def _table_uid(database: str | None, table: str, commit_ts: int) -> str:
    """Deterministic, so that rebuilding silver gives the same uids."""
    return hashlib.sha1(f"{database}\x1f{table}\x1f{commit_ts}".encode()).hexdigest()[:16]


def _schema(
    database: str | None,
    table: str,
    uid: str,
    columns: list[dict],
    key_columns: list[str],
    next_column_id: int | None = None,
) -> Schema:
    """`next_column_id` defaults to a new table's: one past its columns."""
    return {
        "database": database,
        "table": table,
        "table_uid": uid,
        "key_columns": key_columns,
        "next_column_id": next_column_id or max((c["id"] for c in columns), default=0) + 1,
        "columns": columns,
    }


def _column(
    column_id: int, name: str, definition: str, nullable: bool, default: str | None, origin: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": column_id, "name": name, "type": canonical_type(definition), "nullable": nullable}
    if entry["type"] in ("enum", "set"):
        entry["elements"] = enum_elements(definition)
    entry["default"] = default
    entry["origin_default"] = origin
    return entry


def _quoted(label: str) -> str:
    """A label as a SQL string that `values.enum_elements` reads back unchanged."""
    return "'" + label.replace("\\", "\\\\").replace("'", "''") + "'"


def _definition_of(column: Mapping[str, Any]) -> str:
    """A MySQL type text for a schema column (canonical types keep no lengths or fractional digits)."""
    if column["type"] in ("enum", "set") and column.get("elements") is not None:
        return f"{column['type']}({','.join(_quoted(e) for e in column['elements'])})"
    return column["type"]


def _same_name(a: str, b: str) -> bool:
    """Column names are case-insensitive in MySQL."""
    return a.casefold() == b.casefold()


# ---- tokens ------------------------------------------------------------------------------------------

_EXECUTABLE_COMMENT = re.compile(r"/\*(?:!\d{0,6}|T!(?:\[[^\]]*\])?)(.*?)\*/", re.S)
_TOKEN_KINDS = {
    TokenType.IDENTIFIER: "name",
    TokenType.STRING: "string",
    TokenType.NATIONAL_STRING: "string",
    TokenType.NUMBER: "number",
    TokenType.BIT_STRING: "bits",
    TokenType.HEX_STRING: "hex",
    TokenType.INTRODUCER: "introducer",
}
_WORDS = re.compile(r"[\w$]+(?:\s+[\w$]+)*")


class _Tokenizer(MySQL.Tokenizer):
    COMMANDS = set()  # sqlglot reads the rest of a RENAME/REPLACE statement as one string


@dataclass(frozen=True)
class _Token:
    kind: str  # word, name (quoted identifier), string, number, bits, hex, introducer, punct
    text: str  # words as written; strings and names unquoted
    start: int
    end: int  # inclusive, in the statement text the tokens were read from

    @property
    def word(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _tokenize(sql: str) -> list[_Token]:
    """sqlglot's MySQL tokens; multi-word keywords (`PRIMARY KEY`) split into words."""
    try:
        raw = _Tokenizer().tokenize(sql)
    except TokenError as exc:
        raise _NotUnderstood(f"cannot tokenize: {exc}") from None
    tokens = []
    for t in raw:
        kind = _TOKEN_KINDS.get(t.token_type)
        if kind is not None:
            tokens.append(_Token(kind, t.text, t.start, t.end))
        elif _WORDS.fullmatch(t.text):
            tokens.extend(_Token("word", w, t.start, t.end) for w in t.text.split())
        else:
            tokens.append(_Token("punct", t.text, t.start, t.end))
    return tokens


def _without_comments(sql: str) -> tuple[str, list[_Token]]:
    """The statement with executable comments (`/*T! … */`, `/*!50100 … */`) opened, as TiDB runs it.

    Comments sit only between tokens, so only those gaps are searched: a comment-like string stays a string.
    """
    tokens = _tokenize(sql)
    spans = sorted({(t.start, t.end + 1) for t in tokens})  # the words of `PRIMARY KEY` share one span
    bounds = [0] + [b for span in spans for b in span] + [len(sql)]
    gaps = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    if not any(_EXECUTABLE_COMMENT.search(sql, a, b) for a, b in gaps):
        return sql, tokens
    parts, done = [], 0
    for a, b in gaps:
        parts.append(sql[done:a])
        parts.append(_EXECUTABLE_COMMENT.sub(lambda m: f" {m.group(1)} ", sql[a:b]))
        done = b
    opened = "".join(parts)
    return opened, _tokenize(opened)


class _Cursor:
    """Reading position in a statement's tokens."""

    def __init__(self, sql: str, tokens: list[_Token]):
        self.sql = sql
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> _Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str:
        t = self.peek(ahead)
        return t.word if t is not None else ""

    def at(self, *words: str) -> bool:
        return all(self.word(k) == w for k, w in enumerate(words))

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise _NotUnderstood(f"expected {' '.join(words)} {self.where()}")

    def kind(self, ahead: int = 0) -> str:
        t = self.peek(ahead)
        return t.kind if t is not None else ""

    def at_punct(self, text: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == "punct" and t.text == text

    def accept_punct(self, text: str) -> bool:
        if self.at_punct(text):
            self.i += 1
            return True
        return False

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def at_element_end(self) -> bool:
        return self.at_end() or self.at_punct(",") or self.at_punct(")")

    def next(self) -> _Token:
        t = self.peek()
        if t is None:
            raise _NotUnderstood("statement ends too early")
        self.i += 1
        return t

    def where(self) -> str:
        t = self.peek()
        return f"at {t.text!r}" if t is not None else "at the end"

    def name(self) -> str:
        t = self.next()
        if t.kind in ("name", "word"):
            return t.text
        raise _NotUnderstood(f"expected a name, got {t.text!r}")

    def table_name(self, default_database: str | None) -> tuple[str | None, str]:
        first = self.name()
        if self.accept_punct("."):
            return first, self.name()
        return default_database, first

    def optional_name(self) -> str | None:
        """A name that may be left out (an index name before its column list)."""
        t = self.peek()
        if t is not None and (t.kind == "name" or (t.kind == "word" and t.word not in ("USING", "TYPE"))):
            self.i += 1
            return t.text
        return None

    def group(self) -> _Cursor:
        """The tokens inside the parenthesised group that starts here."""
        if not self.accept_punct("("):
            raise _NotUnderstood(f"expected ( {self.where()}")
        start, depth = self.i, 1
        while depth:
            t = self.next()
            if t.kind == "punct":
                depth += {"(": 1, ")": -1}.get(t.text, 0)
        return _Cursor(self.sql, self.tokens[start : self.i - 1])

    def skip_element(self) -> None:
        """Skip to the next top-level comma or closing parenthesis (options that change no schema)."""
        while not self.at_element_end():
            if self.at_punct("("):
                self.group()
            else:
                self.i += 1

    def text(self, start: int) -> str:
        """The statement text from token `start` to the current position."""
        if start >= self.i:
            return ""
        return self.sql[self.tokens[start].start : self.tokens[self.i - 1].end + 1]

    def value(self) -> None:
        """Skip an option value: one token or one parenthesised group."""
        self.accept_punct("=")
        if self.at_punct("("):
            self.group()
        else:
            self.next()


# ---- literals and canonical value text -------------------------------------------------------------


@dataclass(frozen=True)
class _Literal:
    kind: str  # null, number, string, bytes, bits, now, expression
    value: Any = None  # number: its text; string: str; bytes: bytes; bits: int; now: fsp or None; expression: SQL


_NOW_WORDS = ("CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP")


def _literal(cur: _Cursor) -> _Literal:
    """A DEFAULT value: a literal, CURRENT_TIMESTAMP, or an expression kept as SQL text."""
    start = cur.i
    if cur.at_punct("("):
        inner = cur.group()
        try:
            literal = _literal(inner)
            if inner.at_end():
                return literal
        except _NotUnderstood:
            pass
        return _Literal("expression", cur.text(start))
    negative = False
    while cur.at_punct("-") or cur.at_punct("+"):
        negative ^= cur.next().text == "-"
    t = cur.next()
    if t.kind == "number" or (t.text == "." and cur.kind() == "number"):
        digits = t.text if t.kind == "number" else "." + cur.next().text
        return _Literal("number", ("-" if negative else "") + digits)
    if negative:
        return _Literal("expression", cur.text(start))
    if t.kind == "introducer":
        value = _literal(cur)
        if t.text.lower() == "_binary" and value.kind == "string":
            return _Literal("bytes", value.value.encode())
        return value
    if t.kind == "string":
        text = t.text
        while cur.kind() == "string":  # 'a' 'b' is 'ab'
            text += cur.next().text
        return _Literal("string", text)
    if t.kind == "bits":
        return _Literal("bits", int(t.text or "0", 2))
    if t.kind == "hex":
        return _Literal("bytes", binascii.unhexlify(t.text.rjust(len(t.text) + len(t.text) % 2, "0")))
    if t.word in ("TRUE", "FALSE"):
        return _Literal("number", "1" if t.word == "TRUE" else "0")
    if t.word == "NULL":
        return _Literal("null")
    if t.word in _NOW_WORDS:
        fsp = None
        if cur.at_punct("("):
            inner = cur.group()
            fsp = int(inner.next().text) if not inner.at_end() else None
        return _Literal("now", fsp)
    if t.word in ("DATE", "TIME", "TIMESTAMP") and cur.kind() == "string":
        return _Literal("string", cur.next().text)
    if t.kind == "word" and cur.at_punct("("):
        cur.group()
    return _Literal("expression", cur.text(start))


def _decimal(lit: _Literal) -> Decimal:
    if lit.kind == "number":
        return Decimal(lit.value)
    if lit.kind == "string":
        return Decimal(lit.value.strip())
    if lit.kind == "bits":
        return Decimal(lit.value)
    if lit.kind == "bytes":
        return Decimal(int.from_bytes(lit.value, "big"))
    raise ValueError(lit.kind)


def _bytes(lit: _Literal) -> bytes:
    if lit.kind == "bytes":
        return lit.value
    if lit.kind == "bits":
        return lit.value.to_bytes(max(1, (lit.value.bit_length() + 7) // 8), "big")
    return str(lit.value).encode()


def _text(lit: _Literal) -> str:
    return _bytes(lit).decode() if lit.kind in ("bytes", "bits") else str(lit.value)


def _rounded(micros: int, fsp: int) -> int:
    """Microseconds rounded half up to `fsp` digits, as MySQL stores a too-precise temporal value."""
    unit = 10 ** (6 - fsp)
    return (micros + unit // 2) // unit * unit


_DATETIME = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?)?")
_TIME_OF_DAY = re.compile(r"\d:\d\d(?:\.(\d+))?$")
_TIME = re.compile(r"(-)?(?:(\d+) )?(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?")


def _datetime(text: str, fsp: int) -> dt.datetime | None:
    """None for MySQL's zero date."""
    m = _DATETIME.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a date/time: {text!r}")
    y, mo, d, h, mi, s = (int(g or 0) for g in m.groups()[:6])
    if (y, mo, d) == (0, 0, 0):
        return None
    micros = _rounded(int((m.group(7) or "").ljust(6, "0")), fsp)
    return dt.datetime(y, mo, d, h, mi, s) + dt.timedelta(microseconds=micros)


def _time(lit: _Literal, fsp: int) -> dt.timedelta:
    text = _text(lit).strip()
    m = _TIME.fullmatch(text)
    if m:
        sign, days, h, mi, s, frac = m.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + int(s or 0)
    else:
        number = Decimal(text)  # HHMMSS[.f]
        sign, whole = ("-" if number < 0 else None), int(abs(number))
        seconds = whole // 10000 * 3600 + whole // 100 % 100 * 60 + whole % 100
        frac = format(abs(number) % 1, "f")[2:]
    micros = seconds * 1_000_000 + _rounded(int((frac or "").ljust(6, "0")[:6]), fsp)
    return dt.timedelta(microseconds=-micros if sign else micros)


def _year(lit: _Literal) -> int:
    n = int(_decimal(lit).to_integral_value(ROUND_HALF_UP))
    if lit.kind == "string" and n == 0:
        return 2000
    if 1 <= n <= 69:
        return 2000 + n
    return 1900 + n if 70 <= n <= 99 else n


def _label(elements: list[str], lit: _Literal) -> str:
    if lit.kind == "number":
        index = int(lit.value)
        if not 1 <= index <= len(elements):
            raise ValueError(f"no label {index}")
        return elements[index - 1]
    text = _text(lit).rstrip(" ")
    for e in elements:
        if _same_name(e, text):
            return e
    raise ValueError(f"{text!r} is not one of {elements}")


def _value(lit: _Literal, definition: str) -> Any:
    """The literal as the typed Python value `values.canonical_value` expects (MySQL's conversions)."""
    base, args, unsigned = parse_type(definition)
    if base in INTEGER_TYPES:
        n = int(_decimal(lit).to_integral_value(ROUND_HALF_UP))
        if unsigned and n < 0:
            raise ValueError("negative value for an unsigned column")
        return n
    if base == "decimal":
        scale = decimal_scale(definition)
        number = _decimal(lit)
        return number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP) if scale is not None else number
    if base in ("float", "double"):
        return float(_decimal(lit))
    if base == "bit":
        return int.from_bytes(_bytes(lit), "big") if lit.kind == "string" else int(_decimal(lit))
    if base == "year":
        return _year(lit)
    if base in ("date", "datetime", "timestamp"):
        value = _datetime(_text(lit), fsp_of(definition))
        if value is None:
            return None
        return value.date() if base == "date" else value
    if base == "time":
        return _time(lit, fsp_of(definition))
    if base == "enum":
        return _label(enum_elements(definition), lit)
    if base == "set":
        text = _text(lit) if lit.kind != "number" else None
        elements = enum_elements(definition)
        if text is None:
            mask = int(lit.value)
            return tuple(e for i, e in enumerate(elements) if mask >> i & 1)
        return tuple(_label(elements, _Literal("string", part)) for part in text.split(",") if part)
    if base in BINARY_TYPES:
        data = _bytes(lit)
        return data.ljust(int(args), b"\0") if base == "binary" and args else data
    if base == "char":
        return _text(lit).rstrip(" ")
    return _text(lit)


def _zero_date_text(definition: str) -> str:
    base = parse_type(definition)[0]
    fsp = fsp_of(definition)
    return "0000-00-00" if base == "date" else "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def _value_text(lit: _Literal, definition: str) -> str | None:
    """Canonical text of a literal stored in a column of this type; None for NULL."""
    if lit.kind == "null":
        return None
    try:
        value = _value(lit, definition)
    except (ValueError, ArithmeticError, UnicodeDecodeError, InvalidOperation) as exc:
        raise _NotUnderstood(f"{lit.value!r} is not a {definition} value ({exc})") from None
    return _zero_date_text(definition) if value is None else canonical_value(definition, value)


def _zero_text(definition: str) -> str:
    """What TiDB fills existing rows with for a NOT NULL column added without DEFAULT (table.GetZeroValue)."""
    base, args, _ = parse_type(definition)
    if base in ("date", "datetime", "timestamp"):
        return _zero_date_text(definition)
    if base == "enum":
        elements = enum_elements(definition)
        return elements[0] if elements else ""
    if base == "json":
        return "null"
    if base == "binary":
        return canonical_value(definition, bytes(int(args or 1)))
    if base in BINARY_TYPES:
        return canonical_value(definition, b"")
    if base == "time":
        return canonical_value(definition, dt.timedelta(0))
    if base in ("set", *CHAR_TYPES):
        return ""
    if base in ("decimal", "float", "double", "bit", "year", *INTEGER_TYPES):
        return canonical_value(definition, Decimal(0) if base == "decimal" else 0)
    return ""


def _commit_time(commit_ts: int) -> dt.datetime:
    """A TSO's physical part: milliseconds since the epoch, UTC."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=commit_ts >> 18)


def _reformatted(text: str, old_definition: str, new_definition: str) -> str:
    """A column's origin default carried to its new type by a MODIFY/CHANGE (TiDB converts old rows)."""
    old_base = parse_type(old_definition)[0]
    if old_base in BINARY_TYPES:
        lit = _Literal("bytes", base64.b64decode(text))
    elif old_base in INTEGER_TYPES + ("decimal", "float", "double", "bit", "year"):
        lit = _Literal("number", text)
    else:
        lit = _Literal("string", text)
    return _value_text(lit, new_definition)


# ---- column definitions ------------------------------------------------------------------------------

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
            return lit.value
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


# ---- the working table -------------------------------------------------------------------------------


class _Table:
    """A table's schema while a statement's clauses are applied to it, one by one."""

    def __init__(self, schema: Schema, commit_ts: int):
        self.database = schema["database"]
        self.table = schema["table"]
        self.uid = schema.get("table_uid") or _table_uid(self.database, self.table, 0)  # schemas without uids
        self.columns = [dict(c) for c in schema["columns"]]
        ids = [c["id"] for c in self.columns if "id" in c]
        self.next_column_id = max([schema.get("next_column_id") or 1] + [i + 1 for i in ids])
        for c in self.columns:  # schemas written before columns had ids
            if "id" not in c:
                c["id"] = self.allocate_id()
            c.setdefault("default", None)
            c.setdefault("origin_default", None)
        self.key_columns = list(schema["key_columns"])
        self.commit_ts = commit_ts
        self.declared: dict[int, str] = {}  # column id -> full MySQL type, where this statement declared it
        self.notes: list[str] = []
        self.snapshot_reasons: list[str] = []

    def allocate_id(self) -> int:
        self.next_column_id += 1
        return self.next_column_id - 1

    def find(self, name: str) -> int | None:
        return next((i for i, c in enumerate(self.columns) if _same_name(c["name"], name)), None)

    def column(self, name: str) -> int:
        i = self.find(name)
        if i is None:
            raise _NotUnderstood(f"column {name!r} is not in the schema of {self.database}.{self.table}")
        return i

    def definition(self, i: int) -> str:
        c = self.columns[i]
        return self.declared.get(c["id"], _definition_of(c))

    def place(self, entry: dict[str, Any], position: tuple[str, ...]) -> None:
        if not position:
            self.columns.append(entry)
        elif position[0] == "FIRST":
            self.columns.insert(0, entry)
        else:
            self.columns.insert(self.column(position[1]) + 1, entry)

    def key_ids(self) -> list[int]:
        return [self.columns[self.column(k)]["id"] for k in self.key_columns]

    def set_key(self, names: list[str]) -> None:
        self.key_columns = [self.columns[self.column(n)]["name"] for n in names]
        for n in names:
            self.columns[self.column(n)]["nullable"] = False

    def schema(self) -> Schema:
        for c in self.columns:
            if c["name"] in self.key_columns:
                c["nullable"] = False
        return _schema(self.database, self.table, self.uid, self.columns, list(self.key_columns), self.next_column_id)

    # -- clauses --

    def add_column(self, spec: _ColumnSpec, if_not_exists: bool) -> None:
        if self.find(spec.name) is not None:
            if if_not_exists:
                return
            raise _NotUnderstood(f"column {spec.name!r} already exists")
        if spec.generated == "VIRTUAL":
            self.notes.append(f"virtual generated column {spec.name!r} left out: TiCDC does not send it")
            return
        nullable = spec.nullable is not False and not spec.primary
        entry = _column(
            self.allocate_id(),
            spec.name,
            spec.definition,
            nullable,
            spec.declared_default(),
            self._origin_default(spec, nullable),
        )
        self.declared[entry["id"]] = spec.definition
        self.place(entry, spec.position)
        self._index_column(spec)

    def _origin_default(self, spec: _ColumnSpec, nullable: bool) -> str | None:
        """The value rows that existed before ADD COLUMN show for it (TiDB's OriginDefaultValue)."""
        lit, base = spec.default, parse_type(spec.definition)[0]
        problem = None
        if spec.generated:
            problem = "a stored generated column: existing rows get computed values"
        elif spec.auto_increment:
            problem = "an AUTO_INCREMENT column: existing rows get numbers"
        elif lit is not None and lit.kind == "now" and base in ("datetime", "timestamp"):
            self.notes.append(f"{spec.name!r}: existing rows show the DDL's commit time (UTC)")
            return canonical_value(spec.definition, _commit_time(self.commit_ts))
        elif lit is not None and lit.kind in ("now", "expression"):
            problem = f"DEFAULT {spec.declared_default()} is not evaluated here"
        if problem:
            self.snapshot_reasons.append(f"added column {spec.name!r} is {problem}")
            return None
        if lit is None:
            return None if nullable else _zero_text(spec.definition)
        return _value_text(lit, spec.definition)

    def _index_column(self, spec: _ColumnSpec) -> None:
        if spec.primary:
            self.set_key([spec.name])
        elif spec.unique:
            self.add_unique([spec.name])

    def drop_column(self, name: str, if_exists: bool) -> None:
        i = self.find(name)
        if i is None and if_exists:
            return
        dropped = self.columns.pop(self.column(name))
        self.key_columns = [k for k in self.key_columns if k != dropped["name"]]

    def modify_column(self, old_name: str, spec: _ColumnSpec, if_exists: bool) -> None:
        """MODIFY, and CHANGE: the new definition replaces the old one; the column keeps its id."""
        i = self.find(old_name)
        if i is None and if_exists:
            return
        i = self.column(old_name)
        old = self.columns[i]
        other = self.find(spec.name)
        if other is not None and other != i:
            raise _NotUnderstood(f"column {spec.name!r} already exists")
        if spec.generated == "VIRTUAL":
            raise _NotUnderstood(f"{spec.name!r} becomes a virtual generated column")
        old_definition = self.definition(i)
        origin = old["origin_default"]
        if origin is not None and old_definition != spec.definition:
            try:
                origin = _reformatted(origin, old_definition, spec.definition)
            except _NotUnderstood as exc:
                self.snapshot_reasons.append(f"rows from before {old['name']!r} was added: {exc}")
        nullable = spec.nullable is not False and not spec.primary
        entry = _column(old["id"], spec.name, spec.definition, nullable, spec.declared_default(), origin)
        self.declared[entry["id"]] = spec.definition
        self.key_columns = [spec.name if _same_name(k, old_name) else k for k in self.key_columns]
        if spec.position:
            self.columns.pop(i)
            self.place(entry, spec.position)
        else:
            self.columns[i] = entry
        self._index_column(spec)

    def rename_column(self, old_name: str, new_name: str) -> None:
        i = self.column(old_name)
        other = self.find(new_name)
        if other is not None and other != i:
            raise _NotUnderstood(f"column {new_name!r} already exists")
        self.key_columns = [new_name if k == self.columns[i]["name"] else k for k in self.key_columns]
        self.columns[i]["name"] = new_name

    def set_default(self, name: str, lit: _Literal | None) -> None:
        """ALTER COLUMN SET/DROP DEFAULT: only the declared default changes, not the rows."""
        i = self.column(name)
        definition = self.definition(i)
        if definition in ("datetime", "timestamp", "time") and lit is not None and lit.kind == "string":
            definition = self._temporal_definition(i, lit.value)
        spec = _ColumnSpec(self.columns[i]["name"], definition, default=lit)
        self.columns[i]["default"] = spec.declared_default()

    def _temporal_definition(self, i: int, literal: str) -> str:
        """Schemas keep no fractional digits: take them from the column's other values, else from the literal."""
        c = self.columns[i]
        for sample in (c["default"], c["origin_default"], literal):
            m = _TIME_OF_DAY.search(sample or "")
            if m:
                if sample is literal:
                    self.notes.append(f"fractional digits of {c['name']!r} not known: default kept as written")
                return f"{c['type']}({len(m.group(1) or '')})"
        return c["type"]

    def add_primary_key(self, names: list[str | None]) -> None:
        if None in names:
            raise _NotUnderstood("a primary key on an expression")
        self.set_key([n for n in names if n])

    def add_unique(self, names: list[str | None]) -> None:
        """A unique index on NOT NULL columns is TiCDC's handle key when the table has none."""
        if self.key_columns or None in names:
            return
        columns = [self.columns[self.column(n)] for n in names if n]
        if all(not c["nullable"] for c in columns):
            self.key_columns = [c["name"] for c in columns]

    def drop_primary_key(self) -> None:
        self.key_columns = []
        self.notes.append("primary key dropped: a unique NOT NULL index, if any, is now TiCDC's handle key")

    def rename_table(self, database: str | None, table: str) -> None:
        self.database, self.table = database or self.database, table

    def convert_to_binary(self) -> None:
        """CONVERT TO CHARACTER SET binary: text columns become binary ones, their values bytes."""
        for i, c in enumerate(self.columns):
            definition = self.definition(i)
            base = parse_type(definition)[0]
            if base in _TO_BINARY:
                binary = _TO_BINARY[base] + definition[len(base) :]
                default, origin = (
                    None if text is None else _reformatted(text, definition, binary)
                    for text in (c["default"], c["origin_default"])
                )
                self.columns[i] = _column(c["id"], c["name"], binary, c["nullable"], default, origin)


# ---- statements --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Clause:
    kind: str  # the ddl_type of this clause alone
    apply: Callable[[_Table], None] | None = None  # None: no change to columns or keys
    snapshot: str = ""  # why the clause needs a snapshot ("" when it does not)
    exchanged_with: tuple[str | None, str] | None = None  # EXCHANGE PARTITION's other table


@dataclass(frozen=True)
class _Statement:
    ddl_type: str
    apply: Callable[[_Run], None]


def _ddl_type(kinds: tuple[str, ...]) -> str:
    distinct = set(kinds)
    if not distinct:
        return "alter_table"
    return distinct.pop() if len(distinct) == 1 else "multi_schema_change"


class _Run:
    """The schemas as a statement changes them (a later part of a statement sees the earlier ones)."""

    def __init__(
        self,
        schemas: Mapping[tuple[str, str], Schema],
        commit_ts: int,
        protocol_schema: Schema | None,
        event_names: tuple[str | None, str | None],
    ):
        self.schemas = dict(schemas)
        self.commit_ts = commit_ts
        self.protocol_schema = protocol_schema
        self.event_names = event_names
        self.protocol_table = (protocol_schema or {}).get("table") or event_names[1]
        self.changes: list[TableChange] = []

    def find(self, database: str | None, table: str | None) -> tuple[tuple[str, str], Schema] | None:
        """Exact names first, then case-insensitively (TiDB compares table names so, lower_case_table_names=2)."""
        if table is None:
            return None
        if (database, table) in self.schemas:
            return (database, table), self.schemas[(database, table)]
        for key, schema in self.schemas.items():
            if (database is None or _same_name(key[0], database)) and _same_name(key[1], table):
                return key, schema
        return None

    def put(self, old_key: tuple[str, str] | None, schema: Schema | None, new_key: tuple[str, str] | None) -> None:
        if old_key is not None:
            self.schemas.pop(old_key, None)
        if schema is not None and new_key is not None:
            self.schemas[new_key] = schema

    def not_understood(
        self,
        ddl_type: str,
        names: tuple[str | None, str | None],
        clauses: tuple[str, ...],
        reason: str,
    ) -> None:
        """The previous schema unchanged (or the protocol's, with the previous ids); a snapshot if it was known."""
        found = self.find(*names)
        previous = _Table(found[1], self.commit_ts).schema() if found else None
        schema = previous
        if self.carries_protocol_schema(names[1]):
            schema = _schema_from_protocol(self.protocol_schema, previous, *names, self.commit_ts)
        database, table = (previous["database"], previous["table"]) if previous else names
        note = reason + ("; rows may have changed: take a snapshot" if previous else "")
        self.changes.append(
            TableChange(ddl_type, database, table, database, table, schema, clauses, previous is not None, False, note)
        )

    def table_change(self, ddl_type: str, target: tuple[str | None, str], clauses: list[_Clause]) -> None:
        """Apply an ALTER's clauses (or a one-clause statement such as CREATE INDEX) to one table."""
        kinds = tuple(c.kind for c in clauses)
        found = self.find(*target)
        if found is None:
            self.not_understood(ddl_type, target, kinds, f"table {target[0]}.{target[1]} is not known")
            return
        key, previous = found
        table = _Table(previous, self.commit_ts)
        try:
            key_before = table.key_ids()
            for clause in clauses:
                if clause.apply is not None:
                    clause.apply(table)
            key_after = table.key_ids()
        except _NotUnderstood as exc:
            self.not_understood(ddl_type, target, kinds, str(exc))
            return
        reasons = [c.snapshot for c in clauses if c.snapshot] + table.snapshot_reasons
        if key_before != key_after:
            reasons.append(f"the handle key changed from {previous['key_columns']} to {table.key_columns}")
        schema = table.schema()
        self.put(key, schema, (table.database, table.table))
        note = "; ".join(table.notes + reasons)
        self.changes.append(
            TableChange(ddl_type, table.database, table.table, *key, schema, kinds, bool(reasons), True, note)
        )
        for clause in clauses:
            if clause.exchanged_with is not None:
                self._exchanged(clause.exchanged_with, kinds)

    def carries_protocol_schema(self, table: str | None) -> bool:
        return (
            self.protocol_schema is not None
            and None not in (table, self.protocol_table)
            and _same_name(table, self.protocol_table)
        )

    def with_protocol_types(self, change: TableChange) -> TableChange:
        """Column types, nullability and labels from the protocol's schema, by column name."""
        if not change.understood or change.schema_after is None or not self.carries_protocol_schema(change.table):
            return change
        by_name = {c["name"].casefold(): c for c in self.protocol_schema["columns"]}
        columns, statement_only = [], []
        for c in change.schema_after["columns"]:
            p = by_name.pop(c["name"].casefold(), None)
            if p is None:
                statement_only.append(c["name"])
            else:
                elements = p.get("elements") if p.get("elements") is not None else c.get("elements")
                c = {**c, "type": p["type"], "nullable": p["nullable"], "elements": elements}
                keep_elements = c["type"] in ("enum", "set") and elements is not None
                c = {k: c[k] for k in _COLUMN_KEYS if k != "elements" or keep_elements}
            columns.append(c)
        note = change.note
        if by_name or statement_only:
            protocol_only = [p["name"] for p in by_name.values()]
            differ = f"columns only in the statement: {statement_only}, only in the protocol's schema: {protocol_only}"
            note = "; ".join(filter(None, [note, differ]))
        return replace(change, schema_after={**change.schema_after, "columns": columns}, note=note)

    def _exchanged(self, names: tuple[str | None, str], kinds: tuple[str, ...]) -> None:
        found = self.find(*names)
        database, table = (found[1]["database"], found[1]["table"]) if found else names
        schema = found[1] if found else None
        note = "rows swapped with a partition" + ("" if found else "; table not known")
        self.changes.append(
            TableChange("exchange_partition", database, table, database, table, schema, kinds, True, True, note)
        )


def _parse(sql: str, database: str | None) -> _Statement:
    text, tokens = _without_comments(sql)
    cur = _Cursor(text, tokens[:-1] if tokens and tokens[-1].text == ";" else tokens)
    if cur.at_end():
        raise _NotUnderstood("empty statement")
    for words, parse in _STATEMENTS:
        if cur.accept(*words):
            statement = parse(cur, database)
            if not cur.at_end():
                raise _NotUnderstood(f"unexpected {cur.where()}")
            return statement
    raise _NotUnderstood(f"not a DDL statement this interpreter knows: {' '.join(t.text for t in tokens[:3])}")


def _parse_create(cur: _Cursor, database: str | None) -> _Statement:
    cur.accept("OR", "REPLACE")
    cur.accept("GLOBAL") or cur.accept("LOCAL")
    if cur.accept("TEMPORARY") or cur.at("TABLE"):
        cur.expect("TABLE")
        return _parse_create_table(cur, database)
    if cur.accept("DATABASE") or cur.accept("SCHEMA"):
        cur.accept("IF", "NOT", "EXISTS")
        name = cur.name()
        _skip_rest(cur)
        return _Statement("create_database", lambda run: _database_change(run, "create_database", name))
    unique = cur.accept("UNIQUE")
    if unique or cur.at("INDEX") or cur.at("FULLTEXT") or cur.at("SPATIAL"):
        cur.accept("FULLTEXT") or cur.accept("SPATIAL")
        cur.expect("INDEX")
        cur.accept("IF", "NOT", "EXISTS")
        cur.name()
        if cur.accept("USING") or cur.accept("TYPE"):
            cur.next()
        cur.expect("ON")
        target = cur.table_name(database)
        columns = _index_columns(cur)
        _skip_rest(cur)
        clause = _Clause("create_index", (lambda t: t.add_unique(columns)) if unique else None)
        return _Statement("create_index", lambda run: run.table_change("create_index", target, [clause]))
    raise _NotUnderstood(f"CREATE {cur.word()} is not a table, index or database")


def _parse_create_table(cur: _Cursor, database: str | None) -> _Statement:
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    target = cur.table_name(database)
    if cur.accept("LIKE") or (cur.at_punct("(") and cur.word(1) == "LIKE"):
        inner = cur.group() if cur.at_punct("(") else cur
        inner.accept("LIKE")
        source = inner.table_name(database)
        return _Statement("create_table", lambda run: _create_like(run, target, source, if_not_exists))
    elements = cur.group()
    specs, primary, uniques = [], [], []
    while not elements.at_end():
        _table_element(elements, specs, primary, uniques)
        if not elements.accept_punct(",") and not elements.at_end():
            raise _NotUnderstood(f"unexpected {elements.where()} in CREATE TABLE")
    while not cur.at_end():  # table and partition options
        if cur.at("SELECT") or cur.at("AS") or cur.at("TABLE"):
            raise _NotUnderstood("CREATE TABLE … SELECT: the columns come from a query")
        if cur.at_punct("("):
            cur.group()
        else:
            cur.next()
    return _Statement("create_table", lambda run: _create(run, target, specs, primary, uniques, if_not_exists))


def _table_element(
    cur: _Cursor, specs: list[_ColumnSpec], primary: list[str | None], uniques: list[list[str | None]]
) -> None:
    """One element of CREATE TABLE's list: a column, or a key/index/constraint over columns."""
    if cur.accept("CONSTRAINT") and cur.word() not in _INDEX_WORDS:
        cur.name()
    if cur.accept("PRIMARY", "KEY"):
        cur.optional_name()
        primary.extend(_index_columns(cur))
    elif cur.accept("UNIQUE"):
        cur.accept("KEY") or cur.accept("INDEX")
        cur.optional_name()
        uniques.append(_index_columns(cur))
    elif any(cur.accept(w) for w in ("KEY", "INDEX", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK")):
        pass
    else:
        specs.append(_column_spec(cur))
        if specs[-1].position:
            raise _NotUnderstood("FIRST/AFTER in CREATE TABLE")
        return
    cur.skip_element()


def _index_columns(cur: _Cursor) -> list[str | None]:
    """An index's key parts: column names; None for an expression or a prefix (not a handle key)."""
    if cur.accept("USING") or cur.accept("TYPE"):
        cur.next()
    inner = cur.group()
    parts: list[str | None] = []
    while not inner.at_end():
        if inner.at_punct("("):
            inner.group()
            parts.append(None)
        else:
            name = inner.name()
            parts.append(None if inner.at_punct("(") else name)
            if inner.at_punct("("):
                inner.group()
        inner.accept("ASC") or inner.accept("DESC")
        inner.accept_punct(",")
    return parts


def _skip_rest(cur: _Cursor) -> None:
    while not cur.at_end():
        if cur.at_punct("("):
            cur.group()
        else:
            cur.next()


def _key_of(specs: list[_ColumnSpec], primary: list[str | None], uniques: list[list[str | None]]) -> list[str]:
    """TiCDC's handle key: the primary key, else the unique NOT NULL index with fewest columns (first wins)."""
    inline = [s.name for s in specs if s.primary]
    if primary or inline:
        return [p for p in (primary or inline) if p]
    not_null = {s.name.casefold() for s in specs if s.nullable is False and s.generated != "VIRTUAL"}
    candidates = uniques + [[s.name] for s in specs if s.unique]
    eligible = [u for u in candidates if u and all(n is not None and n.casefold() in not_null for n in u)]
    return list(min(eligible, key=len)) if eligible else []


def _left_as_it_was(run: _Run, schema: Schema) -> None:
    """CREATE TABLE IF NOT EXISTS of a table that exists."""
    database, table = schema["database"], schema["table"]
    note = "table exists: CREATE TABLE IF NOT EXISTS left it as it was"
    run.changes.append(
        TableChange("create_table", database, table, database, table, schema, ("create_table",), note=note)
    )


def _create(
    run: _Run,
    target: tuple[str | None, str],
    specs: list[_ColumnSpec],
    primary: list[str | None],
    uniques: list[list[str | None]],
    if_not_exists: bool,
) -> None:
    found = run.find(*target)
    if found and if_not_exists:
        _left_as_it_was(run, found[1])
        return
    try:
        key = _key_of(specs, primary, uniques)
        visible = [s for s in specs if s.generated != "VIRTUAL"]
        columns = []
        for column_id, s in enumerate(visible, start=1):
            nullable = s.nullable is not False and not any(_same_name(s.name, k) for k in key)
            columns.append(_column(column_id, s.name, s.definition, nullable, s.declared_default(), None))
        names = {c["name"].casefold(): c["name"] for c in columns}
        key_columns = [names[k.casefold()] for k in key]
    except (_NotUnderstood, KeyError) as exc:
        run.not_understood("create_table", target, ("create_table",), f"CREATE TABLE not understood: {exc}")
        return
    schema = _schema(*target, _table_uid(*target, run.commit_ts), columns, key_columns)
    run.put(found[0] if found else None, schema, target)
    note = "virtual generated columns left out: TiCDC does not send them" if len(visible) < len(specs) else ""
    run.changes.append(TableChange("create_table", *target, *target, schema, ("create_table",), note=note))


def _create_like(
    run: _Run, target: tuple[str | None, str], source: tuple[str | None, str], if_not_exists: bool
) -> None:
    found, like = run.find(*target), run.find(*source)
    if found and if_not_exists:
        _left_as_it_was(run, found[1])
        return
    if like is None:
        run.not_understood("create_table", target, ("create_table",), f"LIKE {source[0]}.{source[1]}: not known")
        return
    columns = [
        {**c, "id": column_id, "origin_default": None} for column_id, c in enumerate(like[1]["columns"], start=1)
    ]
    schema = _schema(*target, _table_uid(*target, run.commit_ts), columns, list(like[1]["key_columns"]))
    run.put(found[0] if found else None, schema, target)
    run.changes.append(TableChange("create_table", *target, *target, schema, ("create_table",)))


def _parse_drop(cur: _Cursor, database: str | None) -> _Statement:
    cur.accept("TEMPORARY")
    if cur.accept("TABLE") or cur.accept("TABLES"):
        if_exists = cur.accept("IF", "EXISTS")
        targets = [cur.table_name(database)]
        while cur.accept_punct(","):
            targets.append(cur.table_name(database))
        cur.accept("RESTRICT") or cur.accept("CASCADE")
        return _Statement("drop_table", lambda run: _drop_tables(run, targets, if_exists))
    if cur.accept("DATABASE") or cur.accept("SCHEMA"):
        cur.accept("IF", "EXISTS")
        name = cur.name()
        return _Statement("drop_database", lambda run: _drop_database(run, name))
    if cur.accept("INDEX"):
        cur.accept("IF", "EXISTS")
        index = cur.name()
        cur.expect("ON")
        target = cur.table_name(database)
        _skip_rest(cur)
        clause = _drop_index_clause(index)
        return _Statement("drop_index", lambda run: run.table_change("drop_index", target, [clause]))
    raise _NotUnderstood(f"DROP {cur.word()} is not a table, index or database")


def _drop_tables(run: _Run, targets: list[tuple[str | None, str]], if_exists: bool) -> None:
    for target in targets:
        found = run.find(*target)
        database, table = (found[1]["database"], found[1]["table"]) if found else target
        note = "" if found else "table not known" + (" (IF EXISTS)" if if_exists else "")
        run.put(found[0] if found else None, None, None)
        run.changes.append(
            TableChange("drop_table", database, table, database, table, None, ("drop_table",), note=note)
        )


def _database_change(run: _Run, ddl_type: str, name: str) -> None:
    run.changes.append(TableChange(ddl_type, name, None, name, None, None, (ddl_type,)))


def _drop_database(run: _Run, name: str) -> None:
    """Every known table of the database goes with it, then the database itself."""
    for key in sorted(k for k in run.schemas if k[0] is not None and _same_name(k[0], name)):
        schema = run.schemas.pop(key)
        run.changes.append(
            TableChange("drop_database", schema["database"], schema["table"], *key, None, ("drop_database",))
        )
    _database_change(run, "drop_database", name)


def _parse_rename(cur: _Cursor, database: str | None) -> _Statement:
    if not (cur.accept("TABLE") or cur.accept("TABLES")):
        raise _NotUnderstood(f"RENAME {cur.word()} is not RENAME TABLE")
    pairs = []
    while True:
        old = cur.table_name(database)
        cur.expect("TO")
        pairs.append((old, cur.table_name(database)))
        if not cur.accept_punct(","):
            break
    return _Statement("rename_table", lambda run: _rename_tables(run, pairs))


def _rename_tables(run: _Run, pairs: list[tuple[tuple[str | None, str], tuple[str | None, str]]]) -> None:
    for old, new in pairs:
        clause = _Clause("rename_table", lambda t, new=new: t.rename_table(*new))
        run.table_change("rename_table", old, [clause])
        last = run.changes[-1]
        if not last.understood:  # say what the table is called now, even without its schema
            run.changes[-1] = TableChange("rename_table", *new, *old, None, ("rename_table",), False, False, last.note)


def _parse_truncate(cur: _Cursor, database: str | None) -> _Statement:
    cur.accept("TABLE")
    target = cur.table_name(database)
    return _Statement(
        "truncate_table", lambda run: run.table_change("truncate_table", target, [_Clause("truncate_table")])
    )


def _parse_alter(cur: _Cursor, database: str | None) -> _Statement:
    if cur.accept("DATABASE") or cur.accept("SCHEMA"):
        name = database if cur.at_end() or cur.at("DEFAULT") or _at_charset(cur) else cur.name()
        _skip_rest(cur)
        return _Statement("alter_table", lambda run: _database_change(run, "alter_table", name))
    cur.accept("ONLINE") or cur.accept("OFFLINE")
    cur.accept("IGNORE")
    cur.expect("TABLE")
    target = cur.table_name(database)
    clauses: list[_Clause] = []
    while not cur.at_end():
        clauses.extend(_alter_clause(cur, database))
        cur.accept_punct(",")
    ddl_type = _ddl_type(tuple(c.kind for c in clauses))
    return _Statement(ddl_type, lambda run: run.table_change(ddl_type, target, clauses))


def _at_charset(cur: _Cursor) -> bool:
    return cur.at("CHARACTER") or cur.at("CHARSET") or cur.at("CHAR") or cur.at("COLLATE") or cur.at("ENCRYPTION")


def _parse_recover(cur: _Cursor, database: str | None) -> _Statement:
    """RECOVER TABLE t | RECOVER TABLE BY JOB n | FLASHBACK TABLE t [TO t2] | FLASHBACK DATABASE d [TO d2]."""
    if cur.accept("DATABASE") or cur.accept("SCHEMA"):
        name = cur.name()
        if cur.accept("TO"):
            name = cur.name()
        return _Statement("recover_table", lambda run: _recovered(run, (name, None)))
    cur.expect("TABLE")
    if cur.accept("BY", "JOB"):
        cur.next()
        return _Statement("recover_table", lambda run: _recovered(run, None))
    target = cur.table_name(database)
    if cur.kind() == "number":  # RECOVER TABLE t <job number>
        cur.next()
    if cur.accept("TO"):
        target = (target[0], cur.name())
    return _Statement("recover_table", lambda run: _recovered(run, target))


def _recovered(run: _Run, target: tuple[str | None, str | None] | None) -> None:
    """A dropped table (or database) comes back with rows TiCDC does not send: gold needs a snapshot.

    Its schema is not in the statement; only a protocol that carries one (with new column ids) gives it.
    """
    database, table = target or run.event_names
    schema = None
    if table is not None and run.carries_protocol_schema(table):
        schema = _schema_from_protocol(run.protocol_schema, None, database, table, run.commit_ts)
    note = "recovered: its schema and rows are not in the statement; take them from a snapshot"
    run.changes.append(
        TableChange("recover_table", database, table, database, table, schema, ("recover_table",), True, False, note)
    )


_STATEMENTS: list[tuple[tuple[str, ...], Callable[[_Cursor, str | None], _Statement]]] = [
    (("CREATE",), _parse_create),
    (("DROP",), _parse_drop),
    (("RENAME",), _parse_rename),
    (("TRUNCATE",), _parse_truncate),
    (("ALTER",), _parse_alter),
    (("RECOVER",), _parse_recover),
    (("FLASHBACK",), _parse_recover),
]


# ---- ALTER TABLE clauses -----------------------------------------------------------------------------

_INDEX_WORDS = ("PRIMARY", "UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "CONSTRAINT")
_TABLE_OPTIONS = frozenset(
    (
        "ENGINE",
        "AUTO_INCREMENT",
        "AVG_ROW_LENGTH",
        "CHECKSUM",
        "TABLE_CHECKSUM",
        "COMMENT",
        "COMPRESSION",
        "CONNECTION",
        "DELAY_KEY_WRITE",
        "ENCRYPTION",
        "INSERT_METHOD",
        "KEY_BLOCK_SIZE",
        "MAX_ROWS",
        "MIN_ROWS",
        "PACK_KEYS",
        "PASSWORD",
        "ROW_FORMAT",
        "STATS_AUTO_RECALC",
        "STATS_PERSISTENT",
        "STATS_SAMPLE_PAGES",
        "TABLESPACE",
        "UNION",
        "SECONDARY_ENGINE",
        "ENGINE_ATTRIBUTE",
        "SECONDARY_ENGINE_ATTRIBUTE",
        "AUTOEXTEND_SIZE",
        "AUTO_ID_CACHE",
        "AUTO_RANDOM_BASE",
        "SHARD_ROW_ID_BITS",
        "PRE_SPLIT_REGIONS",
        "TTL_ENABLE",
        "TTL_JOB_INTERVAL",
        "ATTRIBUTES",
        "STATS_BUCKETS",
        "STATS_TOPN",
        "STATS_COL_CHOICE",
        "STATS_COL_LIST",
        "STATS_SAMPLE_RATE",
        "STORAGE",
        "COLLATE",
    )
)
# partition maintenance: (words, ddl_type, why it needs a snapshot)
_PARTITION_CLAUSES = [
    (("ADD", "PARTITION"), "add_partition", ""),
    (("LAST", "PARTITION"), "add_partition", ""),
    (("DROP", "PARTITION"), "drop_partition", "rows of dropped partitions are deleted"),
    (("FIRST", "PARTITION"), "drop_partition", "rows of dropped partitions are deleted"),
    (("TRUNCATE", "PARTITION"), "truncate_partition", "rows of truncated partitions are deleted"),
    (("EXCHANGE", "PARTITION"), "exchange_partition", "rows swapped with another table"),
    (("REORGANIZE", "PARTITION"), "reorganize_partition", "partitions reorganized"),
    (("COALESCE", "PARTITION"), "reorganize_partition", "partitions coalesced"),
    (("PARTITION", "BY"), "reorganize_partition", "table repartitioned"),
    (("REMOVE", "PARTITIONING"), "reorganize_partition", "partitioning removed"),
]
_PARTITION_UPKEEP = ("ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR", "DISCARD", "IMPORT")


def _alter_clause(cur: _Cursor, database: str | None) -> list[_Clause]:
    """One clause of ALTER TABLE (ADD (a, b) gives one clause per column); [] for ALGORITHM/LOCK."""
    for words, kind, snapshot in _PARTITION_CLAUSES:
        if cur.accept(*words):
            return [_partition_clause(cur, kind, snapshot, database)]
    if any(cur.at(w, "PARTITION") for w in _PARTITION_UPKEEP) or cur.at("PARTITION"):
        _skip_rest(cur)
        return [_Clause("alter_table")]
    if cur.accept("ADD"):
        return _add_clause(cur)
    if cur.accept("DROP"):
        return [_drop_clause(cur)]
    if cur.accept("MODIFY"):
        cur.accept("COLUMN")
        if_exists = cur.accept("IF", "EXISTS")
        spec = _column_spec(cur)
        return [_Clause("modify_column", lambda t: t.modify_column(spec.name, spec, if_exists))]
    if cur.accept("CHANGE"):
        cur.accept("COLUMN")
        if_exists = cur.accept("IF", "EXISTS")
        old = cur.name()
        spec = _column_spec(cur)
        kind = "modify_column" if _same_name(old, spec.name) else "rename_column"
        return [_Clause(kind, lambda t: t.modify_column(old, spec, if_exists))]
    if cur.accept("ALTER"):
        return [_alter_alter_clause(cur)]
    if cur.accept("RENAME"):
        return [_rename_clause(cur, database)]
    if cur.accept("CONVERT", "TO") or cur.accept("CONVERT"):
        charset = _accept_charset(cur)
        if charset is None:
            raise _NotUnderstood(f"CONVERT TO {cur.where()}")
        if cur.accept("COLLATE"):
            cur.value()
        if charset == "binary":
            why = "text converted to binary: values change form"
            return [_Clause("modify_column", lambda t: t.convert_to_binary(), why)]
        return [_Clause("alter_table")]
    if cur.accept("ALGORITHM") or cur.accept("LOCK"):
        cur.value()
        return []
    if cur.accept("SET", "TIFLASH", "REPLICA"):
        cur.next()
        if cur.accept("LOCATION", "LABELS"):
            cur.next()
            while cur.accept_punct(","):
                cur.next()
        return [_Clause("alter_table")]
    if any(cur.accept(*w) for w in (("ORDER", "BY"), ("ENABLE", "KEYS"), ("DISABLE", "KEYS"), ("REMOVE", "TTL"))):
        while cur.peek() is not None and not cur.at_punct(",") and cur.word() not in _TABLE_OPTIONS:
            cur.next()
        return [_Clause("alter_table")]
    if any(cur.accept(*w) for w in (("FORCE",), ("CACHE",), ("NOCACHE",), ("WITH", "VALIDATION"))):
        return [_Clause("alter_table")]
    if cur.accept("WITHOUT", "VALIDATION") or cur.accept("DISCARD", "TABLESPACE") or cur.accept("IMPORT", "TABLESPACE"):
        return [_Clause("alter_table")]
    return [_table_option(cur)]


def _table_option(cur: _Cursor) -> _Clause:
    """`[DEFAULT] name [=] value`: table options change neither columns nor rows."""
    cur.accept("DEFAULT")
    if _accept_charset(cur) is not None:
        return _Clause("alter_table")
    if cur.accept("PLACEMENT", "POLICY") or cur.accept("DATA", "DIRECTORY") or cur.accept("INDEX", "DIRECTORY"):
        cur.value()
        return _Clause("alter_table")
    if cur.accept("TTL"):  # TTL = column + INTERVAL n unit
        cur.accept_punct("=")
        cur.name()
        if not cur.accept_punct("+"):
            raise _NotUnderstood(f"TTL {cur.where()}")
        cur.expect("INTERVAL")
        _literal(cur)
        cur.next()
        return _Clause("alter_table")
    if cur.word() in _TABLE_OPTIONS:
        cur.next()
        cur.value()
        return _Clause("alter_table")
    raise _NotUnderstood(f"unknown ALTER TABLE clause {cur.where()}")


def _partition_clause(cur: _Cursor, kind: str, snapshot: str, database: str | None) -> _Clause:
    """Partition maintenance changes no columns; it cannot share an ALTER with other clauses."""
    exchanged = None
    if kind == "exchange_partition":
        cur.name()
        cur.expect("WITH", "TABLE")
        exchanged = cur.table_name(database)
    _skip_rest(cur)
    return _Clause(kind, None, snapshot, exchanged)


def _add_clause(cur: _Cursor) -> list[_Clause]:
    if cur.at("CONSTRAINT") or cur.word() in _INDEX_WORDS:
        cur.accept("CONSTRAINT")
        if cur.word() not in _INDEX_WORDS:
            cur.name()
        if cur.accept("PRIMARY", "KEY"):
            cur.optional_name()
            columns = _index_columns(cur)
            cur.skip_element()
            return [_Clause("create_index", lambda t: t.add_primary_key(columns))]
        if cur.accept("UNIQUE"):
            cur.accept("KEY") or cur.accept("INDEX")
            cur.accept("IF", "NOT", "EXISTS")
            cur.optional_name()
            columns = _index_columns(cur)
            cur.skip_element()
            return [_Clause("create_index", lambda t: t.add_unique(columns))]
        kind = "alter_table" if cur.at("FOREIGN") or cur.at("CHECK") else "create_index"
        cur.skip_element()
        return [_Clause(kind)]
    cur.accept("COLUMN")
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    if cur.at_punct("("):
        inner = cur.group()
        specs = [_column_spec(inner)]
        while inner.accept_punct(","):
            specs.append(_column_spec(inner))
        if not inner.at_end():
            raise _NotUnderstood(f"unexpected {inner.where()} in ADD COLUMN (…)")
    else:
        specs = [_column_spec(cur)]
    return [_Clause("add_column", lambda t, s=s: t.add_column(s, if_not_exists)) for s in specs]


def _drop_index_clause(index: str) -> _Clause:
    if index.upper() == "PRIMARY":
        return _Clause("drop_index", lambda t: t.drop_primary_key())
    return _Clause("drop_index")


def _drop_clause(cur: _Cursor) -> _Clause:
    if cur.accept("PRIMARY", "KEY"):
        return _Clause("drop_index", lambda t: t.drop_primary_key())
    if cur.accept("INDEX") or cur.accept("KEY"):
        cur.accept("IF", "EXISTS")
        return _drop_index_clause(cur.name())
    if cur.accept("FOREIGN", "KEY") or cur.accept("CHECK") or cur.accept("CONSTRAINT"):
        cur.accept("IF", "EXISTS")
        cur.name()
        return _Clause("alter_table")
    cur.accept("COLUMN")
    if_exists = cur.accept("IF", "EXISTS")
    name = cur.name()
    cur.accept("RESTRICT") or cur.accept("CASCADE")
    return _Clause("drop_column", lambda t: t.drop_column(name, if_exists))


def _alter_alter_clause(cur: _Cursor) -> _Clause:
    if cur.accept("INDEX") or cur.accept("CHECK") or cur.accept("CONSTRAINT"):
        cur.name()
        cur.skip_element()
        return _Clause("alter_table")
    cur.accept("COLUMN")
    name = cur.name()
    if cur.accept("SET", "DEFAULT"):
        lit = _literal(cur)
        return _Clause("modify_column", lambda t: t.set_default(name, lit))
    if cur.accept("DROP", "DEFAULT"):
        return _Clause("modify_column", lambda t: t.set_default(name, None))
    if cur.accept("SET", "VISIBLE") or cur.accept("SET", "INVISIBLE"):
        return _Clause("alter_table")
    raise _NotUnderstood(f"ALTER COLUMN {name} {cur.where()}")


def _rename_clause(cur: _Cursor, database: str | None) -> _Clause:
    if cur.accept("COLUMN"):
        old = cur.name()
        cur.expect("TO")
        new = cur.name()
        return _Clause("rename_column", lambda t: t.rename_column(old, new))
    if cur.accept("INDEX") or cur.accept("KEY"):
        cur.name()
        cur.expect("TO")
        cur.name()
        return _Clause("alter_table")
    cur.accept("TO") or cur.accept("AS")
    new_name = cur.table_name(database)  # an unqualified new name is in the default database, as in RENAME TABLE
    return _Clause("rename_table", lambda t: t.rename_table(*new_name))


# ---- protocol schemas --------------------------------------------------------------------------------

_COLUMN_KEYS = ("id", "name", "type", "nullable", "elements", "default", "origin_default")


def _schema_from_protocol(
    protocol: Schema, previous: Schema | None, database: str | None, table: str, commit_ts: int
) -> Schema:
    """The protocol's schema, keeping the ids and defaults of same-named previous columns (new names: new ids)."""
    old_columns = {c["name"].casefold(): c for c in previous["columns"]} if previous else {}
    next_id = previous["next_column_id"] if previous else 1
    columns = []
    for c in protocol["columns"]:
        old = old_columns.get(c["name"].casefold())
        if old is None:
            old, next_id = {"id": next_id, "default": None, "origin_default": None}, next_id + 1
        entry = {**old, "name": c["name"], "type": c["type"], "nullable": c["nullable"], "elements": c.get("elements")}
        columns.append({k: entry[k] for k in _COLUMN_KEYS if k != "elements" or entry[k] is not None})
    uid = previous["table_uid"] if previous else _table_uid(database, table, commit_ts)
    key_columns = list(protocol.get("key_columns") or [])
    return _schema(
        protocol.get("database") or database, protocol.get("table") or table, uid, columns, key_columns, next_id
    )
