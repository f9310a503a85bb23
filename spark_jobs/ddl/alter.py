"""The clauses of ALTER TABLE: columns, indexes, keys, options and partition maintenance."""

from __future__ import annotations

from collections.abc import Callable

from spark_jobs.ddl.columns import _accept_charset, _column_spec, _ColumnSpec
from spark_jobs.ddl.literals import _literal
from spark_jobs.ddl.model import _NotUnderstood
from spark_jobs.ddl.schema import _same_name
from spark_jobs.ddl.table import _Clause, _Table
from spark_jobs.ddl.tokens import _Cursor, _index_columns, _skip_rest

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
    return [_Clause("add_column", _adding(s, if_not_exists)) for s in specs]


def _adding(spec: _ColumnSpec, if_not_exists: bool) -> Callable[[_Table], None]:
    """One column's clause of `ADD (a, b)`: a lambda in the comprehension itself would see only the last spec."""
    return lambda t: t.add_column(spec, if_not_exists)


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
