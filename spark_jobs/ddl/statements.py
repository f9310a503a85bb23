"""One statement read and applied: CREATE, DROP, RENAME, TRUNCATE, ALTER, RECOVER over the schemas in force."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from spark_jobs.ddl.alter import _INDEX_WORDS, _alter_clause, _drop_index_clause
from spark_jobs.ddl.columns import _column_spec, _ColumnSpec
from spark_jobs.ddl.model import Schema, TableChange, _NotUnderstood
from spark_jobs.ddl.protocol import _schema_from_protocol, _stored_column
from spark_jobs.ddl.schema import _column, _same_name, _schema, _table_uid
from spark_jobs.ddl.table import _Clause, _Table
from spark_jobs.ddl.tokens import _Cursor, _index_columns, _skip_rest, _without_comments


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
        schemas: Mapping[tuple[str | None, str], Schema],
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

    def find(self, database: str | None, table: str | None) -> tuple[tuple[str | None, str], Schema] | None:
        """Exact names first, then case-insensitively (TiDB compares table names so, lower_case_table_names=2)."""
        if table is None:
            return None
        if (database, table) in self.schemas:
            return (database, table), self.schemas[(database, table)]
        for key, schema in self.schemas.items():
            # a table created without a database in scope is known as (None, table): only a name without one finds it
            same_database = database is None or (key[0] is not None and _same_name(key[0], database))
            if same_database and _same_name(key[1], table):
                return key, schema
        return None

    def put(
        self, old_key: tuple[str | None, str] | None, schema: Schema | None, new_key: tuple[str | None, str] | None
    ) -> None:
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
        protocol = self.protocol_schema_for(names[1])
        if protocol is not None and names[1] is not None:
            schema = _schema_from_protocol(protocol, previous, names[0], names[1], self.commit_ts)
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

    def protocol_schema_for(self, table: str | None) -> Schema | None:
        """The schema the protocol carries, where it is this table's; else None."""
        if self.protocol_schema is None or table is None or self.protocol_table is None:
            return None
        return self.protocol_schema if _same_name(table, self.protocol_table) else None

    def with_protocol_types(self, change: TableChange) -> TableChange:
        """Column types, nullability and labels from the protocol's schema, by column name."""
        protocol = self.protocol_schema_for(change.table)
        if not change.understood or change.schema_after is None or protocol is None:
            return change
        by_name = {c["name"].casefold(): c for c in protocol["columns"]}
        columns, statement_only = [], []
        for c in change.schema_after["columns"]:
            p = by_name.pop(c["name"].casefold(), None)
            if p is None:
                statement_only.append(c["name"])
            else:
                elements = p.get("elements") if p.get("elements") is not None else c.get("elements")
                c = _stored_column({**c, "type": p["type"], "nullable": p["nullable"], "elements": elements})
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
    specs: list[_ColumnSpec] = []
    primary: list[str | None] = []
    uniques: list[list[str | None]] = []
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


def _key_of(specs: list[_ColumnSpec], primary: list[str | None], uniques: list[list[str | None]]) -> list[str]:
    """TiCDC's handle key: the primary key, else the unique NOT NULL index with fewest columns (first wins)."""
    inline = [s.name for s in specs if s.primary]
    if primary or inline:
        return [p for p in (primary or inline) if p]
    not_null = {s.name.casefold() for s in specs if s.nullable is False and s.generated != "VIRTUAL"}
    candidates = uniques + [[s.name] for s in specs if s.unique]
    eligible = [
        [n for n in u if n is not None]
        for u in candidates
        if u and all(n is not None and n.casefold() in not_null for n in u)
    ]
    return min(eligible, key=len) if eligible else []


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


def _database_change(run: _Run, ddl_type: str, name: str | None) -> None:
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
        clause = _Clause("rename_table", _renaming_to(new))
        run.table_change("rename_table", old, [clause])
        last = run.changes[-1]
        if not last.understood:  # say what the table is called now, even without its schema
            run.changes[-1] = TableChange("rename_table", *new, *old, None, ("rename_table",), False, False, last.note)


def _renaming_to(new: tuple[str | None, str]) -> Callable[[_Table], None]:
    """One pair's clause of `RENAME TABLE a TO b, c TO d` (a lambda in the loop would see only the last pair)."""
    return lambda t: t.rename_table(*new)


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
    protocol = run.protocol_schema_for(table)
    if protocol is not None and table is not None:
        schema = _schema_from_protocol(protocol, None, database, table, run.commit_ts)
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
