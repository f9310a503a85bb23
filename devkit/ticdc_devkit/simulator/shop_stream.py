"""A small shop database's change stream: the demo's data and the end-to-end tests' workload.

Three tables, inserts, updates (one changes a primary key, which TiCDC splits into delete +
insert), deletes, one ADD COLUMN, and watermarks. Commit timestamps are real TSOs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

from ticdc_devkit.simulator.model import Column, Ddl, Event, RowChange, Table, Watermark

DATABASE = "shop"
BASE_MS = 1_763_800_000_000  # 2025-11-22T08:26:40Z


def tso(ms_offset: int, logical: int = 0) -> int:
    return ((BASE_MS + ms_offset) << 18) + logical


CUSTOMERS = Table(
    DATABASE,
    "customers",
    (
        Column("id", "int", nullable=False),
        Column("name", "varchar(64)", nullable=False),
        Column("email", "varchar(128)"),
        Column("created_at", "datetime(3)"),
    ),
    key=("id",),
    table_id=101,
)

PRODUCTS = Table(
    DATABASE,
    "products",
    (
        Column("sku", "varchar(16)", nullable=False),
        Column("title", "varchar(128)", nullable=False),
        Column("price", "decimal(10,2)", nullable=False),
        Column("stock", "int unsigned"),
    ),
    key=("sku",),
    table_id=102,
)

ORDERS = Table(
    DATABASE,
    "orders",
    (
        Column("order_id", "bigint", nullable=False),
        Column("customer_id", "int", nullable=False),
        Column("sku", "varchar(16)", nullable=False),
        Column("quantity", "smallint", nullable=False),
        Column("status", "enum('new','paid','shipped','cancelled')", nullable=False),
        Column("ordered_on", "date"),
    ),
    key=("order_id",),
    table_id=103,
)

CUSTOMERS_V2 = replace(CUSTOMERS, columns=CUSTOMERS.columns + (Column("tier", "varchar(16)"),), schema_version=2)


def _create(table: Table, ts: int) -> Ddl:
    cols = ", ".join(f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}" for c in table.columns)
    sql = f"CREATE TABLE `{table.database}`.`{table.name}` ({cols}, PRIMARY KEY ({', '.join(f'`{k}`' for k in table.key)}))"
    return Ddl(ts, table.database, table.name, sql, "create_table", table_after=table)


def _customer(i: int, table: Table = CUSTOMERS, **extra) -> dict:
    row = {
        "id": i,
        "name": f"Customer {i} — Ünïcode",
        "email": f"c{i}@example.com",
        "created_at": dt.datetime(2025, 11, 1, 9, 0, i % 60, 123000),
    }
    row.update(extra)
    return row


def shop_stream(customers: int = 20, products: int = 8, orders: int = 40) -> list[Event]:
    """The first part of the stream: schema, initial rows, updates, deletes, one key change."""
    events: list[Event] = [_create(CUSTOMERS, tso(0)), _create(PRODUCTS, tso(1)), _create(ORDERS, tso(2))]
    ms = 10
    for i in range(1, customers + 1):
        events.append(RowChange(tso(ms), "insert", CUSTOMERS, after=_customer(i)))
        ms += 1
    for i in range(1, products + 1):
        events.append(
            RowChange(
                tso(ms),
                "insert",
                PRODUCTS,
                after={
                    "sku": f"SKU-{i:03d}",
                    "title": f"Product {i}",
                    "price": Decimal(f"{i * 3}.{i:02d}"),
                    "stock": 100 + i,
                },
            )
        )
        ms += 1
    statuses = ["new", "paid", "shipped", "cancelled"]
    for i in range(1, orders + 1):
        events.append(
            RowChange(
                tso(ms),
                "insert",
                ORDERS,
                after={
                    "order_id": 10_000 + i,
                    "customer_id": 1 + i % customers,
                    "sku": f"SKU-{1 + i % products:03d}",
                    "quantity": 1 + i % 5,
                    "status": statuses[i % 2],
                    "ordered_on": dt.date(2025, 11, 1 + i % 20),
                },
            )
        )
        ms += 1
    events.append(Watermark(tso(ms)))
    ms += 1
    for i in range(1, orders + 1, 3):
        before = _order_row(i, customers, products, statuses[i % 2])
        events.append(RowChange(tso(ms), "update", ORDERS, before=before, after={**before, "status": "shipped"}))
        ms += 1
    for i in range(1, products + 1, 2):
        before = {
            "sku": f"SKU-{i:03d}",
            "title": f"Product {i}",
            "price": Decimal(f"{i * 3}.{i:02d}"),
            "stock": 100 + i,
        }
        events.append(
            RowChange(tso(ms), "update", PRODUCTS, before=before, after={**before, "stock": before["stock"] - 7})
        )
        ms += 1
    for i in (2, 5):
        events.append(RowChange(tso(ms), "delete", CUSTOMERS, before=_customer(i)))
        ms += 1
    # a primary-key change: TiCDC sends it as delete + insert at one commit ts
    events.append(RowChange(tso(ms), "update", CUSTOMERS, before=_customer(7), after=_customer(7, id=700)))
    ms += 1
    events.append(Watermark(tso(ms)))
    return events


def _order_row(i: int, customers: int, products: int, status: str) -> dict:
    return {
        "order_id": 10_000 + i,
        "customer_id": 1 + i % customers,
        "sku": f"SKU-{1 + i % products:03d}",
        "quantity": 1 + i % 5,
        "status": status,
        "ordered_on": dt.date(2025, 11, 1 + i % 20),
    }


def shop_stream_more(start_ms: int = 10_000, customers: int = 20) -> list[Event]:
    """The second part: ADD COLUMN, rows on the new schema, more deletes, and a final watermark."""
    ms = start_ms
    events: list[Event] = [
        Ddl(
            tso(ms),
            DATABASE,
            "customers",
            "ALTER TABLE `shop`.`customers` ADD COLUMN `tier` varchar(16)",
            "add_column",
            table_after=CUSTOMERS_V2,
            table_before=CUSTOMERS,
        )
    ]
    ms += 1
    for i in range(customers + 1, customers + 6):
        events.append(RowChange(tso(ms), "insert", CUSTOMERS_V2, after=_customer(i, CUSTOMERS_V2, tier="gold")))
        ms += 1
    before = {**_customer(1), "tier": None}
    events.append(RowChange(tso(ms), "update", CUSTOMERS_V2, before=before, after={**before, "tier": "silver"}))
    ms += 1
    events.append(RowChange(tso(ms), "delete", ORDERS, before=_order_row(4, customers, 8, "shipped")))
    ms += 1
    events.append(Watermark(tso(ms)))
    ms += 1
    # changes after the last watermark: landed, but not yet published to gold
    events.append(RowChange(tso(ms), "delete", CUSTOMERS_V2, before={**_customer(3), "tier": None}))
    return events
