"""A key-changing update sent unsplit (`output-raw-change-event: true`) decodes, after `split_key_change`, to
exactly the changes of the same update sent split (a delete of the old key, an insert of the new): for every
protocol that can carry it whole, on a random workload with key changes, swaps and composite keys."""

from __future__ import annotations

import orjson
import pytest

from spark_jobs.canonical.events import ChangeEvent, split_key_change
from tests.codecs.helpers import changefeed_decoder
from ticdc_devkit.simulator.model import RowChange, key_changed
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, RAW_CHANGE_PROTOCOLS, encode_stream
from ticdc_devkit.simulator.workload import random_workload


def row_changes(protocol: str, raw: bool) -> list[tuple]:
    workload = random_workload(20261126, tables=3, changes=120, preexisting=1, protocol=protocol)
    assert sum(isinstance(e, RowChange) and key_changed(e) for e in workload.events) >= 5
    options = {**EXTENSION_OPTIONS[protocol], "output-raw-change-event": raw}
    messages = encode_stream(protocol, workload.events, topic="t", partitions=1, options=options)
    decoder = changefeed_decoder(protocol, EXTENSION_OPTIONS[protocol])
    out = []
    for m in messages:
        for event in decoder.decode(m.key, m.value, list(m.headers) or None):
            for e in split_key_change(event):
                if e.kind == "row":
                    image = e.after if e.after is not None else e.before
                    out.append((e.commit_ts, e.database, e.table, e.op, orjson.dumps(e.after).decode(), str(image)))
    return out


@pytest.mark.parametrize("protocol", sorted(RAW_CHANGE_PROTOCOLS))
def test_an_unsplit_key_change_decodes_to_the_split_changes(protocol):
    raw, split = row_changes(protocol, raw=True), row_changes(protocol, raw=False)
    assert sorted(raw) == sorted(split)
    assert len(raw) > len([r for r in raw if r[3] != "delete"])  # deletes of old keys among them


def test_split_key_change_leaves_other_events_whole():
    update = ChangeEvent("row", "d", "t", 5, "update", ["id"], {"id": "1", "v": "a"}, {"id": "1", "v": "b"})
    assert split_key_change(update) == [update]
    blind = ChangeEvent("row", "d", "t", 5, "update", ["id"], None, {"id": "2", "v": "b"})
    assert split_key_change(blind) == [blind]
    moved = ChangeEvent("row", "d", "t", 5, "update", ["id"], {"id": "1", "v": "a"}, {"id": "2", "v": "b"})
    delete, insert = split_key_change(moved)
    assert (delete.op, delete.before, delete.after, delete.commit_ts) == ("delete", {"id": "1", "v": "a"}, None, 5)
    assert (insert.op, insert.before, insert.after, insert.commit_ts) == ("insert", None, {"id": "2", "v": "b"}, 5)
    assert "key_change_split" in delete.flags and "key_change_split" in insert.flags
