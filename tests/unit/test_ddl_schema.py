"""Table schemas after DDL, from the MySQL statement, for protocols whose DDL carries none."""

from spark_jobs.ddl_schema import schema_after

CREATE = (
    "CREATE TABLE `shop`.`orders` (`order_id` bigint NOT NULL, `status` enum('new','paid') NOT NULL, "
    "`price` decimal(10,2), `qty` int unsigned, PRIMARY KEY (`order_id`))"
)


def columns(schema):
    return [(c["name"], c["type"], c["nullable"]) for c in schema["columns"]]


def test_create_table():
    s = schema_after(CREATE, "shop", "orders", None)
    assert columns(s) == [
        ("order_id", "bigint", False),
        ("status", "enum", False),
        ("price", "decimal(10,2)", True),
        ("qty", "int unsigned", True),
    ]
    assert s["key_columns"] == ["order_id"]
    assert s["columns"][1]["elements"] == ["new", "paid"]


def test_alter_add_drop_modify_rename_change():
    s = schema_after(CREATE, "shop", "orders", None)
    assert columns(schema_after("ALTER TABLE shop.orders ADD COLUMN note varchar(20) NOT NULL", "shop", "orders", s))[
        -1
    ] == ("note", "varchar", False)
    assert [c[0] for c in columns(schema_after("ALTER TABLE shop.orders DROP COLUMN price", "shop", "orders", s))] == [
        "order_id",
        "status",
        "qty",
    ]
    assert columns(schema_after("ALTER TABLE shop.orders MODIFY COLUMN qty bigint", "shop", "orders", s))[-1] == (
        "qty",
        "bigint",
        True,
    )
    assert columns(schema_after("ALTER TABLE shop.orders RENAME COLUMN qty TO quantity", "shop", "orders", s))[-1] == (
        "quantity",
        "int unsigned",
        True,
    )
    changed = schema_after("ALTER TABLE shop.orders CHANGE COLUMN order_id id bigint NOT NULL", "shop", "orders", s)
    assert columns(changed)[0] == ("id", "bigint", False) and changed["key_columns"] == ["id"]


def test_drop_and_unparseable():
    s = schema_after(CREATE, "shop", "orders", None)
    assert schema_after("DROP TABLE shop.orders", "shop", "orders", s) is None
    assert schema_after("ALTER TABLE shop.orders ADD INDEX idx_status (status)", "shop", "orders", s) == s
    assert schema_after("THIS IS NOT SQL ((", "shop", "orders", s) == s
