"""Row changes decoded column-wise: a `RowBlock` holds the changes of one table shape from many messages as
Arrow columns, the same facts a list of row `ChangeEvent`s holds, without a Python object per value.

A codec that decodes column-wise (`codecs.ColumnDecoder`) returns blocks for the messages it could decode that
way and leaves the others to its row-wise `decode`, which is the reference: `events` turns a block back into the
events `decode` gives for its messages, which is how the tests compare the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.canonical.events import ChangeEvent


@dataclass(frozen=True)
class RowBlock:
    """Row changes of one table shape (database, table, columns and types, key), one Arrow row per change.

    `before` and `after` are struct arrays with a child per column of `names` (canonical text): null where the
    change has no such image (an insert's before, a delete's after). Both hold every column of the shape.
    `message` is each change's index among the messages decoded together, in their order; the changes of one
    message are consecutive and in the order `decode` gives them. `flags` hold for every row, `row_flags` for the
    rows their boolean array marks. `commit_ts` has no nulls: a codec decodes a row without one row-wise.
    """

    database: str | None
    table: str | None
    key_columns: list[str]
    column_types: dict[str, str]
    names: list[str]
    message: Any  # pa.Int32Array
    commit_ts: Any  # pa.Int64Array
    op: Any  # pa.StringArray: insert, update or delete
    before: Any  # pa.StructArray
    after: Any  # pa.StructArray
    flags: tuple[str, ...] = ()
    row_flags: dict[str, Any] = field(default_factory=dict)  # flag -> pa.BooleanArray
    schema_version: int | None = None  # Simple: the table schema version the rows refer to

    def __len__(self) -> int:
        return len(self.message)

    def events(self) -> list[tuple[int, ChangeEvent]]:
        """(message index, event) per row, as the row-wise decoder gives them: for tests and rare uses, not for
        hot paths (it builds a Python object per value)."""
        marked = {flag: mask.to_pylist() for flag, mask in self.row_flags.items()}
        rows = zip(
            self.message.to_pylist(),
            self.commit_ts.to_pylist(),
            self.op.to_pylist(),
            self.before.to_pylist(),
            self.after.to_pylist(),
        )
        out = []
        for i, (message, commit_ts, op, before, after) in enumerate(rows):
            flags = [*self.flags, *(flag for flag, mask in marked.items() if mask[i])]
            event = ChangeEvent(
                "row",
                self.database,
                self.table,
                commit_ts,
                op,
                list(self.key_columns),
                before,
                after,
                dict(self.column_types),
                self.schema_version,
                flags=flags,
            )
            out.append((message, event))
        return out


def struct_of(names: list[str], columns: list[Any], present: Any = None) -> Any:
    """A struct array of the string children `columns` named `names` (at least one); `present` (booleans) marks
    the rows that hold it, every row when None."""
    mask = None if present is None else pc.invert(present)
    return pa.StructArray.from_arrays(columns, names=names, mask=mask)
