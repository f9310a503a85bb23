"""Erasure's parts without Spark: a multi-row message loses exactly the erased key's rows (every other row's event
decodes as before), an update that moves a row between the erased key and another is refused, and a bad request
stops before anything opens, naming what is wrong. The end-to-end test is tests/e2e/test_erasure.py."""

from __future__ import annotations

import orjson
import pytest

from spark_jobs import steps
from spark_jobs.codecs import make_decoder, without_events
from spark_jobs.codecs.open_protocol import split_items
from spark_jobs.erasure import _picker, parse_key
from spark_jobs.errors import ConfigError, ErasureRefused
from ticdc_devkit.simulator.model import Column, RowChange, Table
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream

T = Table("er", "t", (Column("id", "int", nullable=False), Column("v", "varchar(16)")), ("id",), 901)
U = Table("er", "u", (Column("id", "int", nullable=False), Column("v", "varchar(16)")), ("id",), 902)
TS = 462_000_000_000_000_000


def _inserts(table: Table, keys: list[int]) -> list[RowChange]:
    return [RowChange(TS, "insert", table, after={"id": k, "v": f"{table.name}{k}"}) for k in keys]


def _rows(protocol: str, key: bytes | None, value: bytes | None) -> list[tuple]:
    decoder = make_decoder(protocol, EXTENSION_OPTIONS[protocol])
    return [(e.table, e.op, e.before, e.after) for e in decoder.decode(key, value)]


def _erase(protocol: str, key, value, erased: str = '["2"]', table: str = "t"):
    decoder = make_decoder(protocol, EXTENSION_OPTIONS[protocol])
    return without_events(protocol, decoder, key, value, _picker([("er", table)], erased, "topic[0]@5"))


def test_an_open_batch_loses_the_erased_row_alone_and_keeps_the_other_rows_bytes():
    [message] = encode_stream("open", [*_inserts(T, [1, 2, 3]), *_inserts(U, [2])], options=EXTENSION_OPTIONS["open"])
    rows = _rows("open", message.key, message.value)
    assert len(rows) == 4

    rewritten = _erase("open", message.key, message.value)
    assert rewritten is not None
    assert _rows("open", *rewritten) == [rows[0], rows[2], rows[3]], "the same key of another table stays"
    items = [bytes(item) for item in split_items(message.value, 0, "value")]
    assert [bytes(item) for item in split_items(rewritten[1], 0, "value")] == [items[0], items[2], items[3]]

    assert _erase("open", message.key, message.value, '["9"]') == (message.key, message.value), "nothing picked"
    [alone] = encode_stream("open", _inserts(T, [2]), options=EXTENSION_OPTIONS["open"])
    assert _erase("open", alone.key, alone.value) is None, "a message of the erased row alone goes"


def test_a_canal_json_data_list_loses_the_erased_row_and_its_old_image():
    [message] = encode_stream("canal-json", _inserts(T, [1]), options=EXTENSION_OPTIONS["canal-json"])
    doc = orjson.loads(message.value)
    doc["type"], doc["data"] = "UPDATE", [{"id": str(k), "v": f"new{k}"} for k in (1, 2, 3)]
    doc["old"] = [{"v": f"old{k}"} for k in (1, 2, 3)]
    value = orjson.dumps(doc)
    rows = _rows("canal-json", message.key, value)

    rewritten = _erase("canal-json", message.key, value)
    assert rewritten is not None
    assert _rows("canal-json", *rewritten) == [rows[0], rows[2]]
    kept = orjson.loads(rewritten[1])
    assert kept["old"] == [{"v": "old1"}, {"v": "old3"}] and kept["_tidb"] == doc["_tidb"]
    assert _erase("canal-json", message.key, message.value, '["1"]') is None


def test_an_update_that_moves_a_row_off_or_onto_the_erased_key_is_refused():
    change = RowChange(TS, "update", T, before={"id": 2, "v": "a"}, after={"id": 8, "v": "a"})
    options = {**EXTENSION_OPTIONS["open"], "output-raw-change-event": True}
    [message] = encode_stream("open", [change], options=options)
    with pytest.raises(ErasureRefused, match=r'topic\[0\]@5 .* er\.t .*\["8"\].*erase both keys'):
        _erase("open", message.key, message.value)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"table": "people", "key": '{"id": 7}'}, "--table must be database.table"),
        ({"key": "7"}, "--key must be a JSON object"),
        ({"key": "{}"}, "--key must be a JSON object"),
        ({"key": '{"id": 7.5}'}, "key column 'id' is 7.5"),
        ({"key": "{id: 7}"}, "--key must be a JSON object"),
        ({"requested_by": " "}, "requested_by must name who asks"),
        ({"source": "nope"}, "nope"),
    ],
)
def test_a_bad_request_stops_before_anything_opens(tmp_path, params, message):
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "runtime: {mode: embedded, local_dir: lake}\n"
        "sources:\n  - {name: shop, protocol: open, topics: [shop], kafka: {bootstrap_servers: '127.0.0.1:1'}}\n"
    )
    request = {"source": "shop", "table": "er.people", "key": '{"id": 7}', "requested_by": "dpo"} | params
    with pytest.raises(ConfigError, match=message):
        steps.erase_request(request, config)
    assert not (tmp_path / "lake").exists(), "a bad request opened the lakehouse"


def test_a_key_is_kept_as_silver_holds_it():
    assert parse_key('{"id": 7, "region": "eu"}') == {"id": "7", "region": "eu"}
