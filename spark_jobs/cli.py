"""`ticdc-lake`: decode messages, check the config, run one pipeline step, maintain the tables, run the demo."""

from __future__ import annotations

import argparse
import base64
import contextlib
import sys
from pathlib import Path

import orjson

from spark_jobs.codecs import PROTOCOLS, DecodeError, make_decoder
from spark_jobs.errors import ConfigError, TransientFault
from spark_jobs.runtime.logs import configure_logging
from spark_jobs.runtime.rebuild import LAYERS

EXIT_TRANSIENT = 75  # EX_TEMPFAIL: try again later


def _parse_option(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, _, value = text.partition("=")
    return key.strip(), value.strip()


def _event_line(event) -> bytes:
    return orjson.dumps(event.to_dict(), option=orjson.OPT_SORT_KEYS)


def cmd_decode(args) -> int:
    options = dict(args.option or [])
    if args.schema_registry:
        options["schema-registry-url"] = args.schema_registry
    try:
        decoder = make_decoder(args.protocol, options)
    except ConfigError as exc:
        print(f"ticdc-lake decode: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    if args.input:
        messages = _read_input(args.input, args.protocol)
        if isinstance(messages, int):
            return messages
    else:
        if not (args.key_file or args.value_file):
            print("ticdc-lake decode: give --input FILE, or --key-file and/or --value-file", file=sys.stderr)
            return 2
        key = Path(args.key_file).read_bytes() if args.key_file else None
        value = Path(args.value_file).read_bytes() if args.value_file else None
        messages = [("the message", key, value)]
    for where, key, value in messages:
        try:
            events = decoder.decode(key, value, None)
        except DecodeError as exc:
            print(f"ticdc-lake decode: {where}: {exc}", file=sys.stderr)
            return 1
        for event in events:
            out.write(_event_line(event) + b"\n")
    out.flush()
    return 0


def _read_input(path: str, protocol: str):
    """JSON lines {"key": base64|null, "value": base64|null, "partition": n, "offset": n}."""
    messages = []
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        print(f"ticdc-lake decode: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            key = base64.b64decode(doc["key"], validate=True) if doc.get("key") is not None else None
            value = base64.b64decode(doc["value"], validate=True) if doc.get("value") is not None else None
        except Exception as exc:
            print(
                f"ticdc-lake decode: {path} line {number}: not a message line ({exc.__class__.__name__}: {exc})",
                file=sys.stderr,
            )
            return 2
        where = f"{path} line {number} (partition {doc.get('partition')}, offset {doc.get('offset')})"
        messages.append((where, key, value))
    return messages


_HELD = contextlib.ExitStack()  # the source's lock, held until the process ends (the kernel drops it then)


def _pipeline(args, writes: bool = True):
    """The config and a Spark session for one source; a command that writes holds the source's lock first, so it
    waits while another run of the source (a rebuild, an ingest task) writes."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime.lock import source_lock
    from spark_jobs.runtime.spark_session import get_spark

    config = load_config(args.config)
    config.source(args.source)
    if writes:
        _HELD.enter_context(source_lock(config.local_dir, args.source, f"ticdc-lake {args.command}"))
    return config, get_spark(config, f"ticdc-lake {args.command} {args.source}")


def cmd_land(args) -> int:
    from spark_jobs.bronze.land import land_bronze

    config, spark = _pipeline(args)
    land_bronze(spark, config, args.source)
    return 0


def cmd_silver(args) -> int:
    from spark_jobs.silver.build import build_silver, rebuild_silver

    config, spark = _pipeline(args)
    (rebuild_silver if args.rebuild else build_silver)(spark, config, args.source)
    return 0


def cmd_gold(args) -> int:
    from spark_jobs.gold.build import build_gold

    config, spark = _pipeline(args)
    result = build_gold(spark, config, args.source, test=not args.skip_tests, rebuild=args.rebuild)
    print(
        f"{args.source}: {len(result.tables)} gold tables consistent as of TiDB ts {result.consistent_ts}"
        f" ({result.consistency}), {sum(result.tables.values())} rows; {result.seconds:.1f}s"
    )
    for table in result.needing_snapshot:
        print(f"  {table} needs a fresh snapshot (see the log)")
    return 0


def cmd_run(args) -> int:
    from spark_jobs.bronze.land import land_bronze
    from spark_jobs.gold.build import build_gold
    from spark_jobs.silver.build import build_silver

    config, spark = _pipeline(args)
    land_bronze(spark, config, args.source)
    build_silver(spark, config, args.source)
    build_gold(spark, config, args.source)
    return 0


def cmd_quarantine(args) -> int:
    """List quarantined messages (counts by source and reason, then the messages), or replay them."""
    from pyspark.sql import functions as F

    from spark_jobs.config import load_config
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import SILVER_QUARANTINE, ensure_tables
    from spark_jobs.silver.build import replay_quarantine

    config = load_config(args.config)
    sources = [config.source(args.source).name] if args.source else [s.name for s in config.sources]
    spark = get_spark(config, f"ticdc-lake quarantine {args.action}")
    ensure_tables(spark, "silver")
    quarantined = spark.table(SILVER_QUARANTINE).where(F.col("source").isin(sources))
    if args.action == "replay":
        for name in sources:
            before = quarantined.where(F.col("source") == name).count()
            result = replay_quarantine(spark, config, name)
            print(
                f"{name}: {before} quarantined, {result.decoded} decoded and moved into silver, {result.quarantined} still quarantined"
            )
        return 0
    counts = (
        quarantined.groupBy("source", "reason")
        .agg(F.count("*").alias("n"))
        .orderBy("source", F.col("n").desc())
        .collect()
    )
    if not counts:
        print("quarantine is empty")
        return 0
    print(f"{'source':16} {'messages':>8}  reason")
    for r in counts:
        print(f"{r['source']:16} {r['n']:>8}  {r['reason']}")
    print()
    listed = (
        quarantined.select("source", "topic", "partition", "offset", "quarantined_at", "reason")
        .orderBy("source", "topic", "partition", "offset")
        .limit(args.limit)
        .collect()
    )
    for r in listed:
        print(
            f"{r['source']} {r['topic']}[{r['partition']}]@{r['offset']} ({r['quarantined_at']:%Y-%m-%d %H:%M:%S}): {r['reason']}"
        )
    return 0


def cmd_maintain(args) -> int:
    """Compact, expire and clean the tables; one line per table, then the totals."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime.maintenance import maintain, summary_line
    from spark_jobs.runtime.spark_session import get_spark

    config = load_config(args.config)
    if args.source:
        config.source(args.source)
    results = maintain(get_spark(config, "ticdc-lake maintain"), config, args.source)
    for result in results:
        print(result.line())
    print(f"maintenance: {summary_line(results)}")
    return 0


def cmd_as_of(args) -> int:
    """A table's rows at a TiDB timestamp or time, from its history table."""
    import datetime as dt

    from spark_jobs.gold.history import as_of, split_table, ts_at

    try:
        database, table = split_table(args.table)
        ts = args.ts if args.ts is not None else ts_at(dt.datetime.fromisoformat(args.time))
        _, spark = _pipeline(args, writes=False)
        rows = as_of(spark, args.source, database, table, ts)
    except ValueError as exc:
        print(f"ticdc-lake as-of: {exc}", file=sys.stderr)
        return 2
    rows.show(args.limit, truncate=False)
    print(f"{database}.{table} as of TiDB ts {ts}: {rows.count()} rows")
    return 0


def cmd_rebuild(args) -> int:
    """Rebuild a layer of a source from the one below; one line says what it holds now."""
    from spark_jobs.runtime.rebuild import parse_tables, rebuild_layer

    tables = parse_tables(",".join(args.table)) if args.table else None
    config, spark = _pipeline(args)
    print(rebuild_layer(spark, config, args.source, args.layer, tables))
    return 0


def cmd_backfill_snapshot(args) -> int:
    """Load a Dumpling export into silver at its TSO; a progress bar on a terminal, one line at the end."""
    from spark_jobs.backfill.dumpling import CsvOptions
    from spark_jobs.backfill.snapshot import load_snapshot, progress_bar
    from spark_jobs.runtime.rebuild import parse_tables

    tables = parse_tables(",".join(args.tables)) if args.tables else None
    csv = CsvOptions.typed(
        args.csv_separator,
        args.csv_delimiter,
        args.csv_null_value,
        args.csv_line_terminator,
        not args.no_header,
        args.escape_backslash,
    )
    config, spark = _pipeline(args)
    result = load_snapshot(
        spark,
        config,
        args.source,
        args.from_location,
        tables,
        csv,
        force=args.force,
        progress=progress_bar() if sys.stderr.isatty() else None,
    )
    print(result.line())
    for table, rows in result.tables.items():
        print(f"  {table}: {rows} rows")
    return 0


def cmd_config(args) -> int:
    from spark_jobs.config import load_config

    config = load_config(args.config)
    print(f"{config.path}: valid; mode {config.runtime.mode}, local directory {config.local_dir}")
    for s in config.sources:
        topics = ", ".join(s.topics) if s.topics else f"pattern {s.topic_pattern}"
        print(f"  source {s.name}: {s.protocol} from {topics} at {s.kafka.bootstrap_servers}")
    return 0


def cmd_demo(args) -> int:
    from spark_jobs.devkit.demo import run_demo

    return run_demo(args.config)


def cmd_cluster(args) -> int:
    from spark_jobs.config import DEFAULT_CONFIG
    from spark_jobs.devkit.cluster import DEFAULT_DIRECTORY, LoopbackCluster

    cluster = LoopbackCluster(Path(args.dir) if args.dir else DEFAULT_DIRECTORY)
    if args.action == "up":
        try:
            cluster.up(Path(args.config) if args.config else DEFAULT_CONFIG, airflow=args.airflow)
        except RuntimeError as exc:  # already running, or a service that did not start (its log named)
            print(f"ticdc-lake cluster up: {exc}", file=sys.stderr)
            return 1
        print(f"loopback cluster up; its configuration: {cluster.config_path}")
    elif args.action == "down":
        stopped = cluster.down()
        print(f"stopped {len(stopped)} services: {', '.join(stopped) or 'none were running'}")
        return 0
    if not cluster.services:
        print(f"no loopback cluster in {cluster.directory} (`ticdc-lake cluster up` starts one)")
        return 1
    running = cluster.running()
    for name, service in cluster.services.items():
        state = "running" if running[name] else "stopped"
        port = f"port {service.port}" if service.port else ""
        print(f"  {name:<22} {state:<8} pid {service.pid:<7} {port:<11} log {service.log}")
    return 0 if all(running.values()) else 1


def cmd_pack_env(args) -> int:
    from spark_jobs.runtime.executor_env import pack_executor_env

    archive = pack_executor_env(Path(args.output).resolve())
    print(f"{archive}: {archive.stat().st_size / 1e6:.0f} MB; set runtime.spark.executor_env to it")
    return 0


def cmd_thrift_server(args) -> int:
    import os

    from spark_jobs.config import load_config
    from spark_jobs.runtime.thrift_server import spark_home, thrift_server_command

    command = thrift_server_command(load_config(args.config), args.cores)
    os.environ.setdefault("SPARK_HOME", str(spark_home()))
    os.execv(command[0], command)  # the server in this process: a container's or supervisor's signals reach it


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ticdc-lake", description="TiCDC change streams into Apache Iceberg.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("decode", help="decode TiCDC messages into canonical change events (JSON lines)")
    p.add_argument("--protocol", required=True, choices=PROTOCOLS)
    p.add_argument("--option", action="append", type=_parse_option, metavar="KEY=VALUE", help="a protocol option")
    p.add_argument("--schema-registry", metavar="URL", help="Confluent Schema Registry (avro)")
    p.add_argument("--key-file", help="one message's key bytes")
    p.add_argument("--value-file", help="one message's value bytes")
    p.add_argument("--input", help="JSON lines {key, value (base64 or null), partition, offset}, decoded in order")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("config", help="validate the configuration and show its sources")
    p.add_argument("--config", help="the config file (default: $TICDC_LAKE_CONFIG or config/pipeline.yaml)")
    p.set_defaults(func=cmd_config)

    for name, func, text in (
        ("land", cmd_land, "land new Kafka records into bronze"),
        ("silver", cmd_silver, "decode new bronze records into silver"),
        ("gold", cmd_gold, "build the gold tables with dbt"),
        ("run", cmd_run, "land, decode and build gold once"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--source", required=True)
        p.add_argument("--config")
        if name == "gold":
            p.add_argument("--skip-tests", action="store_true", help="do not run the dbt tests after building")
            p.add_argument(
                "--rebuild",
                action="store_true",
                help="every gold and history table from silver (= rebuild gold+history)",
            )
        if name == "silver":
            p.add_argument(
                "--rebuild",
                action="store_true",
                help="clear the source's silver, decode all of bronze (= rebuild silver)",
            )
        p.set_defaults(func=func)

    p = sub.add_parser("quarantine", help="list quarantined messages, or decode them again after a fix")
    p.add_argument("action", choices=("list", "replay"))
    p.add_argument("--source", help="one source (default: all)")
    p.add_argument("--config")
    p.add_argument("--limit", type=int, default=50, help="messages to list")
    p.set_defaults(func=cmd_quarantine)

    p = sub.add_parser(
        "maintain", help="compact, expire snapshots and remove orphan files of every table; drop stale landing branches"
    )
    p.add_argument("--source", help="only this source's gold tables (bronze and silver are shared: always)")
    p.add_argument("--config")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("rebuild", help="rebuild silver (from bronze), gold or history (from silver) of a source")
    p.add_argument("layer", choices=LAYERS)
    p.add_argument("--source", required=True)
    p.add_argument(
        "--table",
        action="append",
        help="gold or history only: database.table (`a.b`.`c` for dots; repeat or separate by commas); default: all",
    )
    p.add_argument("--config")
    p.set_defaults(func=cmd_rebuild)

    p = sub.add_parser("as-of", help="a table's rows as they were at a TiDB timestamp or time, from its history")
    p.add_argument("--source", required=True)
    p.add_argument("--table", required=True, help="database.table as upstream names it (`a.b`.`c` for dots)")
    moment = p.add_mutually_exclusive_group(required=True)
    moment.add_argument("--ts", type=int, help="a TiDB timestamp (TSO)")
    moment.add_argument("--time", help="an ISO time (UTC unless it says): every commit up to that millisecond")
    p.add_argument("--limit", type=int, default=50, help="rows to show")
    p.add_argument("--config")
    p.set_defaults(func=cmd_as_of)

    p = sub.add_parser("backfill", help="load what the change stream cannot give: a Dumpling export")
    kinds = p.add_subparsers(dest="backfill", required=True)
    p = kinds.add_parser("snapshot", help="load a Dumpling export into silver at its TSO (the changefeed's start)")
    p.add_argument("--source", required=True)
    p.add_argument("--from", dest="from_location", required=True, metavar="PATH_OR_URL", help="the export directory")
    p.add_argument("--tables", action="append", help="database.table,... (default: every table of the export)")
    p.add_argument("--force", action="store_true", help="load even though gold is published past the export's TSO")
    p.add_argument("--csv-separator", default=",", help="Dumpling's --csv-separator (default ,)")
    p.add_argument("--csv-delimiter", default='"', help="Dumpling's --csv-delimiter (default \")")
    p.add_argument("--csv-null-value", default="\\N", help="Dumpling's --csv-null-value (default \\N)")
    p.add_argument("--csv-line-terminator", default="\\r\\n", help="Dumpling's --csv-line-terminator (default \\r\\n)")
    p.add_argument(
        "--no-header", action="store_true", help="the CSV files have no header line (Dumpling's --no-header)"
    )
    p.add_argument(
        "--escape-backslash",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="values escaped with backslashes, as Dumpling's --escape-backslash (default on)",
    )
    p.add_argument("--config")
    p.set_defaults(func=cmd_backfill_snapshot)

    p = sub.add_parser("demo", help="the embedded demo: broker, change stream, pipeline DAG, gold tables")
    p.add_argument("--config")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("cluster", help="a loopback cluster of the real services, for cluster mode on one machine")
    p.add_argument("action", choices=("up", "status", "down"))
    p.add_argument("--dir", help="the cluster's directory (default .local/cluster in the checkout)")
    p.add_argument("--config", help="up: the configuration whose sources the cluster runs (default: the embedded one)")
    p.add_argument("--no-airflow", dest="airflow", action="store_false", help="up: without Airflow's services")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("thrift-server", help="run the Spark Thrift Server for dbt (cluster mode), in the foreground")
    p.add_argument("--config")
    p.add_argument("--cores", type=int, default=1, help="the most cores it holds on the cluster (default 1)")
    p.set_defaults(func=cmd_thrift_server)

    p = sub.add_parser("pack-env", help="pack the executors' Python environment for cluster mode (spark.archives)")
    p.add_argument("output", help="the archive to write (.tar.gz)")
    p.set_defaults(func=cmd_pack_env)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"ticdc-lake {args.command}: {exc}", file=sys.stderr)
        return 2
    except TransientFault as exc:  # a service down or refusing credentials: retry later, nothing was written
        print(f"ticdc-lake {args.command}: {exc}", file=sys.stderr)
        return EXIT_TRANSIENT


if __name__ == "__main__":
    sys.exit(main())
