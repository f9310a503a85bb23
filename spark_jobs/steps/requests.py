"""What a request may ask, for the command line's options and the DAGs' trigger forms alike: the layers a rebuild
takes and Dumpling's CSV options. Kept apart from the steps that do the work, since a DAG file reads these while
Airflow parses it and must not import Spark's, Arrow's or the DDL parser's modules for that (every parse is a
process of its own)."""

from __future__ import annotations

from dataclasses import dataclass

LAYERS = ("silver", "gold", "history")  # what `rebuild` replaces, each from the layer below


@dataclass(frozen=True)
class RequestField:
    """One field of a request that both the command line and a DAG's trigger form take: the DAG's param is
    `name`, the command's option `--name` with dashes (a boolean: `--name` / `--no-name`)."""

    name: str
    default: str | bool
    title: str
    help: str


# Dumpling's `--csv-*` options, as Dumpling names and defaults them (README, "The initial snapshot").
CSV_FIELDS = (
    RequestField("csv_separator", ",", "CSV separator", "Dumpling's --csv-separator"),
    RequestField("csv_delimiter", '"', "CSV delimiter", "Dumpling's --csv-delimiter"),
    RequestField("csv_null_value", "\\N", "CSV null value", "Dumpling's --csv-null-value"),
    RequestField(
        "csv_line_terminator", "\\r\\n", "CSV line terminator", "Dumpling's --csv-line-terminator (\\r, \\n, \\t)"
    ),
    RequestField("header", True, "CSV header", "the CSV files start with a header line (Dumpling's --no-header: off)"),
    RequestField(
        "escape_backslash", True, "Escape backslash", "values are escaped with backslashes (Dumpling's default)"
    ),
)
