"""`ticdc-lake`: decode messages, check the config, run one pipeline step, maintain the tables.

Each command parses its arguments, makes one call to a step (`spark_jobs.steps`) and prints the result's lines.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from spark_jobs import steps
from spark_jobs.codecs import PROTOCOLS
from spark_jobs.errors import ConfigError, DecodeError, ErasureRefused, TransientFault
from spark_jobs.runtime.logs import configure_logging
from spark_jobs.runtime.results import Result

EXIT_TRANSIENT = 75  # EX_TEMPFAIL: try again later


def _parse_option(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, _, value = text.partition("=")
    return key.strip(), value.strip()


def _printed(result: Result) -> int:
    for line in result.lines():
        print(line)
    return 0


def cmd_decode(args) -> int:
    options = dict(args.option or [])
    if args.schema_registry:
        options["schema-registry-url"] = args.schema_registry
    if args.input:
        messages = _read_input(args.input)
    elif args.key_file or args.value_file:
        key = Path(args.key_file).read_bytes() if args.key_file else None
        value = Path(args.value_file).read_bytes() if args.value_file else None
        messages = [("the message", key, value)]
    else:
        raise ConfigError("give --input FILE, or --key-file and/or --value-file")
    out = sys.stdout.buffer
    for where, decoded in steps.decode_messages(args.protocol, options, messages):
        if isinstance(decoded, DecodeError):
            out.flush()
            print(f"ticdc-lake decode: {where}: {decoded}", file=sys.stderr)
            return 1
        for event in decoded:
            out.write(orjson.dumps(event.to_dict(), option=orjson.OPT_SORT_KEYS) + b"\n")
    out.flush()
    return 0


def _read_input(path: str) -> list[tuple[str, bytes | None, bytes | None]]:
    """JSON lines {"key": base64|null, "value": base64|null, "partition": n, "offset": n}."""
    messages = []
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            key = base64.b64decode(doc["key"], validate=True) if doc.get("key") is not None else None
            value = base64.b64decode(doc["value"], validate=True) if doc.get("value") is not None else None
        except Exception as exc:
            raise ConfigError(f"{path} line {number}: not a message line ({exc.__class__.__name__}: {exc})") from None
        where = f"{path} line {number} (partition {doc.get('partition')}, offset {doc.get('offset')})"
        messages.append((where, key, value))
    return messages


def cmd_config(args) -> int:
    return _printed(steps.check_config(args.config))


def cmd_land(args) -> int:
    return _printed(steps.land(args.source, args.config))


def cmd_silver(args) -> int:
    if args.rebuild:
        return _printed(steps.rebuild({"source": args.source, "layer": "silver"}, args.config))
    return _printed(steps.decode(args.source, args.config))


def cmd_gold(args) -> int:
    return _printed(
        steps.publish_gold(
            args.source, args.config, rebuild=args.rebuild, test=not args.skip_tests, full_check=args.check_all
        )
    )


def cmd_run(args) -> int:
    if args.continuous:
        return _printed(
            steps.run_continuously(args.source, args.config, interval=args.interval, max_batches=args.max_batches)
        )
    if args.max_batches is not None:
        raise ConfigError("--max-batches needs --continuous")
    return _printed(steps.run_once(args.source, args.config))


def _seconds(text: str) -> float:
    """A duration: seconds, or a number with the unit s, m or h (`10s`, `1.5m`)."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"a duration such as 10s, 2m or 30 (seconds), got {text!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return seconds


def cmd_quarantine(args) -> int:
    if args.action == "replay":
        return _printed(steps.quarantine_replay(args.source, args.config))
    return _printed(steps.quarantine_list(args.source, args.limit, args.config))


def cmd_maintain(args) -> int:
    return _printed(steps.maintain(args.source, args.config))


def cmd_as_of(args) -> int:
    try:
        result = steps.as_of(args.source, args.table, ts=args.ts, time=args.time, limit=args.limit, config=args.config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return _printed(result)


def cmd_reconcile(args) -> int:
    """Exit 1 when a table differs from the upstream (the outcome is recorded either way)."""
    result = steps.reconcile(
        args.source,
        args.against,
        args.config,
        tables=",".join(args.tables) if args.tables else None,
        diff=args.diff,
        ts=args.ts,
        csv={f.name: getattr(args, f.name) for f in steps.CSV_FIELDS},
        fail_on_mismatch=False,
    )
    _printed(result)
    return 1 if result.mismatched else 0


def cmd_rebuild(args) -> int:
    tables = ",".join(args.table) if args.table else None
    return _printed(steps.rebuild({"source": args.source, "layer": args.layer, "tables": tables}, args.config))


def cmd_erase(args) -> int:
    params = {"source": args.source, "table": args.table, "key": args.key, "requested_by": args.by}
    return _printed(steps.erase(params, args.config))


def cmd_backfill_snapshot(args) -> int:
    """A progress bar on a terminal, one line at the end and one per table."""
    params = {
        "from": args.from_location,
        "tables": ",".join(args.tables) if args.tables else None,
        "force": args.force,
        **{f.name: getattr(args, f.name) for f in steps.CSV_FIELDS},
    }
    progress = progress_bar() if sys.stderr.isatty() else None
    result = steps.load_snapshot(args.source, params, args.config, progress=progress)
    print(result.line())
    for table, rows in result.tables.items():
        print(f"  {table}: {rows} rows")
    return 0


def progress_bar(stream=sys.stderr):
    """A one-line progress bar for a terminal: files, rows, rows/s."""

    def show(done: int, files: int, rows: int, seconds: float) -> None:
        width = 30
        filled = int(width * done / files) if files else width
        rate = rows / seconds if seconds else 0.0
        end = "\n" if done >= files else ""
        stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{files} files, {rows} rows, {rate:.0f} rows/s{end}"
        )
        stream.flush()

    return show


def cmd_thrift_server(args) -> int:
    steps.serve_thrift(args.config, args.cores)


def cmd_pack_env(args) -> int:
    archive = steps.pack_env(args.output)
    print(f"{archive}: {archive.stat().st_size / 1e6:.0f} MB; set runtime.spark.executor_env to it")
    return 0


def _source_command(sub, name: str, func: Callable, text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=text)
    p.add_argument("--source", required=True)
    p.add_argument("--config")
    p.set_defaults(func=func)
    return p


def _csv_arguments(p: argparse.ArgumentParser) -> None:
    """Dumpling's `--csv-*` options, for a command that reads an export."""
    for field in steps.CSV_FIELDS:
        flag = "--" + field.name.replace("_", "-")
        if isinstance(field.default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=field.help)
        else:
            p.add_argument(flag, default=field.default, help=f"{field.help} (default {field.default})")


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

    _source_command(sub, "land", cmd_land, "land new Kafka records into bronze")
    p = _source_command(sub, "silver", cmd_silver, "decode new bronze records into silver")
    p.add_argument(
        "--rebuild", action="store_true", help="clear the source's silver, decode all of bronze (= rebuild silver)"
    )
    p = _source_command(sub, "gold", cmd_gold, "build the gold tables with dbt")
    p.add_argument("--skip-tests", action="store_true", help="do not run the dbt checks after building")
    p.add_argument(
        "--check-all", action="store_true", help="check every gold and history table whole, not only what changed"
    )
    p.add_argument(
        "--rebuild", action="store_true", help="every gold and history table from silver (= rebuild gold+history)"
    )
    p = _source_command(sub, "run", cmd_run, "land, decode and build gold once (or continuously)")
    p.add_argument(
        "--continuous", action="store_true", help="run in micro-batches in this process until SIGTERM or Ctrl-C"
    )
    p.add_argument(
        "--interval", type=_seconds, default=10.0, help="with --continuous: a batch starts every this often (10s)"
    )
    p.add_argument("--max-batches", type=int, help="with --continuous: stop after this many batches")

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
    p.add_argument("layer", choices=steps.LAYERS)
    p.add_argument("--source", required=True)
    p.add_argument(
        "--table",
        action="append",
        help="gold or history only: database.table (`a.b`.`c` for dots; repeat or separate by commas); default: all",
    )
    p.add_argument("--config")
    p.set_defaults(func=cmd_rebuild)

    p = sub.add_parser(
        "erase", help="remove every row and version of one key of a table from bronze, silver, gold, history, daily"
    )
    p.add_argument("--source", required=True)
    p.add_argument("--table", required=True, help="database.table as upstream names it (`a.b`.`c` for dots)")
    p.add_argument("--key", required=True, help="the key's columns as a JSON object, e.g. '{\"id\": 7}'")
    p.add_argument("--by", default=getpass.getuser(), help="who asks for it (recorded; default: the user)")
    p.add_argument("--config")
    p.set_defaults(func=cmd_erase)

    p = _source_command(sub, "as-of", cmd_as_of, "a table's rows as they were at a TiDB timestamp or time")
    p.add_argument("--table", required=True, help="database.table as upstream names it (`a.b`.`c` for dots)")
    moment = p.add_mutually_exclusive_group(required=True)
    moment.add_argument("--ts", type=int, help="a TiDB timestamp (TSO)")
    moment.add_argument("--time", help="an ISO time (UTC unless it says): every commit up to that millisecond")
    p.add_argument("--limit", type=int, default=50, help="rows to show")

    p = _source_command(sub, "reconcile", cmd_reconcile, "compare the lakehouse with the upstream at a TSO")
    p.add_argument(
        "--against",
        metavar="PATH_OR_URL",
        help="a Dumpling export (at its TSO), mysql://user@host:port (password from $TICDC_UPSTREAM_PASSWORD) "
        "or airflow:CONN_ID (default: the source's reconcile.against)",
    )
    p.add_argument("--tables", action="append", help="database.table,... (default: every table of either side)")
    p.add_argument(
        "--diff", action=argparse.BooleanOptionalAction, default=None, help="list the keys of differing rows"
    )
    p.add_argument("--ts", type=int, help="the TSO to compare a live upstream at (default: gold's consistent ts)")
    _csv_arguments(p)

    p = sub.add_parser("backfill", help="load what the change stream cannot give: a Dumpling export")
    kinds = p.add_subparsers(dest="backfill", required=True)
    p = _source_command(
        kinds,
        "snapshot",
        cmd_backfill_snapshot,
        "load a Dumpling export into silver at its TSO (the changefeed's start)",
    )
    p.add_argument("--from", dest="from_location", required=True, metavar="PATH_OR_URL", help="the export directory")
    p.add_argument("--tables", action="append", help="database.table,... (default: every table of the export)")
    p.add_argument("--force", action="store_true", help="load even though gold is published past the export's TSO")
    _csv_arguments(p)

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
    except (ConfigError, ErasureRefused) as exc:  # nothing was touched
        print(f"ticdc-lake {args.command}: {exc}", file=sys.stderr)
        return 2
    except TransientFault as exc:  # a service down or refusing credentials: retry later, nothing was written
        print(f"ticdc-lake {args.command}: {exc}", file=sys.stderr)
        return EXIT_TRANSIENT


if __name__ == "__main__":
    sys.exit(main())
