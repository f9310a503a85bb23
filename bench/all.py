"""Every benchmark in one command, and one table of all their ratios with the floor each is measured against.

    python bench/all.py [--quick] [--readme] [--only decode,land,land_topics,silver,gold,gold_tables,gold_batches,gold_plan,
                                                end_to_end,bootstraps,freshness]

Runs bench/decode.py, bench/land.py (its sizes, and as land_topics its runs over many topics), bench/silver.py,
bench/gold.py (its sizes; as gold_tables its runs over many tables; as gold_batches a long-running driver's runs; as gold_plan
its plan of a long DDL history),
bench/end_to_end.py, bench/bootstraps.py and bench/freshness.py (continuous mode, embedded) one after the other
(each prints its own report as it goes), each with `--json` to hand back its summary lines, then prints one table:
benchmark, case, the figure measured, the floor measured beside it in the same run, the ratio and its goal. Each
benchmark's newest summary is kept in `.local/bench/summary.json`, so `--only` re-runs one and the table still shows
all. `--quick` runs every benchmark at sizes that fit in about 25 minutes on two cores (the issue's sizes take hours
here); the table says which sizes ran. `--readme` also writes the table, with the date and the machine it was taken
on, into README.md between the `bench:start` and `bench:end` markers. Nothing is asserted: a ratio below its goal is
reported as such.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KEPT = ROOT / ".local" / "bench" / "summary.json"  # benchmark -> its newest summary, arguments and seconds
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

# benchmark -> (script, arguments at the sizes, arguments with --quick)
BENCHMARKS = {
    "decode": ("decode.py", [], []),
    "land": ("land.py", ["--sizes", "1000000,4000000"], ["--sizes", "100000,400000"]),
    "land_topics": ("land.py", ["--topics", "40,1000"], ["--topics", "40,1000"]),
    "silver": ("silver.py", [], ["--messages", "100000", "--existing-rows", "1000000"]),
    "gold": ("gold.py", [], ["--sizes", "100000,1000000"]),
    "gold_tables": ("gold.py", ["--tables", "60,1000"], ["--tables", "20,60"]),
    "gold_batches": (
        "gold.py",
        ["--batches", "40"],
        ["--batches", "20", "--batch-changes", "600", "--compact-every", "5"],
    ),
    "gold_plan": ("gold.py", ["--versions", "100,1000"], ["--versions", "100,1000"]),
    "end_to_end": ("end_to_end.py", [], ["--changes", "100000"]),
    "bootstraps": ("bootstraps.py", [], ["--tables", "10"]),
    "freshness": ("freshness.py", [], ["--minutes", "2", "--rate", "500", "--tables", "5"]),
}


def run(name: str, quick: bool) -> tuple[list[dict], list[str], float]:
    """Run one benchmark; its summary lines, the arguments it ran with and its seconds."""
    script, full, small = BENCHMARKS[name]
    arguments = small if quick else full
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.json"
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(ROOT / "bench" / script), *arguments, "--json", str(out)], cwd=ROOT)
        seconds = time.monotonic() - started
        rows = json.loads(out.read_text()) if out.exists() else []
    if code or not rows:
        print(f"{name}: exit code {code}; no summary", file=sys.stderr)
    return rows, arguments, seconds


def verdict(ratio: float | None, goal: str | None) -> str:
    if goal is None or ratio is None:
        return ""
    sign, threshold = goal.split()
    met = ratio >= float(threshold) if sign == ">=" else ratio <= float(threshold)
    return "met" if met else "not met"


def table(rows: list[dict]) -> list[str]:
    """The combined table as Markdown (it reads as plain text in a terminal too)."""
    lines = [
        "| benchmark | case | measured | floor (same run) | ratio | goal | |",
        "|---|---|---|---|---:|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(
            f"| {r['benchmark']} | {r['case']} | {r['figure']} | {r['floor']} | {ratio} | {r['goal'] or ''} "
            f"| {verdict(r['ratio'], r['goal'])} |"
        )
    return lines


def machine() -> str:
    """CPU model, cores and memory, as the table's caption says where it was taken."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or platform.machine(),
    )
    memory_kb = next(
        (
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    return f"{model}, {os.cpu_count()} cores, {memory_kb / 1024 / 1024:.0f} GB, Python {platform.python_version()}"


def write_readme(lines: list[str], caption: str) -> None:
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} markers to write the table between")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    README.write_text(before + START + "\n" + caption + "\n\n" + "\n".join(lines) + "\n" + END + after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 25 minutes on two cores)")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated (default {','.join(BENCHMARKS)})"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; allowed: {', '.join(BENCHMARKS)}")
    kept = json.loads(KEPT.read_text()) if KEPT.exists() else {}
    failed = []
    for name in names:
        print(f"== {name} ==", flush=True)
        summary, arguments, seconds = run(name, args.quick)
        if summary:
            kept[name] = {
                "rows": summary,
                "arguments": arguments,
                "seconds": seconds,
                "date": dt.date.today().isoformat(),
            }
        else:
            failed.append(name)
    KEPT.parent.mkdir(parents=True, exist_ok=True)
    KEPT.write_text(json.dumps(kept, indent=1))
    order = [name for name in BENCHMARKS if name in kept]
    rows = [row for name in order for row in kept[name]["rows"]]
    ran = [
        f"`{BENCHMARKS[name][0]}{''.join(' ' + a for a in kept[name]['arguments'])}` "
        f"({kept[name]['date']}, {kept[name]['seconds'] / 60:.0f} min)"
        for name in order
    ]
    lines = table(rows)
    caption = (
        f"Taken with `make bench{' QUICK=1' if args.quick else ''}` on {machine()}: {', '.join(ran)}. "
        "Each ratio is against a floor measured in the same run."
    )
    print()
    print(caption)
    print()
    print("\n".join(lines))
    if args.readme:
        write_readme(lines, caption)
        print(f"\nwritten into {README.relative_to(ROOT)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
