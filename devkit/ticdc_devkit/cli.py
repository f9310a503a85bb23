"""`ticdc-kit`: the development kit's commands: the embedded demo and the loopback cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spark_jobs.errors import ConfigError
from spark_jobs.runtime.logs import configure_logging


def cmd_demo(args) -> int:
    from ticdc_devkit.demo import run_demo

    return run_demo(args.config)


def cmd_cluster(args) -> int:
    from spark_jobs.config import DEFAULT_CONFIG
    from ticdc_devkit.cluster import DEFAULT_DIRECTORY, LoopbackCluster

    cluster = LoopbackCluster(Path(args.dir) if args.dir else DEFAULT_DIRECTORY)
    if args.action == "up":
        try:
            cluster.up(Path(args.config) if args.config else DEFAULT_CONFIG, airflow=args.airflow)
        except RuntimeError as exc:  # already running, or a service that did not start (its log named)
            print(f"ticdc-kit cluster up: {exc}", file=sys.stderr)
            return 1
        print(f"loopback cluster up; its configuration: {cluster.config_path}")
    elif args.action == "down":
        stopped = cluster.down()
        print(f"stopped {len(stopped)} services: {', '.join(stopped) or 'none were running'}")
        return 0
    if not cluster.services:
        print(f"no loopback cluster in {cluster.directory} (`ticdc-kit cluster up` starts one)")
        return 1
    running = cluster.running()
    for name, service in cluster.services.items():
        state = "running" if running[name] else "stopped"
        port = f"port {service.port}" if service.port else ""
        print(f"  {name:<22} {state:<8} pid {service.pid:<7} {port:<11} log {service.log}")
    return 0 if all(running.values()) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ticdc-kit", description="ticdc-lakehouse's development kit.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="the embedded demo: broker, change stream, pipeline DAG, gold tables")
    p.add_argument("--config")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("cluster", help="a loopback cluster of the real services, for cluster mode on one machine")
    p.add_argument("action", choices=("up", "status", "down"))
    p.add_argument("--dir", help="the cluster's directory (default .local/cluster in the checkout)")
    p.add_argument("--config", help="up: the configuration whose sources the cluster runs (default: the embedded one)")
    p.add_argument("--no-airflow", dest="airflow", action="store_false", help="up: without Airflow's services")
    p.set_defaults(func=cmd_cluster)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"ticdc-kit {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
