"""TiCDC's row-level checksum: the algorithm per type, and the Avro and Simple decoders verifying it.

TiCDC's own tests hold no literal checksums (they compute them against a running TiDB), and no captured message
in ../shared carries one. So the vectors here are derived by hand from the documented encoding (TiDB
`util/rowcodec` appendDatumForChecksum, tiflow `pkg/sink/codec/common/verify_checksum.go`): the bytes are
written out literally, and the CRC variant is pinned by its standard check value. The decoders are checked
against both, and against the simulator, whose checksum is computed from typed values by a separate
implementation (devkit/ticdc_devkit/simulator/integrity.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import re
import zlib
from dataclasses import replace
from decimal import Decimal
from zoneinfo import ZoneInfo

import fastavro
import pytest

from spark_jobs.codecs import DecodeError, validate_options
from spark_jobs.codecs import checksum as crc
from spark_jobs.codecs.schema_registry import SchemaRegistryClient
from spark_jobs.codecs.simple import message_schema
from tests.codecs.helpers import EVERY_TYPE, EVERY_TYPE_ROW, changefeed_decoder, decode_partitions
from ticdc_devkit.simulator import avro as avro_sim
from ticdc_devkit.simulator import simple as simple_sim
from ticdc_devkit.simulator.integrity import row_checksum
from ticdc_devkit.simulator.model import Bootstrap, Column, RowChange, Table
from ticdc_devkit.simulator.stream import encode_stream

ZONE = "Asia/Shanghai"
TS = 450000000000000000


# (column type, model value, the bytes TiDB hashes for it, written out by hand)
VECTORS = [
    ("tinyint", 127, bytes.fromhex("7f00000000000000")),
    ("tinyint", -1, bytes.fromhex("ffffffffffffffff")),
    ("smallint unsigned", 65535, bytes.fromhex("ffff000000000000")),
    ("int", -2, bytes.fromhex("feffffffffffffff")),
    ("int unsigned", 4294967295, bytes.fromhex("ffffffff00000000")),
    ("bigint", -(1 << 63), bytes.fromhex("0000000000000080")),
    ("bigint unsigned", (1 << 64) - 1, bytes.fromhex("ffffffffffffffff")),
    ("year", 1901, bytes.fromhex("6d07000000000000")),
    ("bit(10)", 513, bytes.fromhex("0102000000000000")),
    ("bit(64)", (1 << 64) - 1, bytes.fromhex("ffffffffffffffff")),
    ("enum('a','b''s','c')", "b's", bytes.fromhex("0200000000000000")),
    ("enum('a','b')", "", bytes.fromhex("0000000000000000")),
    ("set('x','y','z')", ("x", "z"), bytes.fromhex("0500000000000000")),
    ("float", 1.1, bytes.fromhex("000000a09999f13f")),  # float32(1.1) = 0x3FF19999A0000000 as a double
    ("double", 3.5, bytes.fromhex("0000000000000c40")),
    ("double", float("nan"), bytes(8)),
    ("double", float("inf"), bytes(8)),
    ("decimal(10,4)", Decimal("-12.34"), b"\x08\x00\x00\x00-12.3400"),
    ("decimal(10,0)", Decimal("9999999999"), b"\x0a\x00\x00\x009999999999"),
    (  # 65 digits: past the 28 of Python's default decimal context
        "decimal(65,30)",
        Decimal("-" + "9" * 35 + "." + "1" * 30),
        b"\x43\x00\x00\x00-" + b"9" * 35 + b"." + b"1" * 30,
    ),
    ("varchar(10)", "héllo", b"\x06\x00\x00\x00h\xc3\xa9llo"),
    ("text", "", b"\x00\x00\x00\x00"),
    ("varbinary(4)", b"\x00\xff", b"\x02\x00\x00\x00\x00\xff"),
    ("date", dt.date(2024, 2, 29), b"\x0a\x00\x00\x002024-02-29"),
    ("datetime(6)", dt.datetime(2024, 2, 29, 23, 59, 59, 123456), b"\x1a\x00\x00\x002024-02-29 23:59:59.123456"),
    ("timestamp(3)", dt.datetime(2024, 7, 1, 3, 30, 0, 123000), b"\x17\x00\x00\x002024-07-01 03:30:00.123"),
    (
        "time(2)",
        -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=990000),
        b"\x0d\x00\x00\x00-838:59:59.99",
    ),
    ("time", dt.timedelta(hours=1, minutes=2, seconds=3), b"\x08\x00\x00\x0001:02:03"),
    ("json", '{"k": [1, 2.5]}', b'\x0f\x00\x00\x00{"k": [1, 2.5]}'),
]


def test_the_crc_is_crc32_ieee():
    """Go's crc32.IEEETable: the standard check value of CRC-32/ISO-HDLC, and updates chain like one pass."""
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert zlib.crc32(b"56789", zlib.crc32(b"1234")) == 0xCBF43926


@pytest.mark.parametrize("definition, value, hashed", VECTORS, ids=[f"{v[0]}={v[1]!r}" for v in VECTORS])
def test_simulator_hashes_each_type_as_tidb(definition, value, hashed):
    table = Table("db", "t", (Column("c", definition),), key=())
    assert row_checksum(table, {"c": value}) == zlib.crc32(hashed)


def test_codec_encoders_give_the_hand_derived_bytes():
    assert crc.uint64(-1) == crc.uint64("18446744073709551615") == bytes.fromhex("ffffffffffffffff")
    assert crc.uint64("-2") == bytes.fromhex("feffffffffffffff")
    assert crc.unwrap_value(crc.uint64)({"value": -1}) == bytes(b"\xff" * 8)  # Simple Avro's UnsignedBigint
    assert crc.float32("1.1") == crc.float32(1.100000023841858) == bytes.fromhex("000000a09999f13f")
    assert crc.double("3.5") == bytes.fromhex("0000000000000c40")
    assert crc.double(float("-inf")) == crc.float32(float("nan")) == bytes(8)
    assert crc.big_endian_bits(b"\x02\x01") == bytes.fromhex("0102000000000000")  # Avro BIT bytes
    assert crc.decimal_text("-12.3400") == crc.decimal_text(Decimal("-12.3400")) == b"\x08\x00\x00\x00-12.3400"
    assert crc.decimal_text(Decimal("0E-4")) == b"\x06\x00\x00\x000.0000"  # Avro precise mode, at the scale
    assert crc.text("héllo") == b"\x06\x00\x00\x00h\xc3\xa9llo"
    assert crc.base64_binary("AP8=") == crc.binary(b"\x00\xff") == b"\x02\x00\x00\x00\x00\xff"
    assert crc.enum_by_label(["a", "b's", "c"])("b's") == bytes.fromhex("0200000000000000")
    assert crc.enum_by_label(["a"])("") == bytes(8)
    assert crc.set_by_labels(["x", "y", "z"])("z,x") == bytes.fromhex("0500000000000000")
    shanghai = crc.timestamp(ZoneInfo(ZONE))
    assert shanghai("2024-07-01 11:30:00.123") == b"\x17\x00\x00\x002024-07-01 03:30:00.123"
    assert shanghai("0000-00-00 00:00:00") == b"\x13\x00\x00\x000000-00-00 00:00:00"


def test_a_row_is_its_columns_in_order_and_null_adds_nothing():
    table = Table("db", "t", (Column("id", "int"), Column("name", "varchar(8)"), Column("note", "text")), key=("id",))
    hashed = bytes.fromhex("0100000000000000") + b"\x01\x00\x00\x00a"
    assert row_checksum(table, {"id": 1, "name": "a", "note": None}) == zlib.crc32(hashed) == 0xD537E779
    checksum = crc.RowChecksum((("id", crc.uint64), ("name", crc.text), ("note", crc.text)))
    assert checksum.compute({"id": "1", "name": "a", "note": None}) == 0xD537E779
    reordered = crc.RowChecksum((("name", crc.text), ("id", crc.uint64)))
    assert reordered.compute({"id": "1", "name": "a"}) != 0xD537E779


def test_sent_checksums_are_read_as_ticdc_writes_them():
    assert crc.expected_crc("avro", "4294967295", "w") == 0xFFFFFFFF
    assert crc.expected_crc("simple-json", 7, "w") == 7
    assert crc.expected_crc("avro", "", "w") is None  # Avro's default: no checksum
    assert crc.expected_crc("simple-json", 0, "w") is None  # TiCDC's "no image" / not enabled
    for bad in ("x1", "4294967296", -1, True, 1.5):
        with pytest.raises(DecodeError, match="is not a CRC-32"):
            crc.expected_crc("avro", bad, "w")


def test_the_option_defaults_on_and_turns_off():
    for protocol in ("avro", "simple-json", "simple-avro"):
        assert validate_options(protocol, {})["verify-checksums"] is True
        assert validate_options(protocol, {"verify-checksums": "false"})["verify-checksums"] is False


def is_checksum_failure(exc: DecodeError) -> bool:
    """What the status page counts (the quarantine reason is str(exc))."""
    return re.match(crc.FAILURE_PATTERN, str(exc)) is not None


# ---- Simple ---------------------------------------------------------------------------------------------

UPDATED = {**EVERY_TYPE_ROW, "vc": "changed", "f": -3.4e38, "d": 5e-324, "en": "", "st": (), "dec": Decimal("0")}


def simple_stream() -> list:
    return [
        Bootstrap(EVERY_TYPE),
        RowChange(TS + 1, "insert", EVERY_TYPE, None, EVERY_TYPE_ROW),
        RowChange(TS + 2, "update", EVERY_TYPE, EVERY_TYPE_ROW, UPDATED),
        RowChange(TS + 3, "update", EVERY_TYPE, UPDATED, {**UPDATED, "js": None, "bl": None}),
        RowChange(TS + 4, "delete", EVERY_TYPE, UPDATED, None),
    ]


def simple_options(**more) -> dict:
    return {"integrity-check-level": "correctness", "time-zone": ZONE, **more}


@pytest.mark.parametrize("protocol", ["simple-json", "simple-avro"])
@pytest.mark.parametrize("version", [0, 1])
def test_simple_rows_with_checksums_decode(protocol, version):
    options = simple_options(**{"checksum-version": version})
    messages = encode_stream(protocol, simple_stream(), options=options)
    encoding = protocol.split("-")[1]
    want = [simple_sim.expected(e, options, encoding).to_dict() for e in simple_stream()]
    assert decode_partitions(protocol, messages, options) == {0: want}


def json_messages(**options) -> list[bytes]:
    return [m.value for m in encode_stream("simple-json", simple_stream(), options=simple_options(**options))]


def decode_json(values: list[bytes], **options) -> list:
    decoder = changefeed_decoder("simple-json", simple_options(**options))
    return [event for value in values for event in decoder.decode(None, value)]


def tampered(value: bytes, change) -> bytes:
    doc = json.loads(value)
    change(doc)
    return json.dumps(doc).encode()


def test_simple_json_message_carries_the_block_as_ticdc():
    insert, update = (json.loads(v) for v in json_messages()[1:3])
    assert list(insert)[8:10] == ["checksum", "data"]  # after schemaVersion, before the images (Go field order)
    assert insert["checksum"] == {
        "version": 1,
        "corrupted": False,
        "current": row_checksum(EVERY_TYPE, EVERY_TYPE_ROW),
        "previous": 0,
    }
    assert update["checksum"]["previous"] == insert["checksum"]["current"]


@pytest.mark.parametrize(
    "image, change",
    [
        ("new", lambda doc: doc["data"].update(vc="tampered")),
        ("new", lambda doc: doc["data"].update(ti="-127")),
        ("new", lambda doc: doc["checksum"].update(current=doc["checksum"]["current"] ^ 1)),
        ("old", lambda doc: doc["old"].update(dec="-12345678901234.123457")),
        ("old", lambda doc: doc["old"].update(bl=None)),
        ("old", lambda doc: doc["checksum"].update(previous=12345)),
    ],
)
def test_simple_tampered_update_goes_to_quarantine(image, change):
    values = json_messages()
    values[2] = tampered(values[2], change)
    with pytest.raises(DecodeError, match=rf"row checksum mismatch: shop.all_types {image} image, expected \d+") as exc:
        decode_json(values)
    assert str(exc.value).startswith("simple-json: row checksum mismatch")
    assert "(checksum version 1)" in str(exc.value)
    assert is_checksum_failure(exc.value)
    decoded = decode_json(values, **{"verify-checksums": False})  # the option off lets it through
    assert [e.op for e in decoded if e.kind == "row"] == ["insert", "update", "update", "delete"]


def test_simple_delete_is_checked_by_its_previous_checksum():
    values = json_messages()
    values[4] = tampered(values[4], lambda doc: doc["old"].update(c="x"))
    with pytest.raises(DecodeError, match=r"row checksum mismatch: shop\.all_types old image"):
        decode_json(values)


def test_simple_row_marked_corrupted_goes_to_quarantine():
    values = json_messages()
    values[1] = tampered(values[1], lambda doc: doc["checksum"].update(corrupted=True))
    with pytest.raises(DecodeError, match=r"^simple-json: row marked corrupted by TiCDC: shop\.all_types") as exc:
        decode_json(values)
    assert is_checksum_failure(exc.value)
    assert len(decode_json(values, **{"verify-checksums": False})) == 5


def test_simple_avro_tampered_value_goes_to_quarantine():
    options = simple_options()
    messages = encode_stream("simple-avro", simple_stream(), options=options)
    schema = message_schema()
    record = fastavro.schemaless_reader(io.BytesIO(messages[1].value), schema, None)
    record["payload"]["data"]["vc"] = "tampered"
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    decoder = changefeed_decoder("simple-avro", options)
    decoder.decode(None, messages[0].value)
    with pytest.raises(DecodeError, match=r"^simple-avro: row checksum mismatch: shop\.all_types new image"):
        decoder.decode(None, out.getvalue())


def test_simple_handle_key_only_rows_are_not_checked():
    """Their images lack the columns the checksum covers (silver quarantines such inserts and updates anyway)."""
    options = simple_options(**{"large-message-handle-option": "handle-key-only", "large-message-threshold": 300})
    messages = encode_stream("simple-json", simple_stream(), options=options)
    assert all(json.loads(m.value).get("handleKeyOnly") for m in messages[1:])
    events = changefeed_decoder("simple-json", options)
    assert [e.op for m in messages for e in events.decode(None, m.value) if e.kind == "row"] == [
        "insert",
        "update",
        "update",
        "delete",
    ]


def test_timestamp_hashed_as_sent_by_older_ticdc_passes():
    """Before tiflow#10564 TiCDC hashed TIMESTAMP in the changefeed's zone: the same row with its local time read
    as UTC gives that checksum."""
    insert = json.loads(json_messages()[1])
    local = EVERY_TYPE_ROW["ts"].replace(tzinfo=dt.UTC).astimezone(ZoneInfo(ZONE))
    legacy = row_checksum(EVERY_TYPE, {**EVERY_TYPE_ROW, "ts": local.replace(tzinfo=None)})
    assert legacy != insert["checksum"]["current"]
    insert["checksum"]["current"] = legacy
    values = json_messages()
    values[1] = json.dumps(insert).encode()
    assert [e.op for e in decode_json(values[:2]) if e.kind == "row"] == ["insert"]


# ---- Avro ------------------------------------------------------------------------------------------------


def avro_options(registry_url: str, **more) -> dict:
    return {
        "schema-registry-url": registry_url,
        "enable-tidb-extension": True,
        "avro-decimal-handling-mode": "string",
        "avro-bigint-unsigned-handling-mode": "string",
        "integrity-check-level": "correctness",
        "time-zone": ZONE,
        **more,
    }


def avro_stream() -> list:
    return [e for e in simple_stream() if isinstance(e, RowChange)]


@pytest.mark.parametrize("version", [0, 1])
def test_avro_rows_with_checksums_decode(registry_url, version):
    options = avro_options(registry_url, **{"checksum-version": version})
    messages = encode_stream("avro", avro_stream(), options=options)
    want = [avro_sim.expected(e, options).to_dict() for e in avro_stream()]
    assert decode_partitions("avro", messages, options) == {0: want}


def test_avro_needs_the_modes_ticdc_requires():
    with pytest.raises(ValueError, match="avro-decimal-handling-mode=string"):
        avro_sim.AvroEncoder(
            {
                "schema-registry-url": "http://127.0.0.1:1",
                "enable-tidb-extension": True,
                "integrity-check-level": "correctness",
            }
        )


def avro_rewrite(registry_url: str, value: bytes, change) -> bytes:
    """The value re-encoded with `change` applied to its record (same writer schema)."""
    text = SchemaRegistryClient(registry_url).schema(int.from_bytes(value[1:5], "big"))
    schema = fastavro.parse_schema(json.loads(text))
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    change(record)
    out = io.BytesIO()
    out.write(value[:5])
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


def test_avro_value_schema_has_ticdcs_checksum_fields(registry_url):
    message = encode_stream("avro", avro_stream()[:1], options=avro_options(registry_url))[0]
    text = SchemaRegistryClient(registry_url).schema(int.from_bytes(message.value[1:5], "big"))
    names = [f["name"] for f in json.loads(text)["fields"]]
    assert names[-4:] == [
        "_tidb_commit_physical_time",
        "_tidb_row_level_checksum",
        "_tidb_corrupted",
        "_tidb_checksum_version",
    ]


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(vc="tampered"),
        lambda r: r.update(f=1.25),
        lambda r: r.update(ts="2024-07-01 11:30:00.124"),
        lambda r: r.update(_tidb_row_level_checksum=str(int(r["_tidb_row_level_checksum"]) ^ 0x80000000)),
    ],
)
def test_avro_tampered_row_goes_to_quarantine(registry_url, change):
    options = avro_options(registry_url)
    messages = encode_stream("avro", avro_stream(), options=options)
    value = avro_rewrite(registry_url, messages[1].value, change)
    decoder = changefeed_decoder("avro", options)
    with pytest.raises(
        DecodeError, match=r"^avro: row checksum mismatch: shop.all_types new image, expected \d+"
    ) as exc:
        decoder.decode(messages[1].key, value)
    assert is_checksum_failure(exc.value)
    off = changefeed_decoder("avro", {**options, "verify-checksums": False})
    assert off.decode(messages[1].key, value)[0].op == "update"


def test_avro_row_marked_corrupted_goes_to_quarantine(registry_url):
    options = avro_options(registry_url)
    message = encode_stream("avro", avro_stream()[:1], options=options)[0]
    value = avro_rewrite(registry_url, message.value, lambda r: r.update(_tidb_corrupted=True))
    with pytest.raises(DecodeError, match=r"^avro: row marked corrupted by TiCDC: shop\.all_types") as exc:
        changefeed_decoder("avro", options).decode(message.key, value)
    assert is_checksum_failure(exc.value)


def test_avro_empty_checksum_is_not_checked(registry_url):
    options = avro_options(registry_url)
    message = encode_stream("avro", avro_stream()[:1], options=options)[0]
    value = avro_rewrite(registry_url, message.value, lambda r: r.update(_tidb_row_level_checksum="", vc="x"))
    assert changefeed_decoder("avro", options).decode(message.key, value)[0].after["vc"] == "x"


def test_reasons_outside_checksums_are_not_counted():
    assert not is_checksum_failure(DecodeError("avro", "column x of t: ValueError: bad"))
    assert not is_checksum_failure(DecodeError("simple-json", "cannot compute the row checksum of t (new image): x"))
    assert is_checksum_failure(DecodeError("simple-avro", f"{crc.MISMATCH}: t new image, expected 1, computed 2"))


def test_update_with_changed_key_keeps_both_checksums():
    """An update that changes the key, sent whole (output-raw-change-event), checks both images."""
    changed = replace(avro_stream()[1], after={**UPDATED, "id": 7})
    options = simple_options(**{"output-raw-change-event": True})
    messages = encode_stream("simple-json", [Bootstrap(EVERY_TYPE), changed], options=options)
    block = json.loads(messages[1].value)["checksum"]
    assert (block["current"], block["previous"]) == (
        row_checksum(EVERY_TYPE, {**UPDATED, "id": 7}),
        row_checksum(EVERY_TYPE, EVERY_TYPE_ROW),
    )
    decoder = changefeed_decoder("simple-json", options)
    assert [e.op for m in messages for e in decoder.decode(None, m.value) if e.kind == "row"] == ["update"]


GARBAGE = [None, True, -1, 2**40, 1.5, "", "x", "-0", [], {}, {"value": "x"}, {"location": 3, "value": 1}, ["a"]]


def test_garbage_in_checked_fields_is_a_decode_error():
    """Every field the verification reads, given each garbage value: events or a DecodeError, never a crash.
    (Avro values are typed by their writer schema; test_fuzz flips their bytes.)"""
    values = json_messages()
    decoder_options = simple_options()
    for field in ["version", "corrupted", "current", "previous", None]:
        for column in [None, *[c.name for c in EVERY_TYPE.columns]]:
            for junk in GARBAGE:

                def change(doc, field=field, column=column, junk=junk):
                    if field is not None:
                        doc["checksum"][field] = junk
                    if column is not None:
                        doc["data"][column] = junk
                        doc["old"][column] = junk

                bad = tampered(values[2], change)
                decoder = changefeed_decoder("simple-json", decoder_options)
                decoder.decode(None, values[0])
                try:
                    decoder.decode(None, bad)
                except DecodeError:
                    pass


def test_simple_claim_check_rows_are_checked_from_their_file(tmp_path):
    options = simple_options(
        **{
            "large-message-handle-option": "claim-check",
            "large-message-threshold": 300,
            "claim-check-storage-uri": str(tmp_path),
        }
    )
    messages = encode_stream("simple-json", simple_stream(), options=options)
    assert all(json.loads(m.value).get("claimCheckLocation") for m in messages[1:])
    want = [simple_sim.expected(e, options, "json").to_dict() for e in simple_stream()]
    assert decode_partitions("simple-json", messages, options) == {0: want}
    location = json.loads(messages[1].value)["claimCheckLocation"]  # the insert's file
    claim = tmp_path / location.rsplit("/", 1)[1]
    document = json.loads(claim.read_text())
    inner = tampered(base64.b64decode(document["value"]), lambda doc: doc["data"].update(vc="tampered"))
    claim.write_text(json.dumps({**document, "value": base64.b64encode(inner).decode()}))
    with pytest.raises(DecodeError, match="row checksum mismatch"):
        decode_partitions("simple-json", messages, options)
