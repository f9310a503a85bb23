"""Randomized upstream workloads: what a TiDB cluster could send through TiCDC, drawn from a seed.

`random_workload(seed)` draws tables over every column type the codecs know (some existing before the
changefeed), row changes (inserts, updates that may change the key, deletes, re-inserts of deleted keys)
in transactions with real TSO commit timestamps, every kind of DDL, and resolved timestamps. The same
seed always gives the same workload. `oracle.upstream_state` tells what the upstream database holds.

`protocol=` keeps out what that protocol cannot carry faithfully; `PROTOCOL_LIMITS` is the whole list.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from spark_jobs.canonical.values import (
    INTEGER_TYPES,
    decimal_scale,
    enum_elements,
    fsp_of,
    int_bits,
    parse_type,
    text_date,
    text_decimal,
    to_float32,
)
from ticdc_devkit.simulator.avro import sanitize_name
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, Event, RowChange, Table, Watermark, key_changed
from ticdc_devkit.simulator.oracle import fill_value, zero_value

# protocol -> {what the generator avoids: why}. A DDL type name means that DDL is never drawn; the other
# entries are named below where the generator reads them.
PROTOCOL_LIMITS: dict[str, dict[str, str]] = {
    "canal-json": {
        "preexisting_decimal": "rows carry the bare mysqlType `decimal`: precision and scale come only with a CREATE/ALTER",
        "preexisting_enum_set": "rows carry ENUM/SET as index/bitmask: the labels come only with a CREATE/ALTER",
        "ddl_before_first_row": "DDL is SQL only: a preexisting table's schema shows only in its rows",
    },
    "open": {
        "time_fraction": "TiCDC writes TIME with fsp 0 in the Open Protocol: the fraction is cut off",
        "preexisting_decimal": "rows carry type code 246 only: precision and scale come only with a CREATE/ALTER",
        "preexisting_enum_set": "rows carry ENUM/SET as index/bitmask: the labels come only with a CREATE/ALTER",
        "ddl_before_first_row": "DDL is SQL only: a preexisting table's schema shows only in its rows",
    },
    "debezium": {
        "wide_decimal": "DECIMAL travels as a double: more than 15 significant digits do not come back",
        "preexisting_decimal": "rows give DECIMAL as a double without its scale: the scale comes only with DDL",
        "preexisting_time": "rows give TIME as µs without its fsp: the fsp comes only with DDL",
    },
    "avro": {
        "rename_column": "no DDL is sent: a rename looks like drop + add in the writer schema",
        "rename_table": "no DDL is sent: the old table would stay",
        "truncate_table": "no DDL is sent: the rows would stay",
        "drop_table": "no DDL is sent: the table would stay",
        "drop_database": "no DDL is sent: the tables would stay",
        "add_column_filled": "no DDL is sent: the value a DEFAULT or NOT NULL gives existing rows is not seen",
        "silent_schema_change": "the writer schema is the only sign of a DDL: a row of the table follows each one",
        "ddl_before_first_row": "the writer schema is the only sign of a table: a preexisting table gets a row first",
        "colliding_names": "names pass through Avro's name rule: two names must not become the same",
        "quoted_labels": "ENUM/SET labels with a quote or backslash are escaped irreversibly in `allowed`",
    },
    "simple-json": {},
    "simple-avro": {},
}

_BASE_MS = 1_763_800_000_000  # 2025-11-22T08:26:40Z

_PLAIN_DATABASES = ["shop", "crm", "billing", "ops", "audit"]
_PLAIN_TABLES = ["customers", "orders", "products", "invoices", "events", "users", "items", "ledger", "stock", "notes"]
_PLAIN_COLUMNS = ["name", "price", "qty", "note", "status", "created_at", "amount", "flag", "code", "data", "score"]
# quotes, backticks, spaces, dots, `__`, Jinja braces, unicode, reserved words, case-only differences
_HOSTILE_DATABASES = ["Shop", "we`ird db", "it's", "a.b", "shop__eu", "{{ db }}", "データ", "select", 'sh"op']
_HOSTILE_TABLES = ["Orders", "orders", "order items", "t`bl", "o'neil", "a.b", "x__y", "{{ table }}", "注文", "group"]
_HOSTILE_TABLES += ["Ünïcode", "x0knug64a", "desc", "1st"]
_HOSTILE_COLUMNS = ["Name", "first name", "c`ol", "it's", "a.b", "x__y", "{{ col }}", "值", "order", "key"]
_HOSTILE_COLUMNS += ["ÉCOLE", "from", "1col", 'dq"col', "Table"]

_LABELS = ["new", "paid", "shipped", "Ünï", "名前", "it's", "a b", "back\\slash", "x-y", "😀", "Z"]
_TEXTS = ["", "Ünïcode 名前 😀", 'it\'s "quoted" \\ back', "tab\tnew\nline", "<a href='x'>&amp;</a>", "\u2028\u2029"]
_KEY_TEXTS = ["", "ключ", "a'b", "x y", "😀", "A", "a", "k`1"]
_DIGITS = ["0", "007", "-42", "2147483647", "-2147483648"]

_UNINDEXABLE = ("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob", "json")
_TS_MIN, _TS_MAX = dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999999)
_DT_MIN, _DT_MAX = dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
_TIME_MAX_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999


@dataclass(frozen=True)
class Workload:
    """A logical stream in commit order and what the test needs beside it."""

    seed: int
    protocol: str | None
    events: list[Event]
    preexisting: list[Table]  # existed, empty, before the stream: no CREATE in it (Simple: a Bootstrap first)
    avoided: dict[str, str] = field(default_factory=dict)  # PROTOCOL_LIMITS of `protocol`

    @property
    def consistent_ts(self) -> int:
        """The last resolved ts: every change of the workload is at or below it."""
        return max(e.ts for e in self.events if isinstance(e, Watermark))


def random_workload(
    seed: int,
    *,
    tables: int = 3,
    changes: int = 120,
    ddl: bool = True,
    preexisting: int = 1,
    protocol: str | None = None,
    hostile_names: bool = False,
    tick_ms: tuple[int, int] = (1, 40),
    key_change: bool = False,
) -> Workload:
    """`changes` row changes over `tables` tables at the start (`preexisting` of them from before the stream),
    with DDL between them when `ddl`, and a resolved ts last. Transactions are `tick_ms` apart (a random number
    of milliseconds in that range, most of the time), so a wide range spreads the stream over days. `key_change`:
    the stream holds at least one update that changes a row's key (one more change at its end where the draws gave
    none; a stream that has one is the same either way)."""
    if protocol is not None and protocol not in PROTOCOL_LIMITS:
        raise ValueError(f"unknown protocol {protocol!r}")
    avoided = PROTOCOL_LIMITS[protocol] if protocol else {}
    generator = _Generator(random.Random(seed), avoided, hostile_names, tick_ms)
    old = generator.start(tables, preexisting)
    generator.run(changes, ddl, key_change)
    return Workload(seed, protocol, generator.events, old, dict(avoided))


# ---- SQL text ------------------------------------------------------------------------------------


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_name(table: Table, qualified: bool = True) -> str:
    """`db`.`t`, or `t` as a statement run after `USE db` names it (TiCDC forwards the statement as run)."""
    return f"{quote_name(table.database)}.{quote_name(table.name)}" if qualified else quote_name(table.name)


def _quote_label(label: str) -> str:
    return "'" + label.replace("\\", "\\\\").replace("'", "''") + "'"


def sql_literal(column: Column, value: Any) -> str:
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, dt.date):
        return _quote_label(text_date(value))
    return _quote_label(value)


def column_sql(column: Column) -> str:
    text = f"{quote_name(column.name)} {column.type}"
    if not column.nullable:
        text += " NOT NULL"
    if column.default is not None:
        text += " DEFAULT " + sql_literal(column, column.default)
    return text


def create_table_sql(table: Table, qualified: bool = True) -> str:
    parts = [column_sql(c) for c in table.columns]
    if table.key:  # a table without one is replicated only with force-replicate
        parts.append("PRIMARY KEY (" + ", ".join(quote_name(k) for k in table.key) + ")")
    return f"CREATE TABLE {table_name(table, qualified)} (" + ", ".join(parts) + ")"


# ---- the generator ---------------------------------------------------------------------------------


@dataclass
class _Live:
    """A table as it is upstream now, with its rows as typed values."""

    table: Table
    rows: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    deleted: list[tuple] = field(default_factory=list)  # keys deleted, to insert again
    digits: list[str] = field(default_factory=list)  # character columns holding integers only
    dropped: list[str] = field(default_factory=list)  # column names dropped, to add again
    indexes: int = 0

    def key_of(self, row: dict[str, Any]) -> tuple:
        return tuple(row[k] for k in self.table.key)


class _Generator:
    def __init__(self, rng: random.Random, avoided: dict[str, str], hostile: bool, tick_ms: tuple[int, int]):
        self.rng = rng
        self.tick_ms = tick_ms
        self.avoid = avoided
        self.hostile = hostile
        self.events: list[Event] = []
        self.live: dict[tuple[str, str], _Live] = {}
        self.databases: list[str] = []
        self.recreate: list[tuple[str, str]] = []  # dropped tables to create again with another schema
        self.sanitized: dict[tuple[str, str], tuple[str, str]] = {}  # Avro: sanitized -> upstream name
        self.physical = _BASE_MS + rng.randint(0, 10**9)
        self.logical = 0
        self.next_table_id = 100
        self.touched: list[tuple] = []  # (database, table, key) changed in the current transaction
        self.ts = self.tick()

    # -- clock and names

    def tick(self) -> int:
        """A new commit ts, above every earlier one."""
        if self.rng.random() < 0.7:
            self.physical += self.rng.randint(*self.tick_ms)
            self.logical = self.rng.randint(0, 50)
        else:
            self.logical += self.rng.randint(1, 5)
        return (self.physical << 18) | self.logical

    def _name_free(self, name: str, taken: list[str]) -> bool:
        """Not equal to a taken name ignoring case (MySQL compares names so), nor Avro-equal where that matters."""
        if name.lower() in (t.lower() for t in taken):
            return False
        return "colliding_names" not in self.avoid or sanitize_name(name) not in map(sanitize_name, taken)

    def _pick_name(self, plain: list[str], hostile: list[str], taken: list[str]) -> str:
        pool = hostile if self.hostile and self.rng.random() < 0.7 else plain
        for name in self.rng.sample(pool, len(pool)):
            if self._name_free(name, taken):
                return name
        while True:
            name = f"{self.rng.choice(pool)}_{self.rng.randint(2, 999)}"
            if self._name_free(name, taken):
                return name

    def _column_name(self, columns: list[str]) -> str:
        return self._pick_name(_PLAIN_COLUMNS, _HOSTILE_COLUMNS, columns)

    def _database_name(self) -> str:
        return self._pick_name(_PLAIN_DATABASES, _HOSTILE_DATABASES, self.databases)

    def _table_name(self, database: str) -> str:
        taken = [n for d, n in self.live if d == database]
        if self.hostile and self.rng.random() < 0.5:
            # the name of a table in another database, differing only in case
            others = [n.swapcase() for d, n in self.live if d != database and n.swapcase() != n]
            others = [n for n in others if self._name_free(n, taken) and self._sanitized_free(database, n)]
            if others:
                return self.rng.choice(others)
        while True:
            name = self._pick_name(_PLAIN_TABLES, _HOSTILE_TABLES, taken)
            if self._sanitized_free(database, name):
                return name
            taken.append(name)

    def _sanitized_free(self, database: str, name: str) -> bool:
        if "colliding_names" not in self.avoid:
            return True
        owner = self.sanitized.get((sanitize_name(database), sanitize_name(name)))
        return owner is None or owner == (database, name)

    # -- types and values

    def _column_type(self, *, preexisting: bool = False) -> str:
        kinds = ["int", "decimal", "float", "double", "varchar", "char", "text", "binary", "varbinary", "blob"]
        kinds += ["date", "datetime", "timestamp", "time", "year", "enum", "set", "json", "bit"]
        weights = [6, 3, 1, 1, 4, 2, 2, 1, 1, 1, 1, 2, 2, 1, 1, 2, 1, 1, 1]
        if preexisting:
            avoided = {"decimal": "preexisting_decimal", "enum": "preexisting_enum_set", "set": "preexisting_enum_set"}
            avoided["time"] = "preexisting_time"
            weights = [0 if avoided.get(k) in self.avoid else w for k, w in zip(kinds, weights)]
        kind = self.rng.choices(kinds, weights)[0]
        rng = self.rng
        if kind == "int":
            return rng.choice(INTEGER_TYPES) + rng.choice(["", " unsigned"])
        if kind == "decimal":
            precision = rng.randint(1, 15 if "wide_decimal" in self.avoid else rng.choice([18, 38, 65]))
            return f"decimal({precision},{rng.randint(0, min(precision, 30))})"
        if kind in ("datetime", "timestamp", "time"):
            fsp = 0 if kind == "time" and "time_fraction" in self.avoid else rng.randint(0, 6)
            return f"{kind}({fsp})" if fsp or rng.random() < 0.5 else kind
        if kind in ("char", "binary"):
            return f"{kind}({rng.randint(1, 16)})"
        if kind in ("varchar", "varbinary"):
            return f"{kind}({rng.choice([8, 32, 255])})"
        if kind == "text":
            return rng.choice(["tinytext", "text", "mediumtext", "longtext"])
        if kind == "blob":
            return rng.choice(["tinyblob", "blob", "mediumblob", "longblob"])
        if kind == "bit":
            return f"bit({rng.randint(1, 64)})"
        if kind in ("enum", "set"):
            labels = [
                label
                for label in _LABELS
                if "quoted_labels" not in self.avoid or ("'" not in label and "\\" not in label)
            ]
            chosen = rng.sample(labels, rng.randint(1, 5))
            return f"{kind}(" + ",".join(_quote_label(label) for label in chosen) + ")"
        return kind

    def _value(self, column: Column, digits: bool = False) -> Any:
        """A typed model value for the column: often an edge value of its type."""
        rng = self.rng
        base, args, unsigned = parse_type(column.type)
        edge = rng.random() < 0.25
        if digits:
            return rng.choice(_DIGITS) if edge else str(rng.randint(0, 10**9))
        if base in INTEGER_TYPES:
            bits = int_bits(base)
            low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << bits - 1), (1 << bits - 1) - 1)
            return rng.choice([low, high, 0, 1]) if edge else rng.randint(max(low, -1000), min(high, 100_000))
        if base == "decimal":
            scale = decimal_scale(column.type) or 0
            precision = int(args.split(",")[0]) if args else 10
            limit = 10**precision - 1
            unscaled = rng.choice([limit, -limit, 0, 1]) if edge else rng.randint(-min(limit, 10**6), min(limit, 10**9))
            return Decimal(f"{unscaled}E-{scale}")  # exact: scaleb would round to the context's 28 digits
        if base == "float":
            edges = [0.0, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38, 1.5]
            return rng.choice(edges) if edge else to_float32(rng.uniform(-1e6, 1e6))
        if base == "double":
            edges = [0.0, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.1]
            return rng.choice(edges) if edge else rng.uniform(-1e9, 1e9)
        if base in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext"):
            size = int(args) if args else 40
            text = (
                rng.choice(_TEXTS)
                if edge
                else "".join(rng.choice("abcxyz ÄÖé名😀'\\") for _ in range(rng.randint(0, 12)))
            )
            text = text[: min(size, 40)]
            return text.rstrip(" ") if base == "char" else text
        if base == "binary":
            size = int(args or 1)
            return bytes(size) if edge else rng.randbytes(size)
        if base in ("varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
            return rng.choice([b"", b"\x00\xff", bytes(range(8))]) if edge else rng.randbytes(rng.randint(0, 16))
        if base == "date":
            return (
                rng.choice([dt.date(1000, 1, 1), dt.date(9999, 12, 31), dt.date(2024, 2, 29)])
                if edge
                else _between(rng, _DT_MIN, _DT_MAX).date()
            )
        if base in ("datetime", "timestamp"):
            low, high = (_TS_MIN, _TS_MAX) if base == "timestamp" else (_DT_MIN, _DT_MAX)
            value = rng.choice([low, high]) if edge else _between(rng, low, high)
            unit = 10 ** (6 - fsp_of(column.type))
            return value.replace(microsecond=value.microsecond - value.microsecond % unit)
        if base == "time":
            unit = 10 ** (6 - fsp_of(column.type))
            micros = rng.choice([_TIME_MAX_US, -_TIME_MAX_US, 0]) if edge else rng.randint(-_TIME_MAX_US, _TIME_MAX_US)
            return dt.timedelta(microseconds=int(micros / unit) * unit)
        if base == "year":
            return rng.choice([0, 1901, 2155]) if edge else rng.randint(1901, 2155)
        if base == "bit":
            return rng.choice([0, (1 << int(args or 1)) - 1]) if edge else rng.randint(0, (1 << int(args or 1)) - 1)
        if base == "enum":
            return rng.choice(enum_elements(column.type))
        if base == "set":
            labels = enum_elements(column.type)
            return tuple(rng.sample(labels, rng.randint(0, len(labels))))
        if base == "json":
            if edge:
                return rng.choice(["null", "{}", "[]", '"Ünï"', "0", '{"a": [1, 2.5, "x"], "b": null}'])
            return json.dumps(_json_document(rng), ensure_ascii=False, sort_keys=True)
        raise ValueError(f"no values for {column.type}")

    def _default(self, column: Column, digits: bool) -> Any:
        """A DEFAULT literal for the types that take one, else None (TiDB refuses one on BLOB, TEXT and JSON)."""
        base = column.base
        if digits:
            return str(self.rng.randint(0, 999))
        if base in INTEGER_TYPES:
            return self.rng.choice([0, 7, 42])
        if base == "decimal":
            precision = int(parse_type(column.type)[1].split(",")[0])
            return Decimal(f"{self.rng.randint(0, 10 ** min(precision, 2) - 1)}E-{decimal_scale(column.type)}")
        if base in ("char", "varchar"):
            return self.rng.choice(["", "n/a", "it's"])[: int(parse_type(column.type)[1])]
        if base == "enum":
            return self.rng.choice(enum_elements(column.type))
        if base == "date":
            return dt.date(2000, 1, 1)
        return None

    def _row(self, live: _Live, key: tuple) -> dict[str, Any]:
        row = dict(zip(live.table.key, key))
        for c in live.table.columns:
            if c.name not in row:
                row[c.name] = None if c.nullable and self.rng.random() < 0.15 else self._value(c, c.name in live.digits)
        return row

    def _key(self, live: _Live) -> tuple:
        """A key for a new row: one deleted before, or a fresh one."""
        if live.deleted and self.rng.random() < 0.3:
            key = live.deleted.pop(self.rng.randrange(len(live.deleted)))
            if key not in live.rows:
                return key
        parts = []
        for name in live.table.key:
            if live.table.column(name).base in INTEGER_TYPES:
                edge = self.rng.random() < 0.05
                parts.append(self.rng.choice([0, -1, 2147483647]) if edge else self.rng.randint(1, 5000))
            elif self.rng.random() < 0.1:
                parts.append(self.rng.choice(_KEY_TEXTS))
            else:
                parts.append(f"k{self.rng.randint(1, 5000)}")
        return tuple(parts)

    # -- events

    def commit(self, event: Event) -> None:
        self.events.append(event)

    def new_transaction(self) -> None:
        self.ts = self.tick()
        self.touched = []

    def start(self, tables: int, preexisting: int) -> list[Table]:
        """The preexisting tables (announced by a Simple bootstrap) and CREATE TABLE for the others."""
        main = self._database_name()
        self.databases.append(main)
        old = []
        for _ in range(min(preexisting, tables)):
            live = self._new_table(main, preexisting=True, version=self.ts)
            self.live[(main, live.table.name)] = live
            old.append(live.table)
            self.commit(Bootstrap(live.table))
        for _ in range(tables - len(old)):
            self.new_transaction()
            self.follow(self.create_table())
        if "ddl_before_first_row" in self.avoid:
            for table in old:
                self.new_transaction()
                self.insert_surely(self.live[(table.database, table.name)])
        return old

    def run(self, changes: int, ddl: bool, key_change: bool = False) -> None:
        done = 0
        while done < changes:
            self.new_transaction()
            if ddl and self.rng.random() < 0.18:
                self.random_ddl()
            else:
                for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
                    done += self.random_change()
            if self.rng.random() < 0.1:
                self.commit(Watermark(self.tick()))
            if self.rng.random() < 0.03 and self.live:
                self.commit(Bootstrap(self.rng.choice(list(self.live.values())).table))
        if key_change and not any(isinstance(e, RowChange) and key_changed(e) for e in self.events):
            self.key_change_surely()
        self.commit(Watermark(self.tick()))

    def key_change_surely(self) -> None:
        """An update that changes a row's key, in a transaction of its own, drawing rows and keys until one fits."""
        keyed = [live for live in self.live.values() if live.rows and live.table.key]
        if not keyed:
            raise ValueError("no table with a key has a row whose key could change")
        self.new_transaction()
        while not self.update(self.rng.choice(keyed), key_change=True):
            pass

    def random_change(self) -> int:
        if not self.live:
            self.follow(self.create_table())
            self.new_transaction()
        live = self.rng.choice(list(self.live.values()))
        roll = self.rng.random()
        if not live.rows or roll < 0.45:
            return self.insert(live)
        if roll < 0.8:
            return self.update(live)
        return self.delete(live)

    def _fresh(self, live: _Live, key: tuple) -> bool:
        """Whether the current transaction left this key alone (one change per key and transaction)."""
        return (live.table.database, live.table.name, key) not in self.touched

    def _touch(self, live: _Live, *keys: tuple) -> None:
        self.touched.extend((live.table.database, live.table.name, k) for k in keys)

    def insert(self, live: _Live) -> int:
        key = self._key(live)
        if key in live.rows or not self._fresh(live, key):
            return 0
        row = live.rows[key] = self._row(live, key)
        self._touch(live, key)
        self.commit(RowChange(self.ts, "insert", live.table, after=dict(row)))
        return 1

    def insert_surely(self, live: _Live) -> None:
        """An insert into this table, drawing keys until one is free (in a transaction of its own)."""
        while not self.insert(live):
            pass

    def update(self, live: _Live, key_change: bool = False) -> int:
        """An update of a row (of its key too, one time in five, or when `key_change`); 0 where the draw does not
        fit (the row or the new key touched in this transaction, the new key taken)."""
        key = self.rng.choice(list(live.rows))
        if not self._fresh(live, key):
            return 0
        before = live.rows[key]
        after = dict(before)
        others = [c for c in live.table.columns if c.name not in live.table.key]
        for c in self.rng.sample(others, min(len(others), self.rng.randint(1, 3))):
            after[c.name] = None if c.nullable and self.rng.random() < 0.1 else self._value(c, c.name in live.digits)
        if key_change or self.rng.random() < 0.2 or not others:
            new_key = self._key(live)
            if new_key in live.rows or not self._fresh(live, new_key):
                return 0
            after.update(zip(live.table.key, new_key))
        if after == before:
            return 0
        new_key = live.key_of(after)
        del live.rows[key]
        live.rows[new_key] = after
        if new_key != key:
            live.deleted.append(key)
        self._touch(live, key, new_key)
        self.commit(RowChange(self.ts, "update", live.table, before=dict(before), after=dict(after)))
        return 1

    def delete(self, live: _Live) -> int:
        key = self.rng.choice(list(live.rows))
        if not self._fresh(live, key):
            return 0
        before = live.rows.pop(key)
        live.deleted.append(key)
        self._touch(live, key)
        self.commit(RowChange(self.ts, "delete", live.table, before=dict(before)))
        return 1

    # -- DDL

    def random_ddl(self) -> None:
        kinds = {
            "add_column": 14,
            "drop_column": 9,
            "modify_column": 9,
            "rename_column": 6,
            "change_column": 4,
            "multi_schema_change": 5,
            "create_table": (5 + 5 * bool(self.recreate)) if len(self.live) < 6 else 0,
            "drop_table": 4 if len(self.live) > 1 else 0,
            "rename_table": 4,
            "truncate_table": 4,
            "create_index": 4,
            "drop_database": 2,
        }
        if "rename_column" in self.avoid:
            kinds["change_column"] = 0
        choices = [k for k, w in kinds.items() if w and k not in self.avoid]
        kind = self.rng.choices(choices, [kinds[k] for k in choices])[0]
        if kind == "create_table" or not self.live:
            self.follow(self.create_table())
        elif kind == "drop_database":
            self.drop_database()
        else:
            self.follow(getattr(self, kind)(self.rng.choice(list(self.live.values()))))

    def _name(self, table: Table) -> str:
        return table_name(table, qualified=self.rng.random() < 0.75)

    def follow(self, ddl: Ddl | None) -> None:
        """Where the writer schema is the only sign of a DDL (Avro), a row of the table in its new shape."""
        if ddl is not None and ddl.table_after is not None and "silent_schema_change" in self.avoid:
            self.new_transaction()
            self.insert_surely(self.live[(ddl.table_after.database, ddl.table_after.name)])

    def _ddl(self, ddl_type: str, sql: str, before: Table | None, after: Table | None) -> Ddl:
        named = after or before
        event = Ddl(self.ts, named.database, named.name, sql, ddl_type, table_after=after, table_before=before)
        self.commit(event)
        return event

    def _new_table(self, database: str, *, preexisting: bool = False, version: int, name: str | None = None) -> _Live:
        name = name or self._table_name(database)
        self.sanitized[(sanitize_name(database), sanitize_name(name))] = (database, name)
        names: list[str] = []
        columns = []
        for i in range(self.rng.choice([1, 1, 1, 2])):
            key_type = self.rng.choice(["int", "bigint", "varchar(64)"] if i == 0 else ["int", "varchar(32)"])
            names.append(self._column_name(names))
            columns.append(Column(names[-1], key_type, nullable=False))
        key = tuple(names)
        digits = []
        for _ in range(self.rng.randint(1, 6)):
            names.append(self._column_name(names))
            column_type = self._column_type(preexisting=preexisting)
            if column_type.startswith("varchar") and self.rng.random() < 0.3:
                column_type = "varchar(32)"
                digits.append(names[-1])
            columns.append(Column(names[-1], column_type, nullable=self.rng.random() < 0.7))
        self.rng.shuffle(columns)
        self.next_table_id += 1
        table = Table(database, name, tuple(columns), key, self.next_table_id, version)
        return _Live(table, digits=digits)

    def create_table(self) -> Ddl:
        """A new table; often one dropped before, with another schema; CREATE DATABASE first where needed."""
        database = name = None
        if self.recreate and self.rng.random() < 0.7:
            database, name = self.recreate.pop(0)
            taken = [n for d, n in self.live if d == database]
            if not self._name_free(name, taken) or not self._sanitized_free(database, name):
                database = name = None
        if database is None:
            new = not self.databases or (len(self.databases) < 3 and self.rng.random() < 0.25)
            database = self._database_name() if new else self.rng.choice(self.databases)
        if database not in self.databases:
            self.commit(Ddl(self.ts, database, None, f"CREATE DATABASE {quote_name(database)}", "create_database"))
            self.databases.append(database)
            self.new_transaction()
        live = self._new_table(database, version=self.ts, name=name)
        self.live[(database, live.table.name)] = live
        return self._ddl("create_table", create_table_sql(live.table, self.rng.random() < 0.75), None, live.table)

    def drop_table(self, live: _Live) -> Ddl:
        table = live.table
        del self.live[(table.database, table.name)]
        self.recreate.append((table.database, table.name))
        return self._ddl("drop_table", f"DROP TABLE {self._name(table)}", table, None)

    def drop_database(self) -> Ddl:
        database = self.rng.choice(self.databases)
        for name in [n for n in self.live if n[0] == database]:
            del self.live[name]
        self.databases.remove(database)
        event = Ddl(self.ts, database, None, f"DROP DATABASE {quote_name(database)}", "drop_database")
        self.commit(event)
        return event

    def rename_table(self, live: _Live) -> Ddl:
        event = None
        for _ in range(2 if self.rng.random() < 0.4 else 1):  # a chain a -> b -> c
            table = live.table
            name = self._table_name(table.database)
            self.sanitized[(sanitize_name(table.database), sanitize_name(name))] = (table.database, name)
            del self.live[(table.database, table.name)]
            live.table = replace(table, name=name)
            self.live[(table.database, name)] = live
            qualified = self.rng.random() < 0.75
            sql = f"RENAME TABLE {table_name(table, qualified)} TO {table_name(live.table, qualified)}"
            if event is not None:
                self.new_transaction()
            event = self._ddl("rename_table", sql, table, live.table)
        return event

    def truncate_table(self, live: _Live) -> Ddl:
        before = live.table
        self.next_table_id += 1
        live.table = replace(before, table_id=self.next_table_id, schema_version=self.ts)
        live.deleted.extend(live.rows)
        live.rows.clear()
        return self._ddl("truncate_table", f"TRUNCATE TABLE {self._name(before)}", before, live.table)

    def create_index(self, live: _Live) -> Ddl:
        """An index on one column (TEXT, BLOB and JSON would need a prefix length: not those)."""
        column = self.rng.choice([c for c in live.table.columns if c.base not in _UNINDEXABLE])
        live.indexes += 1
        before = live.table
        live.table = replace(before, schema_version=self.ts)
        sql = f"CREATE INDEX {quote_name(f'idx_{live.indexes}')} ON {self._name(before)} ({quote_name(column.name)})"
        return self._ddl("create_index", sql, before, live.table)

    # column changes: each returns the ALTER clause and applies it to `live`

    def _add(self, live: _Live, position: bool) -> str:
        names = [c.name for c in live.table.columns]
        readd = [n for n in live.dropped if self._name_free(n, names)]
        name = self.rng.choice(readd) if readd and self.rng.random() < 0.5 else self._column_name(names)
        column_type = self._column_type()
        digits = column_type.startswith("varchar") and self.rng.random() < 0.4
        if digits:
            column_type = "varchar(32)"
        nullable = self.rng.random() < 0.5
        default = self._default(Column(name, column_type), digits) if self.rng.random() < 0.4 else None
        if "add_column_filled" in self.avoid:
            nullable, default = True, None
        column = Column(name, column_type, nullable, default)
        if not nullable and default is None:
            try:
                zero_value(column)
            except ValueError:  # TiDB's zero date: keep the column nullable
                column = replace(column, nullable=True)
            if digits:
                column = replace(column, default=self._default(column, True))
        where, columns = "", list(live.table.columns)
        roll = self.rng.random() if position else 1
        if roll < 0.2:
            where, index = " FIRST", 0
        elif roll < 0.4:
            after = self.rng.choice(columns)
            where, index = f" AFTER {quote_name(after.name)}", columns.index(after) + 1
        else:
            index = len(columns)
        columns.insert(index, column)
        live.table = replace(live.table, columns=tuple(columns))
        if digits:
            live.digits.append(name)
        for row in live.rows.values():
            row[name] = fill_value(column)
        return f"ADD COLUMN {column_sql(column)}{where}"

    def _droppable(self, live: _Live) -> list[Column]:
        return [c for c in live.table.columns if c.name not in live.table.key]

    def _drop(self, live: _Live, column: Column) -> str:
        live.table = replace(live.table, columns=tuple(c for c in live.table.columns if c.name != column.name))
        live.dropped.append(column.name)
        if column.name in live.digits:
            live.digits.remove(column.name)
        for row in live.rows.values():
            del row[column.name]
        return f"DROP COLUMN {quote_name(column.name)}"

    def _new_types(self, live: _Live, column: Column) -> tuple[list[str], list[str]]:
        """(widenings, real type changes) MODIFY can apply to the column without TiDB refusing a value."""
        base, args, unsigned = parse_type(column.type)
        widenings, changes = [], []
        if base in INTEGER_TYPES and base != "bigint":
            widenings.append("bigint" + (" unsigned" if unsigned else ""))
        if base == "varchar":
            widenings.append(f"varchar({int(args) + self.rng.choice([1, 64, 1000])})")
        if base == "decimal":
            precision, scale = int(args.split(",")[0]), decimal_scale(column.type)
            if precision + 2 <= (15 if "wide_decimal" in self.avoid else 65):
                widenings.append(f"decimal({precision + 2},{scale})")
                if scale < 30:
                    widenings.append(f"decimal({precision + 2},{scale + 1})")
        if base in INTEGER_TYPES:
            changes.append("varchar(32)")
        if column.name in live.digits:
            changes.append(self.rng.choice(["int", "bigint"]))
        return widenings, changes

    def _pick_retype(self, live: _Live, widen_only: bool) -> tuple[Column, str] | None:
        """A non-key column and its new type: a widening, or a real type change when there is one and may be."""
        widenings, changes = [], []
        for column in self._droppable(live):
            wide, real = self._new_types(live, column)
            widenings += [(column, t) for t in wide]
            changes += [(column, t) for t in real]
        pool = widenings if widen_only or not changes else changes
        return self.rng.choice(pool) if pool else None

    def _retype(self, live: _Live, column: Column, new_type: str, new_name: str) -> Column:
        """The column with its new name and type; its default and every row's value converted."""
        new = Column(new_name, new_type, column.nullable)
        new = replace(new, default=_converted(column.default, new))
        live.table = replace(
            live.table,
            columns=tuple(new if c.name == column.name else c for c in live.table.columns),
            key=tuple(new_name if k == column.name else k for k in live.table.key),
        )
        if column.name in live.digits:
            live.digits.remove(column.name)
            if new.base == "varchar":
                live.digits.append(new_name)
        elif column.base in INTEGER_TYPES and new.base == "varchar":
            live.digits.append(new_name)
        for row in live.rows.values():
            row[new_name] = _converted(row.pop(column.name), new)
        return new

    def _modify(self, live: _Live, widen_only: bool) -> str | None:
        picked = self._pick_retype(live, widen_only)
        if picked is None:
            return None
        column, new_type = picked
        return f"MODIFY COLUMN {column_sql(self._retype(live, column, new_type, column.name))}"

    def _alter(self, ddl_type: str, live: _Live, before: Table, clauses: list[str]) -> Ddl:
        live.table = replace(live.table, schema_version=self.ts)
        return self._ddl(ddl_type, f"ALTER TABLE {self._name(before)} " + ", ".join(clauses), before, live.table)

    def add_column(self, live: _Live) -> Ddl:
        before = live.table
        return self._alter("add_column", live, before, [self._add(live, position=True)])

    def drop_column(self, live: _Live) -> Ddl | None:
        before, droppable = live.table, self._droppable(live)
        if not droppable:
            return None
        return self._alter("drop_column", live, before, [self._drop(live, self.rng.choice(droppable))])

    def modify_column(self, live: _Live) -> Ddl | None:
        before = live.table
        clause = self._modify(live, widen_only=self.rng.random() < 0.5)
        return self._alter("modify_column", live, before, [clause]) if clause else None

    def rename_column(self, live: _Live) -> Ddl:
        before = live.table
        column = self.rng.choice(before.columns)
        new_name = self._column_name([c.name for c in before.columns] + live.dropped)
        self._retype(live, column, column.type, new_name)
        clause = f"RENAME COLUMN {quote_name(column.name)} TO {quote_name(new_name)}"
        return self._alter("rename_column", live, before, [clause])

    def change_column(self, live: _Live) -> Ddl | None:
        """CHANGE COLUMN: a new name and a new type at once (TiDB runs it as a modify-column job)."""
        before = live.table
        picked = self._pick_retype(live, widen_only=self.rng.random() < 0.5)
        if picked is None:
            return None
        column, new_type = picked
        new_name = self._column_name([c.name for c in before.columns] + live.dropped)
        new = self._retype(live, column, new_type, new_name)
        return self._alter(
            "rename_column", live, before, [f"CHANGE COLUMN {quote_name(column.name)} {column_sql(new)}"]
        )

    def multi_schema_change(self, live: _Live) -> Ddl | None:
        """One ALTER with two clauses on different columns (TiDB refuses two on the same column).

        Labelled as `ddl.classify` reads it: two clauses of one kind keep that kind (ADD + ADD is add_column).
        """
        before = live.table
        droppable = self._droppable(live)
        shapes = ["add+add"]
        if droppable:
            shapes += ["add+drop", "add+modify"]
        if len(droppable) > 1:
            shapes.append("drop+drop")
        shape = self.rng.choice(shapes)
        if shape == "drop+drop":
            clauses = [self._drop(live, c) for c in self.rng.sample(droppable, 2)]
        elif shape == "add+drop":  # the ADD cannot bring back the name dropped: that column is still there
            clauses = [self._add(live, position=False), self._drop(live, self.rng.choice(droppable))]
        elif shape == "add+modify":  # MODIFY first, so that it cannot pick the column being added
            modify = self._modify(live, widen_only=True)
            if modify is None:
                return None
            clauses = [self._add(live, position=False), modify]
        else:
            clauses = [self._add(live, position=False), self._add(live, position=False)]
        one_kind = {"add+add": "add_column", "drop+drop": "drop_column"}
        return self._alter(one_kind.get(shape, "multi_schema_change"), live, before, clauses)


def _converted(value: Any, new: Column) -> Any:
    """A typed value cast to the new column type (the conversions `_new_types` draws)."""
    if value is None:
        return None
    if new.base in INTEGER_TYPES:
        return int(value)
    if new.base == "decimal":
        return Decimal(text_decimal(Decimal(value), decimal_scale(new.type)))
    if new.base == "varchar" and isinstance(value, int):
        return str(value)
    return value


def _between(rng: random.Random, low: dt.datetime, high: dt.datetime) -> dt.datetime:
    span = int((high - low).total_seconds())
    return low + dt.timedelta(seconds=rng.randint(0, span), microseconds=rng.randint(0, 999_999))


def _json_document(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        return {
            rng.choice(["a", "b", "名", "k'", "x y"]): _json_document(rng, depth + 1) for _ in range(rng.randint(0, 3))
        }
    if depth < 2 and roll < 0.5:
        return [_json_document(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([None, True, False, rng.randint(-(2**53), 2**53), rng.random(), "Ünï", ""])
