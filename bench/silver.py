"""Silver throughput per protocol, against two references measured in the same run on the same bronze rows.

    python bench/silver.py [--messages 1000000] [--protocols canal-json,open,debezium,avro,simple-json,simple-avro]

For each protocol, in its own subprocess (one JVM and one embedded Derby metastore each, under
`.local/bench/silver/<protocol>/`, started fresh; Spark `local[2]`, driver memory 4g, 4 shuffle
partitions), the simulator encodes an orders-like table (12 columns; about 62% inserts, 33% updates,
5% deletes, one row per commit, a watermark every 5,000 rows, the TiDB extension on where the
protocol has it) spread over 4 partitions by index value, until the stream has N Kafka messages.
The messages are written into `bronze.kafka_messages` in ONE append carrying `ticdc.source`,
`ticdc.batch-id` and `ticdc.next-offsets` as `land_bronze` does, so `build_silver` reads them as
landed data (Kafka is never contacted); bronze's `write.distribution-mode` is none, so the append
is several files (one per staged chunk group) and every pass can read bronze with both cores. The
simulator's type parser is cached in the encoding process only, which halves the encoding time.
The stream's first chunk (CREATE TABLE, a bootstrap, 1,000 row changes) is landed and built into silver
first, untimed: silver knows the table before the measured run, as before every run but a table's first.
Then, over the same bronze rows (the measured append only):

- parse-only: a `mapInArrow` over the bronze values that only parses each one (orjson; Open: each
  JSON item inside its framing; Avro: key and value with fastavro and schemas fetched beforehand;
  Simple-Avro: the value with the message schema) and returns nothing, to the `noop` sink: the
  ceiling for Python work inside Spark here (best of 2);
- from_json (Canal-JSON only): the plain Spark SQL way, `from_json` with a schema, `posexplode`
  of `data` with `old` at the same position, to the `noop` sink (best of 2);
- shuffle-only (the protocols whose decoders need each partition in offset order: Avro, Simple): the
  repartition by (topic, partition) and sort by offset, to the `noop` sink, nothing decoded (best of 2);
- decode-only: that plus `decode_batches` in `mapInArrow`, as `decode_and_write` runs it, to the
  `noop` sink: decoding without any Iceberg write (best of 2);
- build_silver: the real thing, once, writing the Iceberg silver tables; its steps are timed by
  wrapping `decode_and_write` and `_finish` of `spark_jobs.silver.build` and the MERGE writers of
  `spark_jobs.silver.merges` in the subprocess (nothing in the project changes).

- flat in table size (Canal-JSON, `--existing-rows`, default 10M): the measured run's rows and record
  are deleted, that many older rows of other orders are seeded into silver.row_changes with Spark, and
  build_silver runs again over the same messages; its seconds against the first run's (goal <= 1.3x).

- ranges of tables (Canal-JSON, `--ranged-tables N`, default 0: not; architecture decision 26): after that, in the
  same Spark session, `merge_row_changes` writes `--ranged-writes` batches (default 4) of `--ranged-rows` row
  changes (default 120,000; inserts of 12-column maps spread evenly over N tables `shop.orders_00`.., made with
  Spark and cached before the clock starts, as `decode_and_write` caches its decoded rows) each of two ways,
  alternated, each way under a source of its own: one file a task (the ranged write switched off,
  `RANGED_FROM_ROWS` set above the batch) and ranges of tables (the real rule). Then one table's changes are read
  out of each way's writes (`count`, `max` of two map values; median of 5, alternated) with the data files the
  Iceberg scan read and skipped. The ranged way's write (median after a warm-up write) and read seconds against
  the other's.

Every rate is events per second: the events `build_silver` decoded (row changes + DDL +
watermarks; an Open message batches up to 16 rows) divided by each pass's wall seconds, so the
ratios compare wall times on identical input. Absolute numbers depend on the machine and on what
else runs on it, which is why the references are measured alongside. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import random
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import bench_pipeline, fresh_lake, run_child, summary_row, write_summary  # noqa: E402
from spark_jobs.codecs import PROTOCOLS, needs_partition_order  # noqa: E402
from ticdc_devkit.registry import running_registry  # noqa: E402
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark  # noqa: E402
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "silver"
SOURCE = "bench"
TOPIC = "bench_silver"
PARTITIONS = 4
WATERMARK_EVERY = 5_000
CHUNK_ROWS = 50_000  # row changes encoded (and staged as one parquet file) at a time
WINDOW = 20_000  # updates and deletes pick among the most recent live rows
SCHEMA_ROWS = 1_000  # row changes in the untimed first run, with the CREATE TABLE
REPEATS = 2
BASE_MS = 1_763_800_000_000
RESULT_PREFIX = "BENCH-SILVER-RESULT "
# --ranged-tables: the two ways of writing a large run (key: the source each writes under), and its read's repeats
RANGED_WAYS = {"one file a task": "bench-one-file", "ranges of tables": "bench-ranged"}
RANGED_READS = 5
# the MERGE writers decode_and_write calls (spark_jobs.silver.merges); build_silver calls expire_pending after it
DECODE_AND_WRITE_MERGES = (
    "merge_ddl_events",
    "merge_row_changes",
    "merge_watermarks",
    "merge_quarantine",
    "update_pending",
)

log = logging.getLogger("bench.silver")

ORDERS = Table(
    "shop",
    "orders",
    (
        Column("order_id", "bigint unsigned", nullable=False),
        Column("customer_id", "int", nullable=False),
        Column("sku", "varchar(16)", nullable=False),
        Column("quantity", "smallint unsigned", nullable=False),
        Column("unit_price", "decimal(10,2)", nullable=False),
        Column("total", "decimal(12,2)", nullable=False),
        Column("currency", "char(3)", nullable=False),
        Column("status", "enum('new','paid','shipped','delivered','cancelled')", nullable=False),
        Column("note", "varchar(255)"),
        Column("weight_kg", "double"),
        Column("created_at", "datetime(3)", nullable=False),
        Column("updated_at", "timestamp(6)", nullable=False),
    ),
    key=("order_id",),
    table_id=103,
    schema_version=BASE_MS << 18,
)
CREATE_ORDERS = (
    "CREATE TABLE `shop`.`orders` ("
    + ", ".join(f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}" for c in ORDERS.columns)
    + ", PRIMARY KEY (`order_id`))"
)


# ---- the stream ----------------------------------------------------------------------------------------


def order_row(rng: random.Random, order_id: int, now: dt.datetime) -> dict[str, Any]:
    """A new row of the orders table (ORDERS), its values drawn from `rng`."""
    quantity = rng.randint(1, 20)
    price = Decimal(rng.randint(100, 99_999)).scaleb(-2)
    return {
        "order_id": order_id,
        "customer_id": rng.randint(1, 500_000),
        "sku": f"SKU-{rng.randint(0, 99_999):05d}",
        "quantity": quantity,
        "unit_price": price,
        "total": (price * quantity).quantize(Decimal("0.01")),
        "currency": rng.choice(["EUR", "USD", "JPY"]),
        "status": "new",
        "note": rng.choice([None, "", "leave at the door", "Lieferung an Packstation — bitte klingeln"]),
        "weight_kg": round(rng.uniform(0.1, 40), 3),
        "created_at": now.replace(microsecond=now.microsecond // 1000 * 1000),
        "updated_at": now,
    }


class OrdersStream:
    """Row changes of ORDERS in commit order, produced chunk by chunk (bounded memory)."""

    def __init__(self, seed: int = 7):
        self.rng = random.Random(seed)
        self.ts = BASE_MS << 18
        self.start = dt.datetime(2025, 11, 22, 8, 0, 0)
        self.next_id = 10_000_000
        self.recent: list[dict[str, Any]] = []  # live rows, most recent last (at most WINDOW)
        self.rows = 0
        self.first = True

    def chunk(self, count: int) -> list:
        """The next `count` row changes (the first chunk starts with CREATE TABLE and a bootstrap)."""
        rng, recent = self.rng, self.recent
        events: list = []
        if self.first:
            events += [
                Ddl(self.ts, "shop", "orders", CREATE_ORDERS, "create_table", table_after=ORDERS),
                Bootstrap(ORDERS),
            ]
            self.first = False
        for _ in range(count):
            self.ts += rng.randint(1, 8) << 18 | rng.randint(0, 3)
            now = self.start + dt.timedelta(milliseconds=(self.ts >> 18) - BASE_MS, microseconds=rng.randrange(1000))
            r = rng.random()
            if r < 0.62 or len(recent) < 100:
                self.next_id += 1
                row = order_row(self.rng, self.next_id, now)
                recent.append(row)
                if len(recent) > WINDOW:
                    del recent[: len(recent) - WINDOW]
                events.append(RowChange(self.ts, "insert", ORDERS, None, row))
            elif r < 0.95:
                index = rng.randrange(len(recent))
                old = recent[index]
                new = {**old, "status": rng.choice(["paid", "shipped", "delivered", "cancelled"]), "updated_at": now}
                recent[index] = new
                events.append(RowChange(self.ts, "update", ORDERS, old, new))
            else:
                old = recent.pop(rng.randrange(len(recent)))
                events.append(RowChange(self.ts, "delete", ORDERS, old, None))
            self.rows += 1
            if self.rows % WATERMARK_EVERY == 0:
                events.append(Watermark(self.ts + (1 << 18)))
        return events


def _cache_parse_type() -> None:
    """The simulator's encoders parse each column's MySQL type for every value they render
    (`values.parse_type`, a pure function): cache it in this process, which only encodes. It halves
    the encoding time; Spark's Python workers (which decode) are separate processes and unaffected."""
    import functools

    from spark_jobs.canonical import values

    original = values.parse_type
    cached = functools.lru_cache(maxsize=None)(original)
    for module in list(sys.modules.values()):
        if getattr(module, "parse_type", None) is original:
            module.parse_type = cached


def stage_bronze(protocol: str, options: dict, target: int, staging: Path) -> dict:
    """Encode until the stream has `target` messages; write them as bronze-shaped parquet files under
    `staging/run`, after the stream's first chunk (CREATE TABLE, a bootstrap, SCHEMA_ROWS row changes) under
    `staging/schema`: silver learns the table in an earlier run, as for every run but a table's first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs.bronze.kafka_reader import MESSAGE_SCHEMA
    from ticdc_devkit.simulator.stream import encode_stream, make_encoder

    make_encoder(protocol, options)  # imports the encoder's modules before parse_type is cached
    _cache_parse_type()

    schema = MESSAGE_SCHEMA
    stream = OrdersStream()
    next_offset = [0] * PARTITIONS

    def write(messages: list, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        cols: dict[str, list] = {name: [] for name in schema.names}
        size = 0
        for m in messages:
            offset = next_offset[m.partition]
            next_offset[m.partition] += 1
            cols["topic"].append(m.topic)
            cols["partition"].append(m.partition)
            cols["offset"].append(offset)
            cols["timestamp"].append((BASE_MS + offset) * 1000)
            cols["key"].append(m.key)
            cols["value"].append(m.value)
            cols["headers"].append([{"key": k, "value": v} for k, v in m.headers])
            size += len(m.value or b"") + len(m.key or b"")
        pq.write_table(pa.Table.from_pydict(cols, schema=schema), path)
        return size

    first = encode_stream(
        protocol, stream.chunk(SCHEMA_ROWS), topic=TOPIC, partitions=PARTITIONS, options=options, dispatch="index-value"
    )
    write(first, staging / "schema" / "part-00000.parquet")
    schema_offsets = {TOPIC: {str(p): o for p, o in enumerate(next_offset) if o}}
    written = value_bytes = files = 0
    per_message = 1.0  # row changes per message, learnt from the first chunk
    started = time.monotonic()
    step, next_report = max(1, target // 10), max(1, target // 10)
    while written < target:
        rows = max(1_000, min(CHUNK_ROWS, int((target - written) * per_message * 1.02) + 10))
        events = stream.chunk(rows)
        messages = encode_stream(
            protocol, events, topic=TOPIC, partitions=PARTITIONS, options=options, dispatch="index-value"
        )
        per_message = max(1.0, rows / max(1, len(messages)))
        messages = messages[: target - written]
        value_bytes += write(messages, staging / "run" / f"part-{files:05d}.parquet")
        files += 1
        written += len(messages)
        if written >= next_report or written >= target:
            elapsed = time.monotonic() - started
            log.info(
                "%s: encoded %s/%s messages (%s row changes) in %.0fs, %s msg/s",
                protocol,
                f"{written:,}",
                f"{target:,}",
                f"{stream.rows:,}",
                elapsed,
                f"{written / elapsed:,.0f}",
            )
            next_report = (written // step + 1) * step
    return {
        "messages": written,
        "row_changes_encoded": stream.rows,
        "bytes": value_bytes,
        "schema_offsets": schema_offsets,
        "next_offsets": {TOPIC: {str(p): o for p, o in enumerate(next_offset) if o}},
        "encode_s": time.monotonic() - started,
    }


def land_staged(spark, staging: Path, start_offsets: dict, next_offsets: dict) -> float:
    """The staged messages into bronze in one append with land_bronze's snapshot properties."""
    from pyspark.sql import functions as F

    from spark_jobs.bronze.land import SUMMARY_BATCH, SUMMARY_OFFSETS, SUMMARY_RANGES, SUMMARY_SOURCE
    from spark_jobs.runtime.tables import BRONZE_MESSAGES, ensure_tables

    started = time.monotonic()
    ensure_tables(spark, "bronze")
    batch_id = uuid.uuid4().hex
    properties = {
        SUMMARY_SOURCE: SOURCE,
        SUMMARY_BATCH: batch_id,
        SUMMARY_OFFSETS: json.dumps(next_offsets, sort_keys=True, separators=(",", ":")),
        SUMMARY_RANGES: json.dumps(
            [
                [t, int(p), start_offsets.get(t, {}).get(p, 0), o]
                for t, parts in next_offsets.items()
                for p, o in parts.items()
            ]
        ),
    }
    rows = spark.read.parquet(str(staging)).select(
        F.lit(SOURCE).alias("source"),
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        F.lit(batch_id).alias("batch_id"),
        F.current_timestamp().alias("landed_at"),
    )
    rows.writeTo(BRONZE_MESSAGES).options(**{f"snapshot-property.{k}": v for k, v in properties.items()}).append()
    return time.monotonic() - started


# ---- the references: parse only, from_json -------------------------------------------------------------


def parse_only_function(protocol: str, avro_schemas: dict[int, str]) -> tuple[list[str], Callable]:
    """(bronze columns read, mapInArrow body that parses them the cheapest way the format allows, yields nothing)."""
    if protocol in ("canal-json", "debezium", "simple-json"):

        def parse_json(batches):
            import orjson

            loads = orjson.loads
            for batch in batches:
                for value in batch.column(0).to_pylist():
                    if value is not None:
                        loads(value)
            return
            yield  # unreachable: makes this a generator

        return ["value"], parse_json
    if protocol == "open":

        def parse_open(batches):
            import orjson

            loads = orjson.loads

            def items(framed, pos):
                end = len(framed)
                while pos < end:
                    size = int.from_bytes(framed[pos : pos + 8], "big")
                    if size:
                        loads(framed[pos + 8 : pos + 8 + size])
                    pos += 8 + size

            for batch in batches:
                for key, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                    if key:
                        items(key, 8)
                    if value:
                        items(value, 0)
            return
            yield

        return ["key", "value"], parse_open
    if protocol == "avro":
        texts = dict(avro_schemas)

        def parse_avro(batches):
            import io
            import json as _json

            import fastavro

            schemas = {i: fastavro.parse_schema(_json.loads(t)) for i, t in texts.items()}
            reader, buffer = fastavro.schemaless_reader, io.BytesIO
            for batch in batches:
                for key, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                    for part in (key, value):
                        if part:
                            reader(buffer(part[5:]), schemas[int.from_bytes(part[1:5], "big")])
            return
            yield

        return ["key", "value"], parse_avro
    if protocol == "simple-avro":

        def parse_simple_avro(batches):
            import io

            import fastavro

            from spark_jobs.codecs.simple import message_schema

            schema = message_schema()
            reader, buffer = fastavro.schemaless_reader, io.BytesIO
            for batch in batches:
                for value in batch.column(0).to_pylist():
                    if value:
                        reader(buffer(value), schema)
            return
            yield

        return ["value"], parse_simple_avro
    raise ValueError(protocol)


def avro_schema_texts(spark, registry_url: str) -> dict[int, str]:
    """Every writer schema the bronze Avro frames name, fetched from the registry on the driver."""
    import urllib.request

    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    ids = {
        r[0]
        for r in spark.sql(
            f"""SELECT DISTINCT conv(hex(substring(part, 2, 4)), 16, 10) FROM (
            SELECT explode(array(key, value)) AS part FROM {BRONZE_MESSAGES} WHERE source = :source)
            WHERE part IS NOT NULL""",
            args={"source": SOURCE},
        ).collect()
    }
    texts = {}
    for schema_id in sorted(int(i) for i in ids):
        with urllib.request.urlopen(f"{registry_url}/schemas/ids/{schema_id}") as response:
            texts[schema_id] = json.load(response)["schema"]
    return texts


CANAL_SCHEMA = """id BIGINT, database STRING, `table` STRING, pkNames ARRAY<STRING>, isDdl BOOLEAN, type STRING,
    es BIGINT, ts BIGINT, `sql` STRING, sqlType MAP<STRING, INT>, mysqlType MAP<STRING, STRING>,
    data ARRAY<MAP<STRING, STRING>>, old ARRAY<MAP<STRING, STRING>>, _tidb STRUCT<commitTs: BIGINT, watermarkTs: BIGINT>"""


def from_json_frame(bronze):
    """Canal-JSON the plain Spark SQL way: from_json with a schema, one output row per element of `data`."""
    from pyspark.sql import functions as F

    parsed = bronze.select(
        "topic", "partition", "offset", F.from_json(F.col("value").cast("string"), CANAL_SCHEMA).alias("m")
    )
    rows = parsed.select("topic", "partition", "offset", "m", F.posexplode_outer("m.data").alias("pos", "after"))
    return rows.select(
        "topic",
        "partition",
        "offset",
        F.col("m.database").alias("database"),
        F.col("m.table").alias("table"),
        F.col("m.type").alias("op"),
        F.col("m.isDdl").alias("is_ddl"),
        F.col("m.sql").alias("ddl_sql"),
        F.coalesce(F.col("m._tidb.commitTs"), F.col("m._tidb.watermarkTs")).alias("commit_ts"),
        F.col("m.pkNames").alias("key_columns"),
        F.col("m.mysqlType").alias("column_types"),
        "after",
        F.expr("m.old[pos]").alias("before"),
    )


# ---- where decoding spends its time: decode_batches in this process, on a sample ----------------------

PROFILE_ROWS = 20_000


def profile_decode(protocol: str, options: dict, sample) -> dict:
    """decode_batches over a sample of bronze rows in this process (one core, no Spark): its plain rate,
    then one pass with its parts timed (the column path's decode_columns and block_rows; the row-wise path's
    codec decode, Arrow in and out, row_key; the rest is the loop that puts events into columns), by swapping
    timing wrappers into its module."""
    import spark_jobs.silver.decode as module

    batches = sample.select(["topic", "partition", "offset", "timestamp", "key", "value", "headers"]).to_batches(
        max_chunksize=10_000
    )
    seconds = {
        "codec decode_columns": 0.0,
        "blocks into rows (block_rows)": 0.0,
        "codec decode": 0.0,
        "Arrow in (columns to Python)": 0.0,
        "Arrow out (columns to Arrow)": 0.0,
        "row_key": 0.0,
    }
    clock = time.perf_counter

    def timing(name: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += clock() - started

        return wrapper

    class TimedDecoder:
        def __init__(self, decoder):
            self.protocol = decoder.protocol
            self.decode = timing("codec decode", decoder.decode)
            if hasattr(decoder, "decode_columns"):
                self.decode_columns = timing("codec decode_columns", decoder.decode_columns)

    def run() -> int:
        return sum(b.num_rows for b in module.decode_batches(iter(batches), protocol, options, []))

    run()  # warm: imports, registry look-ups
    started = clock()
    events = run()
    plain_s = clock() - started
    saved = {name: getattr(module, name) for name in ("_messages", "make_decoder", "row_key", "block_rows")}
    record_batch = module.DecodedColumns.record_batch
    try:
        module._messages = timing("Arrow in (columns to Python)", saved["_messages"])
        module.DecodedColumns.record_batch = timing("Arrow out (columns to Arrow)", record_batch)
        module.make_decoder = lambda *a, **k: TimedDecoder(saved["make_decoder"](*a, **k))
        module.row_key = timing("row_key", saved["row_key"])
        module.block_rows = timing("blocks into rows (block_rows)", saved["block_rows"])
        started = clock()
        run()
        total = clock() - started
    finally:
        module.DecodedColumns.record_batch = record_batch
        for name, value in saved.items():
            setattr(module, name, value)
    parts = dict(seconds)
    parts["rest (the loop, events into columns)"] = max(0.0, total - sum(seconds.values()))
    return {
        "rows": sample.num_rows,
        "events": events,
        "plain_s": plain_s,
        "shares": {k: v / total for k, v in parts.items()},
    }


# ---- one protocol, in its own process ------------------------------------------------------------------


def bench_config(protocol: str, lake_dir: Path, registry_url: str | None):
    from spark_jobs.config import (
        KafkaSettings,
        SchemaRegistrySettings,
        SourceSettings,
    )

    source = SourceSettings(
        name=SOURCE,
        protocol=protocol,
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        topics=[TOPIC],
        options=dict(EXTENSION_OPTIONS[protocol]),
        schema_registry=SchemaRegistrySettings(url=registry_url) if registry_url else None,
    )
    return bench_pipeline([source], lake_dir, "bench-silver", "4g")


def timed(label: str, fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    best = float("inf")
    for i in range(repeats):
        started = time.monotonic()
        fn()
        seconds = time.monotonic() - started
        best = min(best, seconds)
        log.info("  %s, run %d/%d: %.1fs", label, i + 1, repeats, seconds)
    return best


class StepTimer:
    """Wrap module functions so that their wall seconds add up under a name (restored afterwards)."""

    def __init__(self, module, names: list[str]):
        self.module, self.names, self.seconds, self._saved = module, names, {}, {}

    def __enter__(self) -> StepTimer:
        for name in self.names:
            original = getattr(self.module, name)
            self._saved[name] = original

            def wrapper(*args, _original=original, _name=name, **kwargs):
                started = time.monotonic()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds[_name] = self.seconds.get(_name, 0.0) + time.monotonic() - started

            setattr(self.module, name, wrapper)
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(self.module, name, original)


def one_protocol(protocol: str, n: int, existing_rows: int, ranged: dict) -> dict:
    """One protocol's measurements; `ranged`: --ranged-tables, --ranged-rows, --ranged-writes as tables, rows,
    writes (tables 0: not measured)."""
    import contextlib

    lake_dir = BENCH_DIR / protocol
    fresh_lake(lake_dir)
    result: dict = {"protocol": protocol, "target": n}
    registry_cm = running_registry() if protocol == "avro" else contextlib.nullcontext(None)
    with registry_cm as registry_url:
        options = dict(EXTENSION_OPTIONS[protocol])
        if registry_url:
            options["schema-registry-url"] = registry_url
        log.info(
            "%s: encoding %s messages (orders table, %d partitions by index value)", protocol, f"{n:,}", PARTITIONS
        )
        staged = stage_bronze(protocol, options, n, lake_dir / "staging")
        result.update(
            messages=staged["messages"],
            row_changes_encoded=staged["row_changes_encoded"],
            bronze_bytes=staged["bytes"],
            encode_s=staged["encode_s"],
        )

        config = bench_config(protocol, lake_dir, registry_url)
        from spark_jobs.config import decoder_options

        started = time.monotonic()
        from spark_jobs.runtime.spark_session import get_spark

        spark = get_spark(config, app_name=f"bench-silver-{protocol}")
        result["spark_start_s"] = time.monotonic() - started
        try:
            from spark_jobs.runtime.iceberg import main_snapshot
            from spark_jobs.silver.build import build_silver

            land_staged(spark, lake_dir / "staging" / "schema", {}, staged["schema_offsets"])
            build_silver(spark, config, SOURCE)  # the table is known before the measured run
            schema_snapshot = main_snapshot(spark)
            result["land_s"] = land_staged(
                spark, lake_dir / "staging" / "run", staged["schema_offsets"], staged["next_offsets"]
            )
            import pyarrow.parquet as pq

            sample = pq.read_table(lake_dir / "staging" / "run" / "part-00000.parquet")
            sample = sample.slice(0, PROFILE_ROWS)  # the first partition's messages of the first chunk, in offset order
            shutil.rmtree(lake_dir / "staging")
            log.info(
                "%s: %s messages (%.0f MB of keys and values) encoded in %.0fs, written to bronze in %.0fs",
                protocol,
                f"{result['messages']:,}",
                result["bronze_bytes"] / 1e6,
                result["encode_s"],
                result["land_s"],
            )
            result.update(measure(spark, config, protocol, registry_url, schema_snapshot, existing_rows, ranged))
            log.info("%s: profiling decode_batches in this process on %s bronze rows", protocol, f"{sample.num_rows:,}")
            result["profile"] = profile_decode(protocol, decoder_options(config.source(SOURCE)), sample)
        finally:
            spark.stop()
    return result


def order_images(n) -> tuple:
    """(order_id as text, the `after` map of the orders table's 12 columns, the column types map) of the order
    numbered by the Spark column `n`, as Spark expressions: a seeded row's values."""
    from pyspark.sql import functions as F

    order_id = (n + 1).cast("string")
    after = F.create_map(
        *[F.lit(c) for c in ("order_id",)],
        order_id,
        F.lit("customer_id"),
        (n % 500_000).cast("string"),
        F.lit("sku"),
        F.format_string("SKU-%05d", n % 100_000),
        F.lit("quantity"),
        (n % 20 + 1).cast("string"),
        F.lit("unit_price"),
        F.format_string("%d.%02d", n % 999, n % 100),
        F.lit("total"),
        F.format_string("%d.%02d", n % 9999, n % 100),
        F.lit("currency"),
        F.lit("EUR"),
        F.lit("status"),
        F.lit("delivered"),
        F.lit("note"),
        F.lit("leave at the door"),
        F.lit("weight_kg"),
        (n % 400 / 10).cast("string"),
        F.lit("created_at"),
        F.lit("2025-11-21 08:00:00.000"),
        F.lit("updated_at"),
        F.lit("2025-11-21 09:00:00.000000"),
    )
    types = F.create_map(*[x for c in ORDERS.columns for x in (F.lit(c.name), F.lit(c.type))])
    return order_id, after, types


def seed_row_changes(spark, count: int) -> None:
    """`count` inserts of other orders into silver.row_changes, committed a day before the stream starts, in
    commit order (as runs write them), written by Spark directly: what earlier runs would have left there."""
    from pyspark.sql import functions as F

    from spark_jobs.runtime.tables import SILVER_ROW_CHANGES
    from spark_jobs.silver.merges import ROW_CHANGE_COLUMNS

    base_ts = (BASE_MS - 86_400_000) << 18
    order_id, after, types = order_images(F.col("id"))
    rows = spark.range(count).select(
        F.lit(SOURCE).alias("source"),
        F.lit("shop").alias("database"),
        F.lit("orders").alias("table"),
        F.lit("insert").alias("op"),
        (F.lit(base_ts) + F.col("id") * 4).alias("commit_ts"),
        F.concat(F.lit("["), order_id, F.lit("]")).alias("row_key"),
        F.array(F.lit("order_id")).alias("key_columns"),
        F.lit(None).cast("map<string,string>").alias("before"),
        after.alias("after"),
        types.alias("column_types"),
        F.lit(ORDERS.schema_version).alias("schema_version"),
        F.array().cast("array<string>").alias("flags"),
        F.lit("seed").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("id").alias("offset"),
        F.lit(0).alias("event_index"),
        F.lit(1).cast("bigint").alias("silver_seq"),
    )
    rows.select(*ROW_CHANGE_COLUMNS).writeTo(SILVER_ROW_CHANGES).append()


def measure(
    spark, config, protocol: str, registry_url: str | None, schema_snapshot: int, existing_rows: int, ranged: dict
) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.config import decoder_options
    from spark_jobs.runtime.iceberg import main_snapshot
    from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES, ensure_tables
    from spark_jobs.silver import build, merges
    from spark_jobs.silver.decode import DECODED_SCHEMA, decode_batches

    out: dict = {}
    source = config.source(SOURCE)
    snapshot = main_snapshot(spark)
    bronze = (
        spark.read.format("iceberg")
        .option("split-size", build.DECODE_SPLIT_BYTES)  # the splits build_silver decodes
        .option("start-snapshot-id", schema_snapshot)  # the measured run's messages
        .option("end-snapshot-id", snapshot)
        .load(BRONZE_MESSAGES)
        .where(F.col("source") == SOURCE)
    )
    out["read_tasks"] = bronze.rdd.getNumPartitions()

    def noop(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    columns, parse = parse_only_function(protocol, avro_schema_texts(spark, registry_url) if protocol == "avro" else {})
    log.info(
        "%s: parse-only (mapInArrow, %s), %d read tasks",
        protocol,
        "fastavro" if "avro" in protocol else "orjson",
        out["read_tasks"],
    )
    out["parse_s"] = timed("parse-only", lambda: noop(bronze.select(*columns).mapInArrow(parse, "n BIGINT")))

    if protocol == "canal-json":
        log.info("%s: from_json with a schema, posexplode(data)", protocol)
        out["from_json_s"] = timed("from_json", lambda: noop(from_json_frame(bronze)))

    messages = bronze.select("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    if needs_partition_order(protocol):
        messages = messages.repartition("topic", "partition").sortWithinPartitions("topic", "partition", "offset")
        log.info("%s: shuffle-only (repartition by topic/partition, sort by offset)", protocol)
        out["shuffle_s"] = timed("shuffle-only", lambda: noop(messages))

    options = decoder_options(source)
    log.info("%s: decode-only (decode_batches in mapInArrow, noop sink)", protocol)
    primers = build._primers(spark, source) if protocol in build.STATEFUL_PROTOCOLS else []
    decoded = messages.mapInArrow(
        lambda batches: decode_batches(batches, protocol, options, primers), from_arrow_schema(DECODED_SCHEMA)
    )
    out["decode_s"] = timed("decode-only", lambda: noop(decoded))

    ensure_tables(spark, "silver")  # one-time table creation is not part of a run
    log.info("%s: build_silver", protocol)
    with (
        StepTimer(build, ["decode_and_write", "record_run"]) as build_timer,
        StepTimer(merges, [*DECODE_AND_WRITE_MERGES, "expire_pending"]) as merge_timer,
    ):
        started = time.monotonic()
        r = build.build_silver(spark, config, SOURCE)
        out["silver_s"] = time.monotonic() - started
    out["steps"] = {**build_timer.seconds, **merge_timer.seconds}
    log.info("  build_silver: %.1fs (%s)", out["silver_s"], ", ".join(f"{k} {v:.1f}s" for k, v in out["steps"].items()))
    out.update(
        silver_messages=r.messages,
        decoded_messages=r.decoded,
        row_changes=r.row_changes,
        ddl_events=r.ddl_events,
        watermarks=r.watermarks,
        quarantined=r.quarantined,
        waiting=r.waiting,
        events=r.row_changes + r.ddl_events + r.watermarks,
    )
    out["silver_rows"] = spark.sql(
        f"SELECT count(*) FROM {SILVER_ROW_CHANGES} WHERE source = :source", args={"source": SOURCE}
    ).collect()[0][0]
    if existing_rows:
        out.update(into_existing(spark, config, existing_rows))
    if ranged["tables"]:
        out["ranged"] = ranged_writes(spark, ranged["tables"], ranged["rows"], ranged["writes"])
    return out


def into_existing(spark, config, existing_rows: int) -> dict:
    """The measured run once more, the same bronze messages, into a silver that holds `existing_rows` more: the
    run's rows and its record are deleted (the next run decodes the same snapshot again), the rows are seeded,
    and build_silver runs again. Its seconds against the first run's say whether a run's cost grows with silver."""
    from spark_jobs.runtime.tables import SILVER_ROW_CHANGES, SILVER_RUNS
    from spark_jobs.silver import build

    args = {"source": SOURCE}
    seq = spark.sql(f"SELECT max(silver_seq) FROM {SILVER_RUNS} WHERE source = :source", args=args).collect()[0][0]
    for table in (SILVER_ROW_CHANGES, SILVER_RUNS):
        spark.sql(f"DELETE FROM {table} WHERE source = :source AND silver_seq = :seq", args={**args, "seq": seq})
    log.info("seeding %s rows into silver.row_changes", f"{existing_rows:,}")
    started = time.monotonic()
    seed_row_changes(spark, existing_rows)
    seed_s = time.monotonic() - started
    log.info("build_silver into %s existing rows (seeded in %.0fs)", f"{existing_rows:,}", seed_s)
    started = time.monotonic()
    build.build_silver(spark, config, SOURCE)
    seconds = time.monotonic() - started
    log.info("  build_silver into existing rows: %.1fs", seconds)
    return {"existing_rows": existing_rows, "seed_s": seed_s, "silver_into_existing_s": seconds}


def ranged_batch(spark, source: str, tables: int, rows: int, write: int):
    """The `write`th batch of `rows` row changes as decode_and_write hands them to merge_row_changes (the columns
    of DECODED_SCHEMA, then `source`): inserts of orders, one commit each, spread evenly over `tables` tables
    `shop.orders_00`.. in turn (so every task's share holds every table, as a run's Kafka order does), later
    batches at later commit ts."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA

    n = F.col("id") + write * rows  # the row's number across the batches
    order_id, after, types = order_images(n)
    values = {
        "topic": F.lit(TOPIC),
        "partition": n % PARTITIONS,
        "offset": F.floor(n / PARTITIONS),
        "event_index": F.lit(0),
        "kind": F.lit("row"),
        "op": F.lit("insert"),
        "database": F.lit("shop"),
        "table": F.format_string("orders_%02d", n % tables),
        "commit_ts": F.lit(BASE_MS << 18) + n * 4,
        "row_key": F.concat(F.lit("["), order_id, F.lit("]")),
        "key_columns": F.array(F.lit("order_id")),
        "before": F.lit(None),
        "after": after,
        "column_types": types,
        "schema_version": F.lit(ORDERS.schema_version),
        "ddl_type": F.lit(None),
        "ddl_sql": F.lit(None),
        "table_schema": F.lit(None),
        "flags": F.array(),
        "reason": F.lit(None),
    }
    schema = from_arrow_schema(DECODED_SCHEMA)
    assert set(values) == set(schema.names)
    return spark.range(rows).select(
        *[values[f.name].cast(f.dataType).alias(f.name) for f in schema.fields], F.lit(source).alias("source")
    )


def scan_files(frame) -> tuple[int, int] | None:
    """The data files the Iceberg scan of a query that ran read and skipped (its scan's metrics), through the
    adaptive plan's final stages; None if it has no Iceberg scan."""
    from spark_jobs.runtime.jvm import java_items

    nodes = [frame._jdf.queryExecution().executedPlan()]
    while nodes:
        node = nodes.pop()
        metrics = node.metrics()
        if metrics.contains("resultDataFiles"):
            return int(metrics.apply("resultDataFiles").value()), int(metrics.apply("skippedDataFiles").value())
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            nodes.append(node.executedPlan())
        elif kind.endswith("QueryStageExec"):
            nodes.append(node.plan())
        nodes.extend(java_items(node.children()))
    return None


def ranged_writes(spark, tables: int, rows: int, writes: int) -> dict:
    """A large run written one file a task and in ranges of tables (merges.RANGED_FROM_ROWS), alternated, then
    one table's read of each way's writes. Each way writes under its own source (RANGED_WAYS): silver.row_changes
    is partitioned by source, so each way's writes, their check for copies and its read see only that way's
    files, as if in a table of its own, and neither sees the measured run's rows; both reads plan the same
    number of rows in the same partition layout, so they compare."""
    from statistics import median

    from spark_jobs.runtime.tables import SILVER_ROW_CHANGES
    from spark_jobs.silver import merges

    one_file, ranged = RANGED_WAYS
    log.info(
        "ranges of tables: %d writes of %s row changes over %d tables each way (%s, %s), alternated",
        writes,
        f"{rows:,}",
        tables,
        one_file,
        ranged,
    )
    write_s: dict[str, list[float]] = {way: [] for way in RANGED_WAYS}
    for write in range(writes):
        lowest = (BASE_MS << 18) + write * rows * 4  # the batch's lowest commit ts
        for way, source in RANGED_WAYS.items():
            batch = ranged_batch(spark, source, tables, rows, write).cache()
            batch.count()  # made and cached before the clock starts, as decode_and_write's decoded rows are
            saved = merges.RANGED_FROM_ROWS
            if way == one_file:
                merges.RANGED_FROM_ROWS = rows + 1  # the ranged write switched off
            try:
                started = time.monotonic()
                merges.merge_row_changes(spark, source, batch, write + 1, lowest, tables, rows)
                write_s[way].append(time.monotonic() - started)
            finally:
                merges.RANGED_FROM_ROWS = saved
                batch.unpersist()
            log.info(
                "  %s, write %d/%d%s: %.2fs",
                way,
                write + 1,
                writes,
                " (warm-up)" if write == 0 else "",
                write_s[way][-1],
            )
    table = f"orders_{min(3, tables - 1):02d}"
    query = (
        f"SELECT count(*), max(after['total']), max(after['quantity']) FROM {SILVER_ROW_CHANGES} "
        "WHERE source = :source AND database = 'shop' AND `table` = :table"
    )
    read_s: dict[str, list[float]] = {way: [] for way in RANGED_WAYS}
    files: dict[str, tuple[int, int] | None] = {}
    answers: dict[str, list] = {}
    for i in range(RANGED_READS):
        for way, source in RANGED_WAYS.items():
            frame = spark.sql(query, args={"source": source, "table": table})
            started = time.monotonic()
            answer = frame.collect()[0]
            read_s[way].append(time.monotonic() - started)
            files[way], answers[way] = scan_files(frame), list(answer)
            log.info("  %s, read of shop.%s %d/%d: %.2fs", way, table, i + 1, RANGED_READS, read_s[way][-1])
    out: dict = {"tables": tables, "rows": rows, "writes": writes, "table": table, "ways": {}}
    for way in RANGED_WAYS:
        scanned, skipped = files[way] or (None, None)
        out["ways"][way] = {
            "write_s": write_s[way],
            "write_median_s": median(write_s[way][1:] or write_s[way]),  # the first write is a warm-up
            "read_s": median(read_s[way]),
            "files_scanned": scanned,
            "files_skipped": skipped,
            "rows_read": answers[way][0],
        }
        log.info(
            "  %s: write %.2fs (median after the warm-up), read %.2fs, %s files scanned, %s skipped (%s rows)",
            way,
            out["ways"][way]["write_median_s"],
            out["ways"][way]["read_s"],
            scanned,
            skipped,
            f"{answers[way][0]:,}",
        )
    if answers[one_file] != answers[ranged]:
        log.warning("  the two ways' reads differ: %s against %s", answers[one_file], answers[ranged])
    out["write_ratio"] = out["ways"][ranged]["write_median_s"] / out["ways"][one_file]["write_median_s"]
    out["read_ratio"] = out["ways"][ranged]["read_s"] / out["ways"][one_file]["read_s"]
    return out


# ---- the parent: one subprocess per protocol, then the table -------------------------------------------


def run_protocol(protocol: str, n: int, existing_rows: int, ranged: dict) -> dict | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", protocol, "--messages", str(n)]
    cmd += ["--existing-rows", str(existing_rows)]
    if ranged["tables"]:
        cmd += ["--ranged-tables", str(ranged["tables"]), "--ranged-rows", str(ranged["rows"])]
        cmd += ["--ranged-writes", str(ranged["writes"])]
    return run_child(cmd, RESULT_PREFIX, protocol)


def _rate(events: int, seconds: float | None) -> float | None:
    return events / seconds if seconds else None


def _fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def report(results: list[dict]) -> None:
    print()
    print("events/s = events decoded by build_silver / wall seconds of each pass over the same bronze rows;")
    print(f"references best of {REPEATS}, build_silver once; Spark local[2] on a shared 2-core machine (noisy).")
    header = (
        f"{'protocol':<12} {'messages':>9} {'events':>10} {'parse-only/s':>13} {'from_json/s':>12} {'decode-only/s':>14} "
        f"{'build_silver/s':>15} {'dec/parse':>10} {'silver/parse':>13} {'silver/from_json':>17}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        e = r["events"]
        parse, fj, dec, silver = (_rate(e, r.get(k)) for k in ("parse_s", "from_json_s", "decode_s", "silver_s"))
        print(
            f"{r['protocol']:<12} {r['messages']:>9,} {e:>10,} {_fmt(parse, ',.0f'):>13} {_fmt(fj, ',.0f'):>12} "
            f"{_fmt(dec, ',.0f'):>14} {_fmt(silver, ',.0f'):>15} {_fmt(dec / parse if dec and parse else None, '.2f'):>10} "
            f"{_fmt(silver / parse if silver and parse else None, '.2f'):>13} "
            f"{_fmt(silver / fj if silver and fj else None, '.2f'):>17}"
        )
    print()
    print("goal: build_silver >= 0.60 x parse-only and >= 1.5 x from_json (Canal-JSON)")
    for r in results:
        e, parse_rate = r["events"], _rate(r["events"], r["parse_s"])
        verdicts = [
            f"{r['silver_s'] and (e / r['silver_s']) / parse_rate:.2f} x parse-only "
            f"({'met' if (e / r['silver_s']) / parse_rate >= 0.6 else 'NOT met'})"
        ]
        if r.get("from_json_s"):
            ratio = (e / r["silver_s"]) / (e / r["from_json_s"])
            verdicts.append(f"{ratio:.2f} x from_json ({'met' if ratio >= 1.5 else 'NOT met'})")
        print(f"  {r['protocol']:<12} {'; '.join(verdicts)}")
    for r in results:
        if r.get("existing_rows"):
            ratio = r["silver_into_existing_s"] / r["silver_s"]
            print(
                f"  {r['protocol']:<12} flat in table size: the same run into {r['existing_rows']:,} more rows took "
                f"{r['silver_into_existing_s']:.1f}s against {r['silver_s']:.1f}s: {ratio:.2f}x "
                f"({'met' if ratio <= 1.3 else 'NOT met'}; goal <= 1.3)"
            )
    for r in results:
        if r.get("ranged"):
            g = r["ranged"]
            print(
                f"  {r['protocol']:<12} ranges of tables: {g['writes']} writes of {g['rows']:,} row changes over "
                f"{g['tables']} tables each way, alternated (the first a warm-up), then shop.{g['table']}'s read "
                f"(median of {RANGED_READS}):"
            )
            for way, w in g["ways"].items():
                print(
                    f"  {'':<12}   {way:<17} write {w['write_median_s']:.2f}s "
                    f"({', '.join(f'{s:.2f}' for s in w['write_s'])} s), read {w['read_s']:.2f}s "
                    f"({w['files_scanned']} files scanned, {w['files_skipped']} skipped; {w['rows_read']:,} rows)"
                )
            print(f"  {'':<12}   ranges / one file a task: write {g['write_ratio']:.2f}x, read {g['read_ratio']:.2f}x")
    print()
    print("where the time goes (seconds; build_silver steps timed inside the run):")
    for r in results:
        s = r["steps"]
        write = sum(s.get(k, 0.0) for k in DECODE_AND_WRITE_MERGES)
        decode_step = s.get("decode_and_write", 0.0) - write
        other = r["silver_s"] - s.get("decode_and_write", 0.0)
        print(
            f"  {r['protocol']:<12} build_silver {r['silver_s']:.1f}s = decode, cache and count {decode_step:.1f}s "
            f"({100 * decode_step / r['silver_s']:.0f}%) + MERGE rows {s.get('merge_row_changes', 0.0):.1f}s "
            f"({100 * s.get('merge_row_changes', 0.0) / r['silver_s']:.0f}%) + other MERGEs "
            f"{write - s.get('merge_row_changes', 0.0):.1f}s + setup, expire, finish {other:.1f}s"
        )
        print(
            f"  {'':<12} noop passes: parse-only {r['parse_s']:.1f}s, "
            + (f"shuffle-only {r['shuffle_s']:.1f}s, " if r.get("shuffle_s") else "")
            + f"decode-only {r['decode_s']:.1f}s (decode itself ~{max(0.0, r['decode_s'] - r.get('shuffle_s', 0.0)):.1f}s)"
            + (f", from_json {r['from_json_s']:.1f}s" if r.get("from_json_s") else "")
            + f"; {r['read_tasks']} bronze read tasks"
        )
        if r.get("profile"):
            pr = r["profile"]
            print(
                f"  {'':<12} decode_batches alone, in one Python process on {pr['rows']:,} of these rows: "
                f"{pr['events'] / pr['plain_s']:,.0f} events/s on one core; its parts timed: "
                + ", ".join(f"{k} {100 * v:.0f}%" for k, v in pr["shares"].items() if v >= 0.005)
            )
        print(
            f"  {'':<12} {r['messages']:,} messages ({r['bronze_bytes'] / 1e6:.0f} MB) -> {r['row_changes']:,} row changes, "
            f"{r['ddl_events']} DDL, {r['watermarks']:,} watermarks, {r['quarantined']} quarantined, "
            f"{r['waiting']} waiting; silver.row_changes {r['silver_rows']:,} rows; "
            f"generation: encode {r['encode_s']:.0f}s, bronze append {r['land_s']:.0f}s"
        )


def summary(results: list[dict]) -> list[dict]:
    """`make bench`'s lines: build_silver against parse-only (and from_json, and itself into a larger silver)."""
    rows = []
    for r in results:
        e = r["events"]
        silver, case = e / r["silver_s"], f"{r['protocol']}, {r['messages']:,} messages"
        rows.append(
            summary_row(
                "silver",
                case,
                f"{silver:,.0f} events/s",
                f"parse-only {e / r['parse_s']:,.0f}/s",
                r["parse_s"] / r["silver_s"],
                ">= 0.6",
            )
        )
        if r.get("from_json_s"):
            rows.append(
                summary_row(
                    "silver",
                    case,
                    f"{silver:,.0f} events/s",
                    f"from_json {e / r['from_json_s']:,.0f}/s",
                    r["from_json_s"] / r["silver_s"],
                    ">= 1.5",
                )
            )
        if r.get("existing_rows"):
            rows.append(
                summary_row(
                    "silver",
                    f"the same run into {r['existing_rows']:,} more rows",
                    f"{r['silver_into_existing_s']:.1f} s",
                    f"into the smaller silver {r['silver_s']:.1f} s",
                    r["silver_into_existing_s"] / r["silver_s"],
                    "<= 1.3",
                )
            )
        if r.get("ranged"):
            g = r["ranged"]
            one, ranged = (g["ways"][way] for way in RANGED_WAYS)
            rows.append(
                summary_row(
                    "silver",
                    f"{g['rows']:,} row changes over {g['tables']} tables written in ranges of tables",
                    f"{ranged['write_median_s']:.2f} s a write",
                    f"one file a task {one['write_median_s']:.2f} s",
                    g["write_ratio"],
                )
            )
            rows.append(
                summary_row(
                    "silver",
                    f"one table's read of {g['writes']} such writes in ranges of tables",
                    f"{ranged['read_s']:.2f} s ({ranged['files_scanned']} files)",
                    f"one file a task {one['read_s']:.2f} s ({one['files_scanned']} files)",
                    g["read_ratio"],
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="bronze messages per protocol (default 1,000,000)"
    )
    parser.add_argument(
        "--protocols", default=",".join(PROTOCOLS), help=f"comma-separated (default {','.join(PROTOCOLS)})"
    )
    parser.add_argument(
        "--existing-rows",
        type=int,
        default=10_000_000,
        help="Canal-JSON's run is repeated into a silver holding this many more rows (default 10,000,000; 0: not)",
    )
    parser.add_argument(
        "--ranged-tables",
        type=int,
        default=0,
        help="Canal-JSON also measures a large run written one file a task and in ranges of tables, spread over "
        "this many tables (default 0: not)",
    )
    parser.add_argument(
        "--ranged-rows", type=int, default=120_000, help="row changes a write, with --ranged-tables (default 120,000)"
    )
    parser.add_argument(
        "--ranged-writes",
        type=int,
        default=4,
        help="writes each way, the first a warm-up, with --ranged-tables (default 4)",
    )
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one protocol, print a JSON line
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )

    if args.ranged_tables and (args.ranged_tables < 2 or args.ranged_writes < 2):
        parser.error("--ranged-tables needs at least 2 tables and --ranged-writes at least 2 (one is a warm-up)")
    ranged = {"tables": args.ranged_tables, "rows": args.ranged_rows, "writes": args.ranged_writes}

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `with`/`finally` clean-ups
    if args.one:
        canal = args.one == "canal-json"
        result = one_protocol(
            args.one, args.messages, args.existing_rows if canal else 0, ranged if canal else {**ranged, "tables": 0}
        )
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocol {unknown[0]!r}; allowed: {', '.join(PROTOCOLS)}")
    results, failed = [], []
    for protocol in protocols:
        r = run_protocol(protocol, args.messages, args.existing_rows, ranged)
        (results if r is not None else failed).append(r if r is not None else protocol)
    if results:
        report(results)
        write_summary(args.json, summary(results))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
