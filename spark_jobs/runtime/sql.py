"""SQL text built safely: identifiers quoted here, values bound as parameters, temp views always dropped.

Values (source names, topics, upstream database and table names, numbers) never go into SQL text:
they are bound with `spark.sql(query, args={"source": name})` and `:source` in the text, which
Spark 3.5 accepts in SELECT, INSERT, DELETE and MERGE, subqueries included. Identifiers cannot be
parameters, so a name that is not a constant of ours goes through `quote_ident` / `qualified`.
Iceberg's own statements (CALL, CREATE BRANCH) take no parameters: use Iceberg's API for those.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

_VIEW_HINT = re.compile(r"[a-z][a-z0-9_]*")


def quote_ident(name: str) -> str:
    """One identifier for Spark SQL: in backticks, a backtick inside doubled; dots stay part of the name."""
    return "`" + name.replace("`", "``") + "`"


def qualified(*parts: str) -> str:
    """A multi-part name (namespace, table, metadata table or branch) with every part quoted on its own."""
    return ".".join(quote_ident(part) for part in parts)


@contextmanager
def temp_view(df, name_hint: str) -> Iterator[str]:
    """`df` as a temp view with a name no other statement uses; yields the quoted name and always drops the view.

    A unique name keeps two runs in one session (threads, retries) from reading each other's rows.
    """
    if not _VIEW_HINT.fullmatch(name_hint):
        raise ValueError(f"temp view name hint {name_hint!r} must be lowercase letters, digits and underscores")
    name = f"{name_hint}_{uuid.uuid4().hex}"
    df.createTempView(name)
    try:
        yield quote_ident(name)
    finally:
        df.sparkSession.catalog.dropTempView(name)
