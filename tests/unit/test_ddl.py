"""The DDL interpreter: ddl_type of every statement TiDB can send, and each table's schema after it."""

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.canonical.events import DDL_TYPES
from spark_jobs.canonical.values import canonical_type
from spark_jobs.ddl import classify, inferred_schema, interpret

TS = 1_704_067_200_123 << 18  # 2024-01-01 00:00:00.123 UTC
CREATE = (
    "CREATE TABLE `shop`.`orders` (`order_id` bigint NOT NULL, `status` enum('new','paid') NOT NULL, "
    "`price` decimal(10,2), `qty` int unsigned, PRIMARY KEY (`order_id`))"
)


def changes(sql, schemas=(), database="shop", table=None, ts=TS, **kwargs):
    known = {(s["database"], s["table"]): s for s in schemas}
    return interpret(sql, database=database, table=table, commit_ts=ts, schemas=known, **kwargs)


def change(sql, *schemas, **kwargs):
    found = changes(sql, schemas, **kwargs)
    assert len(found) == 1, found
    return found[0]


def after(sql, *schemas, **kwargs):
    c = change(sql, *schemas, **kwargs)
    assert c.understood, c.note
    return c.schema_after


def columns(schema):
    return [(c["name"], c["type"], c["nullable"]) for c in schema["columns"]]


def names(schema):
    return [c["name"] for c in schema["columns"]]


def column(schema, name):
    return next(c for c in schema["columns"] if c["name"] == name)


@pytest.fixture
def orders():
    return after(CREATE)


# ---- the cases of the former ddl_schema tests -------------------------------------------------------


def test_create_table(orders):
    assert columns(orders) == [
        ("order_id", "bigint", False),
        ("status", "enum", False),
        ("price", "decimal(10,2)", True),
        ("qty", "int unsigned", True),
    ]
    assert orders["key_columns"] == ["order_id"]
    assert orders["columns"][1]["elements"] == ["new", "paid"]


def test_alter_add_drop_modify_rename_change(orders):
    added = after("ALTER TABLE shop.orders ADD COLUMN note varchar(20) NOT NULL", orders)
    assert columns(added)[-1] == ("note", "varchar", False)
    assert names(after("ALTER TABLE shop.orders DROP COLUMN price", orders)) == ["order_id", "status", "qty"]
    assert columns(after("ALTER TABLE shop.orders MODIFY COLUMN qty bigint", orders))[-1] == ("qty", "bigint", True)
    renamed = after("ALTER TABLE shop.orders RENAME COLUMN qty TO quantity", orders)
    assert columns(renamed)[-1] == ("quantity", "int unsigned", True)
    changed = after("ALTER TABLE shop.orders CHANGE COLUMN order_id id bigint NOT NULL", orders)
    assert columns(changed)[0] == ("id", "bigint", False) and changed["key_columns"] == ["id"]


def test_drop_and_unparseable(orders):
    assert change("DROP TABLE shop.orders", orders).schema_after is None
    assert after("ALTER TABLE shop.orders ADD INDEX idx_status (status)", orders) == orders
    assert change("THIS IS NOT SQL ((", orders, table="orders").schema_after == orders


# ---- classify ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "ddl_type"),
    [
        ("CREATE TABLE t (a int)", "create_table"),
        ("CREATE TABLE IF NOT EXISTS t (a int)", "create_table"),
        ("CREATE TABLE t LIKE s", "create_table"),
        ("DROP TABLE IF EXISTS a, b", "drop_table"),
        ("RENAME TABLE a TO b, c TO d", "rename_table"),
        ("ALTER TABLE a RENAME TO b", "rename_table"),
        ("TRUNCATE t", "truncate_table"),
        ("ALTER TABLE t ADD COLUMN a INT, ADD COLUMN b INT", "add_column"),
        ("ALTER TABLE t ADD COLUMN a INT, DROP COLUMN b", "multi_schema_change"),
        ("ALTER TABLE t DROP b", "drop_column"),
        ("ALTER TABLE t MODIFY a bigint", "modify_column"),
        ("ALTER TABLE t CHANGE a a bigint", "modify_column"),
        ("ALTER TABLE t CHANGE COLUMN a b bigint", "rename_column"),
        ("ALTER TABLE t RENAME COLUMN a TO b", "rename_column"),
        ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 1", "modify_column"),
        ("ALTER TABLE t ALTER a DROP DEFAULT", "modify_column"),
        ("CREATE UNIQUE INDEX i ON t (a)", "create_index"),
        ("ALTER TABLE t ADD KEY i (a), ADD UNIQUE (b), ADD PRIMARY KEY (c)", "create_index"),
        ("DROP INDEX i ON t", "drop_index"),
        ("ALTER TABLE t DROP INDEX i, DROP PRIMARY KEY", "drop_index"),
        ("CREATE SCHEMA IF NOT EXISTS d", "create_database"),
        ("DROP DATABASE d", "drop_database"),
        ("ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (300))", "add_partition"),
        ("ALTER TABLE t DROP PARTITION p1, p2", "drop_partition"),
        ("ALTER TABLE t TRUNCATE PARTITION p1", "truncate_partition"),
        ("ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE t2", "exchange_partition"),
        ("ALTER TABLE t REORGANIZE PARTITION p1 INTO (PARTITION p1a VALUES LESS THAN (5))", "reorganize_partition"),
        ("ALTER TABLE t COALESCE PARTITION 2", "reorganize_partition"),
        ("ALTER TABLE t PARTITION BY HASH(a) PARTITIONS 4", "reorganize_partition"),
        ("ALTER TABLE t COMMENT = 'x', AUTO_INCREMENT = 100 ENGINE=InnoDB", "alter_table"),
        ("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4", "alter_table"),
        ("ALTER TABLE t SET TIFLASH REPLICA 1 LOCATION LABELS 'zone', 'rack'", "alter_table"),
        ("ALTER DATABASE d CHARACTER SET utf8mb4", "alter_table"),
        ("RECOVER TABLE t", "recover_table"),
        ("FLASHBACK TABLE t TO t2", "recover_table"),
        ("CREATE VIEW v AS SELECT 1", "other"),
        ("ALTER TABLE t FROBNICATE", "other"),
        ("", "other"),
        # the cases of the former per-codec classifiers (Canal-JSON, Open, Simple, Debezium); those said `other`
        # for a table option (TiDB: ActionModifyTableComment) and for mixed clauses (ActionMultiSchemaChange)
        ("CREATE TABLE `a`.`b` (id int)", "create_table"),
        ("DROP TABLE IF EXISTS b", "drop_table"),
        ("RENAME TABLE a TO b", "rename_table"),
        ("TRUNCATE TABLE b", "truncate_table"),
        ("ALTER TABLE `db`.`t` ADD COLUMN c int", "add_column"),
        ("alter table t add c int", "add_column"),
        ("ALTER TABLE t DROP COLUMN c", "drop_column"),
        ("ALTER TABLE t MODIFY COLUMN c bigint", "modify_column"),
        ("ALTER TABLE t CHANGE c c bigint", "modify_column"),
        ("ALTER TABLE t CHANGE COLUMN c d bigint", "rename_column"),
        ("ALTER TABLE t RENAME COLUMN c TO d", "rename_column"),
        ("ALTER TABLE t ADD INDEX i (c)", "create_index"),
        ("CREATE UNIQUE INDEX i ON t (c)", "create_index"),
        ("ALTER TABLE t DROP INDEX i", "drop_index"),
        ("CREATE DATABASE IF NOT EXISTS d", "create_database"),
        ("/* comment */ drop schema d", "drop_database"),
        ("ALTER TABLE t COMMENT = 'x'", "alter_table"),
        ("ALTER TABLE t ADD COLUMN c DECIMAL(10,4), ADD COLUMN d INT", "add_column"),
        ("ALTER TABLE db.t ADD c INT", "add_column"),
        ("ALTER TABLE t ADD COLUMN c INT, DROP COLUMN d", "multi_schema_change"),
        ("alter table `t` drop `c`", "drop_column"),
        ("ALTER TABLE t CHANGE COLUMN c c BIGINT", "modify_column"),
        ("ALTER TABLE t ALTER COLUMN c SET DEFAULT 1", "modify_column"),
        ("ALTER TABLE t ADD INDEX ix (c)", "create_index"),
        ("CREATE SCHEMA IF NOT EXISTS `s`", "create_database"),
        ("/* hint */ create database d", "create_database"),
        ("DROP SCHEMA d", "drop_database"),
        ("drop table if exists t", "drop_table"),
        ("ALTER TABLE d.t RENAME COLUMN a TO b", "rename_column"),
        ("ALTER TABLE `t` CHANGE `a` `b` int", "rename_column"),
        ("ALTER TABLE t MODIFY COLUMN a bigint", "modify_column"),
        ("ALTER TABLE t ADD COLUMN c int", "add_column"),
        ("ALTER TABLE t ADD c int", "add_column"),
        ("ALTER TABLE t ADD PRIMARY KEY (a)", "create_index"),
        ("ALTER TABLE t DROP KEY k", "drop_index"),
        ("ALTER TABLE t RENAME TO u", "rename_table"),
        ("ALTER TABLE t COMMENT 'x'", "alter_table"),
        ("GRANT ALL", "other"),
        ("create database if not exists d", "create_database"),
        ("ALTER TABLE t ADD COLUMN c INT", "add_column"),
        ("ALTER TABLE `t` ADD `c` INT, ADD d INT", "add_column"),
        ("ALTER TABLE t MODIFY c BIGINT", "modify_column"),
        ("ALTER TABLE t CHANGE c d INT", "rename_column"),
        ("ALTER TABLE t ADD c INT, DROP d", "multi_schema_change"),
        ("/* hint */ TRUNCATE TABLE t", "truncate_table"),
        ("ALTER TABLE t ADD c int, ADD d int", "add_column"),
        # several clauses, a RENAME TABLE across databases, partitioning removed, executable comments
        ("ALTER TABLE t ADD COLUMN (a INT, b INT)", "add_column"),
        ("ALTER TABLE t DROP a, DROP b", "drop_column"),
        ("ALTER TABLE t ADD c INT, ADD INDEX i (c)", "multi_schema_change"),
        ("ALTER TABLE t MODIFY a BIGINT, CHANGE b c INT", "multi_schema_change"),
        ("ALTER TABLE t ALGORITHM=INPLACE, ADD COLUMN c INT", "add_column"),
        ("RENAME TABLE `d1`.`a` TO `d2`.`a`", "rename_table"),
        ("ALTER TABLE t REMOVE PARTITIONING", "reorganize_partition"),
        ("/*!40101 ALTER TABLE t DROP COLUMN c */", "drop_column"),
        ("ALTER TABLE t COMMENT '/*T! DROP COLUMN id */'", "alter_table"),
    ],
)
def test_classify(sql, ddl_type):
    assert classify(sql) == ddl_type
    assert ddl_type in DDL_TYPES


def test_leading_and_executable_comments():
    sql = "/* lead */ -- line\n# hash\nALTER TABLE t ADD COLUMN c bigint /*T![auto_rand] AUTO_RANDOM(5) */ NOT NULL"
    assert classify(sql) == "add_column"
    create = "CREATE TABLE t (id bigint, PRIMARY KEY (id) /*T![clustered_index] NONCLUSTERED */) /*!50100 ENGINE=x */"
    assert after(create)["key_columns"] == ["id"]
    assert after("ALTER TABLE t COMMENT '/*T! DROP COLUMN id */'", after(create)) == after(create)


# ---- CREATE TABLE -----------------------------------------------------------------------------------


def test_create_table_column_definitions():
    s = after(
        "CREATE TABLE IF NOT EXISTS `a b`.`t.1` (`id` int unsigned NOT NULL AUTO_INCREMENT COMMENT 'the id', "
        "`neg` int DEFAULT -5, `q'u` varchar(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'it''s \\'x\\'', "
        "`bits` bit(8) NOT NULL DEFAULT b'101', `raw` varbinary(4) DEFAULT x'0aff', `pad` binary(3) DEFAULT 'a', "
        "`ts` datetime(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3), `select` int, `dot.t` int, "
        "`ünï` decimal(5,2) DEFAULT '1.005', `x``y` enum('a','b') DEFAULT 'B', `sp ace` set('x','y') DEFAULT 'y,x', "
        "`nul` int DEFAULT NULL, flag tinyint(1) DEFAULT TRUE, d date DEFAULT '2020-1-2', t time(2) DEFAULT '-1:02:03.456',"
        " PRIMARY KEY (`id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='x'"
    )
    assert (s["database"], s["table"]) == ("a b", "t.1")
    assert names(s) == ["id", "neg", "q'u", "bits", "raw", "pad", "ts", "select", "dot.t", "ünï", "x`y", "sp ace"] + [
        "nul",
        "flag",
        "d",
        "t",
    ]
    assert [c["id"] for c in s["columns"]] == list(range(1, 17)) and s["next_column_id"] == 17
    assert {c["name"]: c["default"] for c in s["columns"]} == {
        "id": None,
        "neg": "-5",
        "q'u": "it's 'x'",
        "bits": "5",
        "raw": base64.b64encode(b"\x0a\xff").decode(),
        "pad": base64.b64encode(b"a\0\0").decode(),
        "ts": "CURRENT_TIMESTAMP(3)",
        "select": None,
        "dot.t": None,
        "ünï": "1.01",
        "x`y": "b",
        "sp ace": "x,y",
        "nul": None,
        "flag": "1",
        "d": "2020-01-02",
        "t": "-01:02:03.46",
    }
    assert all(c["origin_default"] is None for c in s["columns"])
    assert column(s, "x`y")["elements"] == ["a", "b"]
    assert columns(s)[0] == ("id", "int unsigned", False)


def test_create_table_keys():
    inline = after("CREATE TABLE t (a int PRIMARY KEY, b int)")
    assert inline["key_columns"] == ["a"] and columns(inline)[0] == ("a", "int", False)
    constraint = after("CREATE TABLE t (a int, b int, CONSTRAINT pk PRIMARY KEY (b, a))")
    assert constraint["key_columns"] == ["b", "a"]
    unique = after("CREATE TABLE t (a int UNIQUE, b int NOT NULL, c int NOT NULL, UNIQUE KEY u (b, c), UNIQUE (c))")
    assert unique["key_columns"] == ["c"]  # TiCDC: the unique NOT NULL index with the fewest columns
    assert after("CREATE TABLE t (a int UNIQUE, b int)")["key_columns"] == []
    assert after("CREATE TABLE t (a int UNIQUE NOT NULL, b int)")["key_columns"] == ["a"]


def test_create_table_ids_and_uid_are_deterministic():
    first, again = after("CREATE TABLE t (a int)"), after("CREATE TABLE t (a int)")
    assert first == again
    assert after("CREATE TABLE t (a int)", ts=TS + 1)["table_uid"] != first["table_uid"]
    recreated = after("CREATE TABLE t (b int)", first, ts=TS + 1)
    assert recreated["table_uid"] != first["table_uid"] and recreated["columns"][0]["id"] == 1


def test_create_table_if_not_exists_and_like(orders):
    kept = change("CREATE TABLE IF NOT EXISTS shop.orders (x int)", orders)
    assert kept.schema_after == orders and kept.understood
    copy_of = after("CREATE TABLE shop.orders_copy LIKE orders", orders, ts=TS + 1)
    assert columns(copy_of) == columns(orders) and copy_of["key_columns"] == ["order_id"]
    assert copy_of["table_uid"] != orders["table_uid"] and copy_of["table"] == "orders_copy"
    unknown = change("CREATE TABLE t LIKE nowhere")
    assert unknown.ddl_type == "create_table" and not unknown.understood and unknown.schema_after is None


def test_create_table_as_tidb_shows_it_and_rarer_spellings():
    shown = after(
        "CREATE TABLE `t` (\n  `id` bigint(20) NOT NULL /*T![auto_rand] AUTO_RANDOM(5) */,\n"
        "  `v` varchar(10) COLLATE utf8mb4_bin DEFAULT NULL,\n  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T![auto_rand_base] AUTO_RANDOM_BASE=30001 */"
    )
    assert columns(shown) == [("id", "bigint", False), ("v", "varchar", True)] and shown["key_columns"] == ["id"]
    rare = after(
        "CREATE TABLE t (id serial, a national varchar(3), b float(30), c varchar(4) CHARACTER SET binary, "
        "d long varbinary, e double precision unsigned zerofill, f integer(11) zerofill, g bool, h numeric(5), "
        "p int REFERENCES parent (id) MATCH FULL ON DELETE SET NULL ON UPDATE CASCADE, "
        "FOREIGN KEY (p) REFERENCES parent (id), CHECK (p > 0))"
    )
    assert columns(rare) == [
        ("id", "bigint unsigned", False),
        ("a", "varchar", True),
        ("b", "double", True),
        ("c", "varbinary", True),
        ("d", "mediumblob", True),
        ("e", "double", True),
        ("f", "int unsigned", True),
        ("g", "tinyint", True),
        ("h", "decimal(5,0)", True),
        ("p", "int", True),
    ]
    assert rare["key_columns"] == ["id"]  # SERIAL is UNIQUE NOT NULL


@pytest.mark.parametrize(
    "sql",
    ["CREATE TABLE t2 SELECT * FROM t", "CREATE TABLE t2 (a int) AS SELECT 1", "ALTER TABLE t ADD x int; DROP TABLE t"],
)
def test_statements_not_understood(sql):
    c = change(sql)
    assert (c.ddl_type, c.understood, c.schema_after) == ("other", False, None) and c.note


def test_virtual_generated_columns_are_left_out():
    s = after("CREATE TABLE t (a int, b int AS (a + 1) VIRTUAL, c int GENERATED ALWAYS AS (a * 2) STORED)")
    assert names(s) == ["a", "c"]


# ---- DROP / RENAME / TRUNCATE ---------------------------------------------------------------------


def test_drop_tables(orders):
    other = after("CREATE TABLE shop.other (a int)")
    dropped = changes("DROP TABLE IF EXISTS orders, other, nowhere", [orders, other])
    assert [(c.ddl_type, c.table, c.schema_after) for c in dropped] == [
        ("drop_table", "orders", None),
        ("drop_table", "other", None),
        ("drop_table", "nowhere", None),
    ]


def test_rename_tables_keep_uid_and_ids(orders):
    other = after("CREATE TABLE shop.other (a int)")
    renamed = changes("RENAME TABLE orders TO archive.orders_2023, shop.other TO orders", [orders, other])
    assert [(c.database, c.table, c.old_database, c.old_table) for c in renamed] == [
        ("archive", "orders_2023", "shop", "orders"),
        ("shop", "orders", "shop", "other"),
    ]
    assert renamed[0].schema_after["table_uid"] == orders["table_uid"]
    assert renamed[0].schema_after["columns"] == orders["columns"]
    assert renamed[1].schema_after["table_uid"] == other["table_uid"]


def test_rename_swap_sees_earlier_renames(orders):
    other = after("CREATE TABLE shop.other (a int)")
    swapped = changes("RENAME TABLE orders TO tmp, other TO orders, tmp TO other", [orders, other])
    assert [c.schema_after["table_uid"] for c in swapped] == [
        orders["table_uid"],
        other["table_uid"],
        orders["table_uid"],
    ]
    assert (swapped[-1].table, names(swapped[-1].schema_after)) == ("other", names(orders))


@pytest.mark.parametrize("clause", ["RENAME TO archive", "RENAME archive", "RENAME AS archive"])
def test_alter_rename_table(orders, clause):
    c = change(f"ALTER TABLE orders {clause}", orders)
    assert (c.ddl_type, c.table, c.old_table) == ("rename_table", "archive", "orders")
    assert c.schema_after["table_uid"] == orders["table_uid"] and c.schema_after["table"] == "archive"


@pytest.mark.parametrize("sql", ["TRUNCATE TABLE orders", "TRUNCATE orders"])
def test_truncate_keeps_schema_and_uid(orders, sql):
    c = change(sql, orders)
    assert (c.ddl_type, c.schema_after, c.needs_snapshot) == ("truncate_table", orders, False)


def test_table_names_match_case_insensitively_and_keep_their_spelling(orders):
    c = change("ALTER TABLE SHOP.Orders ADD COLUMN x int", orders)
    assert (c.database, c.table) == ("shop", "orders")
    assert after("CREATE TABLE `MiXed`.`CaSe` (a int)")["table"] == "CaSe"


# ---- ALTER TABLE: columns ------------------------------------------------------------------------


def test_add_column_positions(orders):
    assert names(after("ALTER TABLE orders ADD note text FIRST", orders))[0] == "note"
    assert names(after("ALTER TABLE orders ADD COLUMN note text AFTER `STATUS`", orders)) == [
        "order_id",
        "status",
        "note",
        "price",
        "qty",
    ]
    listed = after("ALTER TABLE orders ADD COLUMN (a int, b varchar(3) NOT NULL DEFAULT 'x')", orders)
    assert columns(listed)[-2:] == [("a", "int", True), ("b", "varchar", False)]
    assert [c["id"] for c in listed["columns"]] == [1, 2, 3, 4, 5, 6] and listed["next_column_id"] == 7
    chained = after("ALTER TABLE orders ADD a int FIRST, ADD b int AFTER a", orders)
    assert names(chained)[:2] == ["a", "b"]


def test_add_existing_or_after_unknown_column_is_not_understood(orders):
    for sql in ("ALTER TABLE orders ADD COLUMN Price int", "ALTER TABLE orders ADD x int AFTER nowhere"):
        c = change(sql, orders)
        assert (c.ddl_type, c.understood, c.schema_after, c.needs_snapshot) == ("add_column", False, orders, True)
    assert after("ALTER TABLE orders ADD COLUMN IF NOT EXISTS price int", orders) == orders


def test_drop_column_and_readd_gets_a_new_id(orders):
    dropped = after("ALTER TABLE orders DROP price", orders)
    readded = after("ALTER TABLE orders ADD COLUMN price decimal(10,2)", dropped)
    assert column(readded, "price")["id"] == 5 != column(orders, "price")["id"]
    assert readded["next_column_id"] == 6
    assert after("ALTER TABLE orders DROP COLUMN IF EXISTS nowhere", orders) == orders
    assert not change("ALTER TABLE orders DROP COLUMN nowhere", orders).understood


def test_modify_column(orders):
    widened = after("ALTER TABLE orders MODIFY qty bigint unsigned NOT NULL DEFAULT 7", orders)
    assert columns(widened)[-1] == ("qty", "bigint unsigned", False)
    assert column(widened, "qty")["id"] == column(orders, "qty")["id"] and column(widened, "qty")["default"] == "7"
    retyped = after("ALTER TABLE orders MODIFY COLUMN price varchar(20) FIRST", orders)
    assert columns(retyped)[0] == ("price", "varchar", True)
    moved = after("ALTER TABLE orders MODIFY status enum('new','paid','sent') NOT NULL AFTER qty", orders)
    assert names(moved)[-1] == "status" and column(moved, "status")["elements"] == ["new", "paid", "sent"]
    respelled = after("ALTER TABLE orders MODIFY PRICE decimal(12,4)", orders)
    assert columns(respelled)[2] == ("PRICE", "decimal(12,4)", True)


def test_change_column(orders):
    renamed = after("ALTER TABLE orders CHANGE qty quantity bigint AFTER order_id", orders)
    assert names(renamed) == ["order_id", "quantity", "status", "price"]
    assert column(renamed, "quantity")["id"] == column(orders, "qty")["id"]
    same = change("ALTER TABLE orders CHANGE COLUMN qty qty int unsigned NOT NULL", orders)
    assert same.ddl_type == "modify_column" and columns(same.schema_after)[-1] == ("qty", "int unsigned", False)


def test_rename_column_keeps_id_and_key(orders):
    c = change("ALTER TABLE orders RENAME COLUMN ORDER_ID TO id", orders)
    assert c.ddl_type == "rename_column" and c.schema_after["key_columns"] == ["id"] and not c.needs_snapshot
    assert column(c.schema_after, "id")["id"] == 1


def test_set_and_drop_default(orders):
    with_default = after("ALTER TABLE orders ALTER COLUMN price SET DEFAULT 3.14159", orders)
    assert column(with_default, "price")["default"] == "3.14"
    assert column(with_default, "price")["origin_default"] is None
    assert column(after("ALTER TABLE orders ALTER price DROP DEFAULT", with_default), "price")["default"] is None
    labelled = after("ALTER TABLE orders ALTER status SET DEFAULT 'PAID'", orders)
    assert column(labelled, "status")["default"] == "paid"


# ---- ALTER TABLE: keys, options, partitions -------------------------------------------------------


def test_indexes_change_no_columns(orders):
    for sql in (
        "ALTER TABLE orders ADD INDEX idx (status)",
        "ALTER TABLE orders ADD KEY (qty, price(3))",
        "ALTER TABLE orders ADD UNIQUE KEY u (qty)",
        "ALTER TABLE orders DROP INDEX idx",
        "ALTER TABLE orders DROP KEY idx",
        "CREATE INDEX i ON orders (qty)",
        "DROP INDEX i ON shop.orders",
    ):
        c = change(sql, orders)
        assert (c.schema_after, c.needs_snapshot, c.understood) == (orders, False, True), sql


def test_key_changes_need_a_snapshot(orders):
    dropped = change("ALTER TABLE orders DROP PRIMARY KEY", orders)
    assert (dropped.ddl_type, dropped.schema_after["key_columns"], dropped.needs_snapshot) == ("drop_index", [], True)
    added = change("ALTER TABLE orders ADD PRIMARY KEY (qty, order_id)", dropped.schema_after)
    assert added.ddl_type == "create_index" and added.needs_snapshot
    assert added.schema_after["key_columns"] == ["qty", "order_id"] and columns(added.schema_after)[-1][2] is False
    keyless = after("CREATE TABLE shop.k (a int NOT NULL, b int)")
    unique = change("ALTER TABLE k ADD UNIQUE INDEX u (a)", keyless)
    assert unique.schema_after["key_columns"] == ["a"] and unique.needs_snapshot
    nullable = change("ALTER TABLE k ADD UNIQUE INDEX u (b)", keyless)
    assert nullable.schema_after["key_columns"] == [] and not nullable.needs_snapshot


def test_table_options_change_nothing(orders):
    for sql in (
        "ALTER TABLE orders COMMENT = 'x'",
        "ALTER TABLE orders AUTO_INCREMENT = 100, ENGINE=InnoDB",
        "ALTER TABLE orders DEFAULT CHARSET = utf8mb4 COLLATE utf8mb4_bin",
        "ALTER TABLE orders CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE orders SHARD_ROW_ID_BITS = 4 /*T! PRE_SPLIT_REGIONS=2 */",
        "ALTER TABLE orders PLACEMENT POLICY = p1",
        "ALTER TABLE orders ALGORITHM=INPLACE, LOCK=NONE, FORCE",
        "ALTER TABLE orders CACHE",
        "ALTER TABLE orders RENAME INDEX a TO b",
    ):
        c = change(sql, orders)
        assert (c.ddl_type, c.schema_after, c.needs_snapshot, c.understood) == ("alter_table", orders, False, True)


def test_convert_to_binary_needs_a_snapshot():
    s = after("CREATE TABLE shop.t (a varchar(3) DEFAULT 'x', b char(2), c text, d int DEFAULT 1)")
    c = change("ALTER TABLE t CONVERT TO CHARACTER SET binary", s)
    assert [t for _, t, _ in columns(c.schema_after)] == ["varbinary", "binary", "blob", "int"] and c.needs_snapshot
    assert [col["default"] for col in c.schema_after["columns"]] == ["eA==", None, None, "1"]


def test_key_from_an_added_column_needs_a_snapshot(orders):
    keyless = after("ALTER TABLE orders DROP PRIMARY KEY", orders)
    c = change("ALTER TABLE orders ADD COLUMN id bigint PRIMARY KEY FIRST", keyless)
    assert c.schema_after["key_columns"] == ["id"] and c.needs_snapshot and columns(c.schema_after)[0][2] is False


@pytest.mark.parametrize(
    ("sql", "ddl_type", "needs_snapshot"),
    [
        ("ALTER TABLE orders ADD PARTITION (PARTITION p3 VALUES LESS THAN (300))", "add_partition", False),
        ("ALTER TABLE orders DROP PARTITION p1, p2", "drop_partition", True),
        ("ALTER TABLE orders TRUNCATE PARTITION ALL", "truncate_partition", True),
        (
            "ALTER TABLE orders REORGANIZE PARTITION p1 INTO (PARTITION p1 VALUES LESS THAN (5))",
            "reorganize_partition",
            True,
        ),
        ("ALTER TABLE orders COALESCE PARTITION 2", "reorganize_partition", True),
        ("ALTER TABLE orders REMOVE PARTITIONING", "reorganize_partition", True),
        ("ALTER TABLE orders FIRST PARTITION LESS THAN (100)", "drop_partition", True),
        ("ALTER TABLE orders ANALYZE PARTITION p1", "alter_table", False),
    ],
)
def test_partition_maintenance(orders, sql, ddl_type, needs_snapshot):
    c = change(sql, orders)
    assert (c.ddl_type, c.schema_after, c.needs_snapshot) == (ddl_type, orders, needs_snapshot)


def test_exchange_partition_changes_both_tables(orders):
    other = after("CREATE TABLE shop.staging LIKE orders", orders)
    found = changes("ALTER TABLE orders EXCHANGE PARTITION p1 WITH TABLE staging WITHOUT VALIDATION", [orders, other])
    assert [(c.ddl_type, c.table, c.needs_snapshot) for c in found] == [
        ("exchange_partition", "orders", True),
        ("exchange_partition", "staging", True),
    ]


def test_multi_schema_change_applies_clause_by_clause(orders):
    c = change(
        "ALTER TABLE orders ADD COLUMN note text AFTER order_id, DROP COLUMN price, "
        "RENAME COLUMN qty TO quantity, MODIFY quantity bigint, ADD INDEX (note(10)), COMMENT 'x'",
        orders,
    )
    assert c.ddl_type == "multi_schema_change" and c.understood
    assert c.clauses == ("add_column", "drop_column", "rename_column", "modify_column", "create_index", "alter_table")
    assert columns(c.schema_after) == [
        ("order_id", "bigint", False),
        ("note", "text", True),
        ("status", "enum", False),
        ("quantity", "bigint", True),
    ]
    assert [col["id"] for col in c.schema_after["columns"]] == [1, 5, 2, 4]


# ---- origin defaults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "origin"),
    [
        ("int NOT NULL", "0"),
        ("bigint unsigned NOT NULL", "0"),
        ("decimal(10,3) NOT NULL", "0.000"),
        ("decimal NOT NULL", "0"),
        ("float NOT NULL", "0.0"),
        ("double NOT NULL", "0.0"),
        ("bit(4) NOT NULL", "0"),
        ("year NOT NULL", "0000"),
        ("varchar(10) NOT NULL", ""),
        ("text NOT NULL", ""),
        ("binary(3) NOT NULL", "AAAA"),
        ("varbinary(3) NOT NULL", ""),
        ("date NOT NULL", "0000-00-00"),
        ("datetime NOT NULL", "0000-00-00 00:00:00"),
        ("datetime(2) NOT NULL", "0000-00-00 00:00:00.00"),
        ("timestamp NOT NULL", "0000-00-00 00:00:00"),
        ("time(1) NOT NULL", "00:00:00.0"),
        ("enum('x','y') NOT NULL", "x"),
        ("set('x','y') NOT NULL", ""),
        ("json NOT NULL", "null"),
        ("int", None),
        ("int NULL DEFAULT NULL", None),
        ("int DEFAULT -3", "-3"),
        ("decimal(6,2) NOT NULL DEFAULT '-1.005'", "-1.01"),
        ("tinyint NOT NULL DEFAULT 2.5", "3"),
        ("varchar(5) DEFAULT 'a''b'", "a'b"),
        ("char(5) DEFAULT 'ab  '", "ab"),
        ("varbinary(5) DEFAULT x'00ff'", "AP8="),
        ("binary(4) DEFAULT _binary'ab'", base64.b64encode(b"ab\0\0").decode()),
        ("bit(8) DEFAULT b'1010'", "10"),
        ("enum('x','y') DEFAULT 'Y'", "y"),
        ("enum('x','y') NOT NULL DEFAULT 2", "y"),
        ("set('x','y','z') DEFAULT 'z,x'", "x,z"),
        ("date DEFAULT '2024-02-29'", "2024-02-29"),
        ("datetime(1) DEFAULT '2024-02-29 23:59:59.96'", "2024-03-01 00:00:00.0"),
        ("datetime(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)", "2024-01-01 00:00:00.123"),
        ("timestamp NOT NULL DEFAULT NOW()", "2024-01-01 00:00:00"),
        ("time DEFAULT '10:11:12'", "10:11:12"),
        ("year DEFAULT 99", "1999"),
        ("float DEFAULT 1.1", "1.1"),
        ("double DEFAULT 1e3", "1000.0"),
        ("tinyint(1) NOT NULL DEFAULT FALSE", "0"),
    ],
)
def test_origin_default_of_added_column(orders, definition, origin):
    c = change(f"ALTER TABLE orders ADD COLUMN added {definition}", orders)
    assert c.understood and not c.needs_snapshot, c.note
    assert column(c.schema_after, "added")["origin_default"] == origin


@pytest.mark.parametrize(
    "definition",
    [
        "varchar(36) NOT NULL DEFAULT (uuid())",
        "int AUTO_INCREMENT",
        "int AS (qty + 1) STORED",
        "date NOT NULL DEFAULT CURRENT_TIMESTAMP",
    ],
)
def test_origin_default_not_known_needs_a_snapshot(orders, definition):
    c = change(f"ALTER TABLE orders ADD COLUMN added {definition}", orders)
    assert c.understood and c.needs_snapshot and column(c.schema_after, "added")["origin_default"] is None


def test_origin_default_follows_a_type_change(orders):
    added = after("ALTER TABLE orders ADD COLUMN fee decimal(6,2) NOT NULL DEFAULT '1.5'", orders)
    assert column(added, "fee")["origin_default"] == "1.50"
    retyped = after("ALTER TABLE orders MODIFY fee decimal(8,4) NOT NULL", added)
    assert column(retyped, "fee")["origin_default"] == "1.5000"


# ---- names, unknowns, databases ---------------------------------------------------------------------


def test_column_names_match_case_insensitively_and_keep_the_new_spelling(orders):
    s = after("ALTER TABLE orders CHANGE QTY Qty int unsigned, DROP COLUMN PRICE", orders)
    assert names(s) == ["order_id", "status", "Qty"]


def test_unknown_table_or_statement():
    unknown = change("ALTER TABLE shop.nowhere ADD COLUMN a int")
    assert (unknown.ddl_type, unknown.understood, unknown.schema_after, unknown.needs_snapshot) == (
        "add_column",
        False,
        None,
        False,
    )
    garbage = change("ALTER TABLE orders ADD COLUMN a int WITH MAGIC", table="orders")
    assert (garbage.ddl_type, garbage.understood, garbage.database, garbage.table) == ("other", False, "shop", "orders")


def test_not_understood_on_a_known_table_keeps_the_schema_and_asks_for_a_snapshot(orders):
    c = change("ALTER TABLE orders SPLIT TABLE orders BETWEEN (0) AND (10) REGIONS 4", orders, table="orders")
    assert (c.ddl_type, c.understood, c.schema_after, c.needs_snapshot) == ("other", False, orders, True)
    assert c.note


def test_create_and_drop_database(orders):
    created = change("CREATE DATABASE IF NOT EXISTS `new db` DEFAULT CHARACTER SET utf8mb4")
    assert (created.ddl_type, created.database, created.table) == ("create_database", "new db", None)
    other = after("CREATE TABLE elsewhere.t (a int)")
    items = after("CREATE TABLE shop.items (a int)")
    dropped = changes("DROP SCHEMA IF EXISTS shop", [orders, other, items])
    assert [(c.ddl_type, c.database, c.table, c.schema_after) for c in dropped] == [
        ("drop_database", "shop", "items", None),
        ("drop_database", "shop", "orders", None),
        ("drop_database", "shop", None, None),
    ]


def test_recover_table_needs_a_snapshot(orders):
    c = change("RECOVER TABLE shop.orders")
    assert (c.ddl_type, c.table, c.schema_after, c.needs_snapshot) == ("recover_table", "orders", None, True)
    flashback = change("FLASHBACK TABLE orders TO orders_back")
    assert (flashback.ddl_type, flashback.table, flashback.needs_snapshot) == ("recover_table", "orders_back", True)
    by_job = change("RECOVER TABLE BY JOB 42", table="orders", protocol_schema=protocol(orders))
    assert (by_job.database, by_job.table, by_job.needs_snapshot) == ("shop", "orders", True)
    assert columns(by_job.schema_after) == columns(orders) and by_job.schema_after["key_columns"] == ["order_id"]


# ---- protocol schemas and inferred schemas ------------------------------------------------------


def protocol(schema, **types):
    p = {
        "database": schema["database"],
        "table": schema["table"],
        "key_columns": schema["key_columns"],
        "columns": [
            {k: v for k, v in c.items() if k in ("name", "type", "nullable", "elements")} for c in schema["columns"]
        ],
    }
    for c in p["columns"]:
        c["type"] = types.get(c["name"], c["type"])
    return p


def test_protocol_schema_wins_on_types_but_ids_come_from_the_statement(orders):
    expected = after("ALTER TABLE orders ADD COLUMN fee int NOT NULL", orders)
    carried = protocol(expected, fee="bigint")
    c = change("ALTER TABLE orders ADD COLUMN fee int NOT NULL", orders, table="orders", protocol_schema=carried)
    assert column(c.schema_after, "fee") == {**column(expected, "fee"), "type": "bigint"}
    assert c.schema_after["table_uid"] == orders["table_uid"]


def test_protocol_schema_when_the_statement_is_not_understood(orders):
    carried = protocol(after("ALTER TABLE orders DROP price, ADD fee int", orders))
    c = change("ALTER TABLE orders DO SOMETHING NEW", orders, table="orders", protocol_schema=carried)
    assert not c.understood and c.needs_snapshot
    assert [(col["name"], col["id"]) for col in c.schema_after["columns"]] == [
        ("order_id", 1),
        ("status", 2),
        ("qty", 4),
        ("fee", 5),
    ]
    assert c.schema_after["next_column_id"] == 6 and c.schema_after["table_uid"] == orders["table_uid"]


def test_inferred_schema():
    s = inferred_schema("shop", "seen", [("id", "bigint"), ("e", "enum")], ["id"], TS)
    assert columns(s) == [("id", "bigint", False), ("e", "enum", True)]
    assert [c["id"] for c in s["columns"]] == [1, 2] and s["next_column_id"] == 3 and "elements" not in s["columns"][1]
    assert s["table_uid"] == inferred_schema("shop", "seen", [("id", "bigint")], ["id"], TS)["table_uid"]
    assert (
        inferred_schema("shop", "seen", [("x", "int")], [], TS, nullable={"x": False})["columns"][0]["nullable"]
        is False
    )
    assert names(after("ALTER TABLE seen ADD COLUMN z int AFTER id", s)) == ["id", "z", "e"]


# ---- randomized: ADD/DROP/RENAME/MODIFY against a model ---------------------------------------------

TYPES = ["int", "bigint", "varchar(10)", "decimal(8,2)", "datetime(3)", "enum('a','b')", "blob"]
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["add", "drop", "rename", "change", "modify"]),
        st.integers(0, 100),  # picks the column and the AFTER anchor
        st.sampled_from(["a", "b", "c", "d", "e", "f"]),
        st.sampled_from(TYPES),
        st.sampled_from(["", "FIRST", "AFTER"]),
        st.sampled_from([str.lower, str.upper, str.title]),  # how the statement spells existing names
    ),
    max_size=25,
)


def _placed(model, entry, position, anchor):
    if position == "FIRST":
        return [entry] + model
    if position == "AFTER":
        i = next(k for k, (_, name, _) in enumerate(model) if name.lower() == anchor.lower())
        return model[: i + 1] + [entry] + model[i + 1 :]
    return model + [entry]


def _model_step(model, next_id, operation):
    """One clause and the model [(id, name, type)] after it, or None when the clause would be invalid."""
    verb, pick, new_name, type_, position, casing = operation
    taken = {name.lower() for _, name, _ in model}
    anchor = model[pick % len(model)][1]
    where = {"": "", "FIRST": " FIRST", "AFTER": f" AFTER `{casing(anchor)}`"}[position]
    if verb == "add":
        if new_name in taken:
            return None
        entry = (next_id, new_name, type_)
        return f"ADD COLUMN `{new_name}` {type_}{where}", _placed(model, entry, position, anchor), next_id + 1
    movable = [m for m in model if m[1] != "id"]  # the key column stays
    if not movable:
        return None
    target = movable[pick % len(movable)]
    i = model.index(target)
    rest = model[:i] + model[i + 1 :]
    if verb == "drop":
        return f"DROP COLUMN `{casing(target[1])}`", rest, next_id
    if verb in ("rename", "change") and new_name in taken:
        return None
    if verb == "rename":
        return (
            f"RENAME COLUMN `{casing(target[1])}` TO `{new_name}`",
            model[:i] + [(target[0], new_name, target[2])] + model[i + 1 :],
            next_id,
        )
    if position == "AFTER" and anchor.lower() == target[1].lower():
        return None
    entry = (target[0], casing(target[1]) if verb == "modify" else new_name, type_)
    head = f"MODIFY `{entry[1]}`" if verb == "modify" else f"CHANGE `{casing(target[1])}` `{new_name}`"
    moved = _placed(rest, entry, position, anchor) if position else model[:i] + [entry] + model[i + 1 :]
    return f"{head} {type_}{where}", moved, next_id


@settings(max_examples=150, deadline=None)
@given(OPERATIONS, st.integers(1, 4))
def test_random_alter_sequences_match_a_model(operations, clauses_per_statement):
    """Names, order, types and ids as a model says; ids only ever come from next_column_id (never reused)."""
    schema = after("CREATE TABLE shop.r (id bigint PRIMARY KEY, a int)")
    model, next_id, pending, ts = [(1, "id", "bigint"), (2, "a", "int")], 3, [], TS
    for operation in operations:
        step = _model_step(model, next_id, operation)
        if step is None:
            continue
        clause, model, next_id = step
        pending.append(clause)
        if len(pending) == clauses_per_statement:
            ts += 1
            schema = after("ALTER TABLE r " + ", ".join(pending), schema, ts=ts)
            pending = []
            assert [(c["id"], c["name"], c["type"]) for c in schema["columns"]] == [
                (i, name, canonical_type(t)) for i, name, t in model
            ]
            assert schema["next_column_id"] == next_id and schema["key_columns"] == ["id"]


def test_a_time_keeps_its_fractional_digits_until_it_is_no_time():
    """The canonical types `time`, `datetime` and `timestamp` drop the fsp, which gold's text of a TIME has and by
    which silver reads Debezium's DATETIME numbers: the schema keeps it beside the type (`fsp`), follows a MODIFY or
    CHANGE to another fsp, and drops it when the column stops being one of those."""
    s = after("CREATE TABLE c (id int PRIMARY KEY, a time, b time(3), d datetime(3), f timestamp)")
    assert {c["name"]: c.get("fsp") for c in s["columns"]} == {"id": None, "a": 0, "b": 3, "d": 3, "f": 0}
    altered = after(
        "ALTER TABLE c MODIFY a time(6), CHANGE b b2 varchar(20), ADD COLUMN e time(2), MODIFY f datetime(5)", s
    )
    assert {c["name"]: c.get("fsp") for c in altered["columns"]} == {
        "id": None,
        "a": 6,
        "b2": None,
        "d": 3,
        "f": 5,
        "e": 2,
    }


def test_a_tinyint_1_is_flagged_boolean_until_it_is_no_tinyint_1():
    """MySQL's BOOL is TINYINT(1); the canonical type drops the width, so the schema flags the column (gold may map
    it to boolean: config.TypeMappings.tinyint1). A MODIFY to another width or type drops the flag; other columns'
    changes keep it."""
    s = after(
        "CREATE TABLE b (id int PRIMARY KEY, x bool, y boolean, z tinyint(1), w tinyint(4), u tinyint(1) unsigned)"
    )
    assert {c["name"]: c.get("boolean", False) for c in s["columns"]} == {
        "id": False,
        "x": True,
        "y": True,
        "z": True,
        "w": False,
        "u": False,
    }
    assert all(c["type"] in ("int", "tinyint", "tinyint unsigned") for c in s["columns"])
    altered = after("ALTER TABLE b MODIFY z tinyint(4), ADD COLUMN v int, CHANGE y y2 bool", s)
    assert {c["name"]: c.get("boolean", False) for c in altered["columns"]} == {
        "id": False,
        "x": True,
        "y2": True,
        "z": False,
        "w": False,
        "u": False,
        "v": False,
    }
