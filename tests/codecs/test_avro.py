"""TiCDC Avro (Confluent Schema Registry): simulator round trips, the registry client, malformed input.

There are no Avro golden bytes from TiCDC's own tests, so the messages come from our simulator
(built from the protocol page and TiCDC's encoder) and from schemas written out by hand here.
The registry is the stand-in in devkit/ticdc_devkit/registry.py (the real one is Java).
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import shutil
import subprocess
from decimal import Decimal

import fastavro
import pytest

from spark_jobs.codecs import ConfigError, DecodeError, make_decoder
from spark_jobs.codecs.schema_registry import SchemaRegistryClient, clear_cache
from spark_jobs.errors import RegistryUnavailableError
from tests.codecs.helpers import EVERY_BYTE, INTEGER_COLUMNS, decode_partitions, integer_limits
from ticdc_devkit.registry import StandInRegistry, running_registry
from ticdc_devkit.simulator.avro import expected
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import encode_stream, partition_events

ZONE = "Asia/Shanghai"

ALL_TYPES = Table(
    "shop",
    "all_types",
    (
        Column("id", "int", nullable=False),
        *INTEGER_COLUMNS,
        Column("dec", "decimal(10,4)"),
        Column("f", "float"),
        Column("d", "double"),
        Column("b", "bit(10)"),
        Column("dt", "date"),
        Column("dtm", "datetime(6)"),
        Column("ts", "timestamp(3)"),
        Column("tm", "time"),
        Column("y", "year"),
        Column("c", "char(10)"),
        Column("vc", "varchar(64)"),
        Column("vc_default", "varchar(8)", default="dflt"),
        Column("bin", "binary(4)"),
        Column("vb", "varbinary(256)"),
        Column("bl", "blob"),
        Column("e", "enum('a','b,c','it''s')"),
        Column("s", "set('x','y','z')"),
        Column("j", "json"),
        Column("odd-name", "int"),
        Column("code", "varchar(8)", nullable=False),
    ),
    key=("code", "id"),
)

MAX_ROW = {
    "id": 1,
    "code": "k1",
    **integer_limits(INTEGER_COLUMNS, signed="max", unsigned="max"),
    "dec": Decimal("999999.9999"),
    "f": 3.4e38,
    "d": 1.7976931348623157e308,
    "b": 1023,
    "dt": dt.date(9999, 12, 31),
    "dtm": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999000),
    "tm": dt.timedelta(hours=838, minutes=59, seconds=59),
    "y": 2155,
    "c": "ü字",
    "vc": 'héllo 🌍 世界 "q" \\ \n',
    "vc_default": "v",
    "bin": b"\x00\x01\xfe\xff",
    "vb": EVERY_BYTE,
    "bl": EVERY_BYTE[::-1],
    "e": "b,c",
    "s": ("x", "z"),
    "j": '{"k": [1, 2.5, "x"], "u": "é"}',
    "odd-name": 7,
}
MIN_ROW = {
    "id": 2,
    "code": "k2",
    **integer_limits(INTEGER_COLUMNS, signed="min", unsigned="min"),
    "biu": 9223372036854775808,
    "dec": Decimal("-0.0001"),
    "f": -1.1,
    "d": 0.1,
    "b": 0,
    "dt": dt.date(1000, 1, 1),
    "dtm": dt.datetime(1000, 1, 1, 0, 0, 0, 1),
    "ts": dt.datetime(1970, 1, 1, 0, 0, 1, 5000),
    "tm": -dt.timedelta(hours=838, minutes=59, seconds=59),
    "y": 1901,
    "c": "",
    "vc": "",
    "vc_default": None,
    "bin": b"\x00\x00\x00\x00",
    "vb": b"",
    "bl": b"",
    "e": "it's",
    "s": (),
    "j": "null",
    "odd-name": -1,
}
NULL_ROW = {c.name: None for c in ALL_TYPES.columns} | {"id": 3, "code": "k3"}

ORDERS = Table(
    "sales",
    "orders",
    (Column("order_id", "bigint unsigned", nullable=False), Column("amount", "decimal(12,2)"), Column("note", "text")),
    key=("order_id",),
)


def ts(n: int) -> int:
    return (1_700_000_000_000 + n) << 18


def all_types_stream():
    return [
        RowChange(ts(1), "insert", ALL_TYPES, None, MAX_ROW),
        RowChange(ts(1), "insert", ALL_TYPES, None, MIN_ROW),
        RowChange(ts(2), "insert", ALL_TYPES, None, NULL_ROW),
        RowChange(
            ts(2), "insert", ORDERS, None, {"order_id": 18446744073709551615, "amount": Decimal("12.5"), "note": "n"}
        ),
        Watermark(ts(3)),
        Ddl(ts(4), "shop", "all_types", "ALTER TABLE all_types COMMENT 'x'", "alter_table", ALL_TYPES, ALL_TYPES),
        RowChange(ts(5), "update", ALL_TYPES, MAX_ROW, MAX_ROW | {"vc": "changed", "f": 0.0, "biu": 1}),
        RowChange(ts(6), "update", ALL_TYPES, MIN_ROW, MIN_ROW | {"id": 20}),  # key change: delete + insert
        RowChange(ts(7), "delete", ALL_TYPES, NULL_ROW, None),
        RowChange(ts(8), "delete", ORDERS, {"order_id": 18446744073709551615, "amount": None, "note": None}, None),
        Watermark(ts(9)),
    ]


def options(url: str, extension: bool, decimal_mode: str, unsigned_mode: str) -> dict:
    return {
        "schema-registry-url": url,
        "enable-tidb-extension": extension,
        "avro-decimal-handling-mode": decimal_mode,
        "avro-bigint-unsigned-handling-mode": unsigned_mode,
        "time-zone": ZONE,
    }


def expected_dicts(events, opts):
    """Expected events in the order encode_stream emits them: partition by partition."""
    out = []
    for part in partition_events(events, 2, ddl_to_all=True, dispatch="index-value"):
        out.extend(x.to_dict() for x in (expected(e, opts) for e in part) if x is not None)
    return out


@pytest.fixture(scope="module")
def registry():
    with StandInRegistry() as reg:
        yield reg


# ---- (a) round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extension,decimal_mode,unsigned_mode",
    list(itertools.product([False, True], ["precise", "string"], ["long", "string"])),
)
def test_round_trip_every_type(registry, extension, decimal_mode, unsigned_mode):
    opts = options(registry.url, extension, decimal_mode, unsigned_mode)
    events = all_types_stream()
    messages = encode_stream("avro", events, partitions=2, options=opts, dispatch="index-value")
    assert {m.partition for m in messages} == {0, 1}
    assert len(messages) == 9  # 8 row changes, the key-changing update split in two; no DDL, no watermark
    decoded = decode_partitions("avro", messages, opts)
    assert [e for part in decoded.values() for e in part] == expected_dicts(events, opts)


def test_exact_canonical_text(registry):
    """The values as literal text, so a bug shared by the simulator and expected() cannot hide."""
    opts = options(registry.url, True, "precise", "long")
    messages = encode_stream(
        "avro",
        [RowChange(ts(1), "insert", ALL_TYPES, None, MAX_ROW), RowChange(ts(2), "insert", ALL_TYPES, None, MIN_ROW)],
        options=opts,
    )
    first, second = (make_decoder("avro", opts).decode(m.key, m.value)[0] for m in messages)
    assert first.after == {
        "id": "1",
        "ti": "127",
        "tiu": "255",
        "si": "32767",
        "siu": "65535",
        "mi": "8388607",
        "miu": "16777215",
        "i": "2147483647",
        "iu": "4294967295",
        "bi": "9223372036854775807",
        "biu": "18446744073709551615",
        "dec": "999999.9999",
        "f": "3.4e+38",
        "d": "1.7976931348623157e+308",
        "b": "1023",
        "dt": "9999-12-31",
        "dtm": "9999-12-31 23:59:59.999999",
        "ts": "2038-01-19 03:14:07.999",
        "tm": "838:59:59",
        "y": "2155",
        "c": "ü字",
        "vc": 'héllo 🌍 世界 "q" \\ \n',
        "vc_default": "v",
        "bin": "AAH+/w==",
        "vb": EVERY_BYTE_B64,
        "bl": EVERY_BYTE_REVERSED_B64,
        "e": "b,c",
        "s": "x,z",
        "j": '{"k": [1, 2.5, "x"], "u": "é"}',
        "odd_name": "7",
        "code": "k1",
    }
    assert second.after["biu"] == "9223372036854775808"
    assert second.after["dec"] == "-0.0001" and second.after["f"] == "-1.1" and second.after["d"] == "0.1"
    assert second.after["tm"] == "-838:59:59" and second.after["dtm"] == "1000-01-01 00:00:00.000001"
    assert second.after["ts"] == "1970-01-01 00:00:01.005" and second.after["b"] == "0"
    assert second.after["s"] == "" and second.after["e"] == "it's" and second.after["vb"] == ""
    assert first.key_columns == ["id", "code"]  # table order, not the index's ("code", "id")
    assert first.commit_ts == ts(1) and first.op == "insert" and first.flags == ["types_partial"]
    assert first.column_types["tiu"] == "int unsigned" and first.column_types["biu"] == "bigint unsigned"
    assert first.column_types["dec"] == "decimal(10,4)" and first.column_types["vb"] == "blob"
    assert first.column_types["vc"] == "text" and first.column_types["s"] == "set"


EVERY_BYTE_B64 = (
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElK"
    "S0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SV"
    "lpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g"
    "4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w=="
)
EVERY_BYTE_REVERSED_B64 = (
    "//79/Pv6+fj39vX08/Lx8O/u7ezr6uno5+bl5OPi4eDf3t3c29rZ2NfW1dTT0tHQz87NzMvKycjHxsXEw8LBwL++vby7"
    "urm4t7a1tLOysbCvrq2sq6qpqKempaSjoqGgn56dnJuamZiXlpWUk5KRkI+OjYyLiomIh4aFhIOCgYB/fn18e3p5eHd2"
    "dXRzcnFwb25tbGtqaWhnZmVkY2JhYF9eXVxbWllYV1ZVVFNSUVBPTk1MS0pJSEdGRURDQkFAPz49PDs6OTg3NjU0MzIx"
    "MC8uLSwrKikoJyYlJCMiISAfHh0cGxoZGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwIBAA=="
)


def test_simulator_writes_what_ticdc_writes(registry):
    """Schema shape and raw payload of the simulator, checked against the protocol page by hand."""
    opts = options(registry.url, True, "precise", "long")
    message = encode_stream("avro", [RowChange(ts(1), "insert", ALL_TYPES, None, MAX_ROW)], options=opts)[0]
    assert message.value[0] == 0 and message.key[0] == 0
    value_schema = json.loads(registry._schemas[int.from_bytes(message.value[1:5], "big")])
    key_schema = json.loads(registry._schemas[int.from_bytes(message.key[1:5], "big")])
    assert (value_schema["name"], value_schema["namespace"]) == ("all_types", "default.shop")
    assert [f["name"] for f in key_schema["fields"]] == ["id", "code"]
    fields = {f["name"]: f for f in value_schema["fields"]}
    assert fields["id"]["type"] == {"type": "int", "connect.parameters": {"tidb_type": "INT"}}
    assert fields["iu"]["type"] == ["null", {"type": "long", "connect.parameters": {"tidb_type": "INT UNSIGNED"}}]
    assert fields["f"]["type"][1]["type"] == "float"
    assert fields["b"]["type"][1] == {"type": "bytes", "connect.parameters": {"length": "10", "tidb_type": "BIT"}}
    assert fields["dec"]["type"][1] == {
        "type": "bytes",
        "connect.parameters": {"tidb_type": "DECIMAL"},
        "logicalType": "decimal",
        "precision": 10,
        "scale": 4,
    }
    assert fields["e"]["type"][1]["connect.parameters"] == {"allowed": "a,b\\,c,it's", "tidb_type": "ENUM"}
    assert fields["vc_default"] == {
        "default": "dflt",
        "name": "vc_default",
        "type": [{"type": "string", "connect.parameters": {"tidb_type": "TEXT"}}, "null"],
    }
    assert [f["name"] for f in value_schema["fields"][-3:]] == [
        "_tidb_op",
        "_tidb_commit_ts",
        "_tidb_commit_physical_time",
    ]
    raw = fastavro.schemaless_reader(io.BytesIO(message.value[5:]), fastavro.parse_schema(value_schema))
    assert raw["ts"] == "2038-01-19 11:14:07.999"  # rendered in the changefeed's zone (UTC+8)
    assert raw["biu"] == -1 and raw["b"] == b"\x03\xff" and raw["_tidb_op"] == "c"
    assert raw["_tidb_commit_physical_time"] == 1_700_000_000_001


def handmade(fields: list, record: dict, name="t", namespace="default.db") -> tuple[str, bytes]:
    schema = {"type": "record", "name": name, "namespace": namespace, "fields": fields}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return json.dumps(schema), out.getvalue()


def frame(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def col(name, avro, tidb_type, nullable=False, first=True, **extra):
    t = {"type": avro, "connect.parameters": {"tidb_type": tidb_type, **extra.pop("params", {})}, **extra}
    return {"name": name, "type": (["null", t] if first else [t, "null"]) if nullable else t}


def test_handmade_message_independent_of_simulator():
    """A message built here from a literal schema (FLOAT sent as double as the page says, [T, "null"] unions)."""
    key_text, key_body = handmade([col("id", "long", "BIGINT UNSIGNED")], {"id": -2})
    fields = [
        col("id", "long", "BIGINT UNSIGNED"),
        col("amount", "bytes", "DECIMAL", nullable=True, logicalType="decimal", precision=6, scale=3),
        col("ratio", "double", "FLOAT", nullable=True, first=False),
        col("flags", "bytes", "BIT", params={"length": "16"}),
        col("at", "string", "TIMESTAMP"),
        col("dur", "string", "TIME"),
        col("big", "string", "BIGINT UNSIGNED"),
        col("money", "string", "DECIMAL"),
        {"name": "_tidb_op", "type": "string"},
        {"name": "_tidb_commit_ts", "type": "long"},
        {"name": "_tidb_commit_physical_time", "type": "long"},
    ]
    value_text, value_body = handmade(
        fields,
        {
            "id": -2,
            "amount": Decimal("-123.450"),
            "ratio": 0.30000001192092896,
            "flags": b"\x01\x00",
            "at": "2024-03-01 00:30:00.25",
            "dur": "-01:02:03.5",
            "big": "18446744073709551615",
            "money": "-0.10",
            "_tidb_op": "u",
            "_tidb_commit_ts": 449000000000000000,
            "_tidb_commit_physical_time": 0,
        },
    )
    with StandInRegistry() as reg:
        key_id, value_id = reg.register("t-key", key_text), reg.register("t-value", value_text)
        decoder = make_decoder("avro", {"schema-registry-url": reg.url, "time-zone": "+08:00"})
        [event] = decoder.decode(frame(key_id, key_body), frame(value_id, value_body))
        [delete] = decoder.decode(frame(key_id, key_body), b"")
    assert event.to_dict() == {
        "kind": "row",
        "op": "update",
        "database": "db",
        "table": "t",
        "commit_ts": 449000000000000000,
        "key_columns": ["id"],
        "before": None,
        "after": {
            "id": "18446744073709551614",
            "amount": "-123.450",
            "ratio": "0.3",
            "flags": "256",
            "at": "2024-02-29 16:30:00.25",
            "dur": "-01:02:03.5",
            "big": "18446744073709551615",
            "money": "-0.10",
        },
        "column_types": {
            "id": "bigint unsigned",
            "amount": "decimal(6,3)",
            "ratio": "float",
            "flags": "bit",
            "at": "timestamp",
            "dur": "time",
            "big": "bigint unsigned",
            "money": "decimal",
        },
        "schema_version": None,
        "ddl_type": None,
        "ddl_sql": None,
        "table_schema": None,
        "flags": ["old_value_missing", "types_partial"],
    }
    assert delete.to_dict()["before"] == {"id": "18446744073709551614"}
    assert delete.commit_ts is None and sorted(delete.flags) == [
        "commit_ts_inferred",
        "handle_key_only",
        "types_partial",
    ]
    assert decoder.last_columns("db", "t")[1] == {"name": "amount", "type": "decimal(6,3)", "nullable": True}


def test_schema_change_shows_in_last_columns(registry):
    v2 = Table(
        "shop",
        "evolving",
        (Column("id", "int", False), Column("a", "varchar(5)"), Column("e", "enum('p','q')")),
        ("id",),
    )
    v1 = Table("shop", "evolving", v2.columns[:2], ("id",))
    opts = options(registry.url, True, "precise", "long")
    messages = encode_stream(
        "avro",
        [
            RowChange(ts(1), "insert", v1, None, {"id": 1, "a": "x"}),
            RowChange(ts(2), "insert", v2, None, {"id": 2, "a": "y", "e": "q"}),
        ],
        options=opts,
    )
    assert messages[0].value[1:5] != messages[1].value[1:5] and messages[0].key[1:5] == messages[1].key[1:5]
    decoder = make_decoder("avro", opts)
    decoder.decode(messages[0].key, messages[0].value)
    assert [c["name"] for c in decoder.last_columns("shop", "evolving")] == ["id", "a"]
    decoder.decode(messages[1].key, messages[1].value)
    assert decoder.last_columns("shop", "evolving") == [
        {"name": "id", "type": "int", "nullable": False},
        {"name": "a", "type": "text", "nullable": True},
        {"name": "e", "type": "enum", "nullable": True, "elements": ["p", "q"]},
    ]
    assert decoder.last_columns("shop", "missing") is None


def test_extension_required_but_absent(registry):
    messages = encode_stream(
        "avro",
        [RowChange(ts(1), "insert", ORDERS, None, {"order_id": 1})],
        options=options(registry.url, False, "precise", "long"),
    )
    decoder = make_decoder("avro", options(registry.url, True, "precise", "long"))
    with pytest.raises(DecodeError, match="enable-tidb-extension is set") as info:
        decoder.decode(messages[0].key, messages[0].value)
    assert info.value.where.startswith("value schema id")


def test_bad_options():
    with pytest.raises(ConfigError, match="schema-registry-url"):
        make_decoder("avro", {})
    with pytest.raises(ConfigError, match="avro-decimal-handling-mode"):
        make_decoder("avro", {"schema-registry-url": "http://x", "avro-decimal-handling-mode": "double"})
    with pytest.raises(ConfigError, match="time-zone"):
        make_decoder("avro", {"schema-registry-url": "http://x", "time-zone": "Mars/Olympus"})


# ---- (b) the registry client ----------------------------------------------------------------------


def test_one_registry_get_per_schema_id():
    clear_cache()
    with StandInRegistry() as reg:
        opts = options(reg.url, True, "precise", "long")
        messages = encode_stream("avro", all_types_stream() * 3, partitions=2, options=opts, dispatch="index-value")
        ids = {int.from_bytes(m.key[1:5], "big") for m in messages} | {
            int.from_bytes(m.value[1:5], "big") for m in messages if m.value
        }
        assert len(ids) == 4  # key and value schema of two tables
        decoded = decode_partitions("avro", messages, opts)
        assert len(decoded) == 2 and sum(map(len, decoded.values())) == 27
        gets = [path for method, path in reg.requests if method == "GET"]
        assert sorted(gets) == sorted(f"/schemas/ids/{i}" for i in ids)


def test_basic_auth():
    clear_cache()
    with running_registry("alice", "s3cr3t-pw") as url:
        opts = options(url, True, "precise", "long") | {
            "schema-registry-username": "alice",
            "schema-registry-password": "s3cr3t-pw",
        }
        [message] = encode_stream("avro", [RowChange(ts(1), "insert", ORDERS, None, {"order_id": 5})], options=opts)
        assert make_decoder("avro", opts).decode(message.key, message.value)[0].after["order_id"] == "5"

        clear_cache()
        in_url = url.replace("http://", "http://alice:s3cr3t%2Dpw@")
        decoder = make_decoder("avro", options(in_url, True, "precise", "long"))
        assert decoder.decode(message.key, message.value)[0].after["order_id"] == "5"
        assert "s3cr3t" not in decoder.registry.url

        clear_cache()
        wrong = make_decoder("avro", opts | {"schema-registry-password": "wrong-pw-123"})
        with pytest.raises(RegistryUnavailableError) as info:
            wrong.decode(message.key, message.value)
        assert "refused the credentials (HTTP 401)" in str(info.value)
        assert "wrong-pw-123" not in str(info.value) and "s3cr3t" not in str(info.value)
        assert "(schema id " in str(info.value)

        with pytest.raises(RegistryUnavailableError) as info:
            SchemaRegistryClient(url.replace("http://", "http://alice:hunter2@")).schema(1)
        assert "hunter2" not in str(info.value)


def _self_signed_cert(directory) -> tuple[str, str] | None:
    """A certificate for localhost/127.0.0.1 with the `cryptography` package, else `openssl`; None if neither."""
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    try:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            return None
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                key,
                "-out",
                cert,
                "-days",
                "1",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        return cert, key
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(private, hashes.SHA256())
    )
    with open(cert, "wb") as f:
        f.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key, "wb") as f:
        f.write(
            private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return cert, key


def test_https_with_ca_file(tmp_path):
    made = _self_signed_cert(tmp_path)
    if made is None:
        pytest.skip("neither the cryptography package nor the openssl command is available to make a test certificate")
    cert, key = made
    clear_cache()
    with StandInRegistry("bob", "pw", certfile=cert, keyfile=key) as reg:
        assert reg.url.startswith("https://")
        opts = options(reg.url, True, "precise", "long") | {
            "schema-registry-username": "bob",
            "schema-registry-password": "pw",
            "schema-registry-ca-file": cert,
        }
        [message] = encode_stream("avro", [RowChange(ts(1), "insert", ORDERS, None, {"order_id": 9})], options=opts)
        assert make_decoder("avro", opts).decode(message.key, message.value)[0].after["order_id"] == "9"
        clear_cache()
        untrusting = make_decoder("avro", {k: v for k, v in opts.items() if k != "schema-registry-ca-file"})
        with pytest.raises(RegistryUnavailableError, match="unreachable: SSLError"):
            untrusting.decode(message.key, message.value)


def test_unknown_schema_id_names_registry_without_credentials():
    with running_registry("u", "topsecret") as url:
        decoder = make_decoder("avro", {"schema-registry-url": url.replace("http://", "http://u:topsecret@")})
        with pytest.raises(DecodeError) as info:
            decoder.decode(frame(987654321, b"\x02"), None)
    assert info.value.reason == f"schema id 987654321 not found in registry {url}"
    assert "topsecret" not in str(info.value) and info.value.protocol == "avro"


# ---- (c) malformed input --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample(registry):
    opts = options(registry.url, True, "precise", "long")
    [message] = encode_stream("avro", [RowChange(ts(1), "insert", ALL_TYPES, None, MAX_ROW)], options=opts)
    decoder = make_decoder("avro", opts)
    decoder.decode(message.key, message.value)
    return decoder, message


def test_bad_magic_byte(sample):
    decoder, m = sample
    with pytest.raises(DecodeError) as info:
        decoder.decode(m.key, b"\x01" + m.value[1:])
    assert (info.value.protocol, info.value.where) == ("avro", "value byte 0")
    assert str(info.value) == "avro: value starts with magic byte 0x01, expected 0x00 (at value byte 0)"
    with pytest.raises(DecodeError, match="key starts with magic byte 0x7b") as info:
        decoder.decode(b'{"id": 1}', m.value)
    assert info.value.where == "key byte 0"


def test_truncated_at_every_length(sample):
    decoder, m = sample
    for cut in range(len(m.value)):
        if cut == 0:
            continue  # an empty value is a delete, not a truncation
        with pytest.raises(DecodeError) as info:
            decoder.decode(m.key, m.value[:cut])
        assert info.value.protocol == "avro" and info.value.where.startswith("value"), cut
    for cut in range(1, len(m.key)):
        with pytest.raises(DecodeError) as info:
            decoder.decode(m.key[:cut], m.value)
        assert info.value.where.startswith("key"), cut


def test_trailing_bytes(sample):
    decoder, m = sample
    with pytest.raises(DecodeError, match="1 bytes after the Avro record") as info:
        decoder.decode(m.key, m.value + b"\x00")
    assert info.value.where == "value"


def test_every_flipped_byte_is_decoded_or_a_decode_error(sample):
    decoder, m = sample
    errors = 0
    for position in range(len(m.value)):
        flipped = bytearray(m.value)
        flipped[position] ^= 0xFF
        try:
            decoder.decode(m.key, bytes(flipped))
        except DecodeError as exc:
            assert exc.protocol == "avro" and exc.where, position
            errors += 1
    assert errors > len(m.value) // 4


class RawBody(bytes):
    """Avro bytes written by hand where fastavro would refuse to write the value."""


def test_values_that_do_not_fit_their_type():
    cases = [
        (col("u", "int", "INT UNSIGNED"), -1, "value.u"),
        (col("big", "string", "BIGINT UNSIGNED"), "18446744073709551616", "value.big"),
        (col("big", "string", "BIGINT UNSIGNED"), "12a", "value.big"),
        (col("m", "string", "DECIMAL"), "1.2.3", "value.m"),
        (
            col("d", "bytes", "DECIMAL", logicalType="decimal", precision=4, scale=2),
            RawBody(b"\x04\x30\x39"),
            "value.d",
        ),
        (col("e", "string", "ENUM", params={"allowed": "a,b"}), "c", "value.e"),
        (col("s", "string", "SET", params={"allowed": "a,b"}), "a,c", "value.s"),
        (col("dt", "string", "DATETIME"), "2020-13-01 00:00:00", "value.dt"),
        (col("t", "string", "TIME"), "12:00", "value.t"),
        (col("y", "int", "YEAR"), 3000, "value.y"),
        (col("b", "bytes", "BIT"), b"\x01" * 9, "value.b"),
        (col("f", "double", "DOUBLE"), float("nan"), "value.f"),
    ]
    with StandInRegistry() as reg:
        decoder = make_decoder("avro", {"schema-registry-url": reg.url})
        for number, (field, raw, where) in enumerate(cases):
            if isinstance(raw, RawBody):  # 123.45 in DECIMAL(4,2): fastavro refuses to write it
                text, body = (
                    json.dumps({"type": "record", "name": f"t{number}", "namespace": "default.db", "fields": [field]}),
                    bytes(raw),
                )
            else:
                text, body = handmade([field], {field["name"]: raw}, name=f"t{number}")
            schema_id = reg.register(f"t{number}-value", text)
            with pytest.raises(DecodeError) as info:
                decoder.decode(None, frame(schema_id, body))
            assert (info.value.protocol, info.value.where) == ("avro", where), field


def test_schemas_that_are_not_ticdc():
    cases = [
        (
            {"type": "record", "name": "t", "namespace": "default.db", "fields": [{"name": "x", "type": "int"}]},
            "field x has no connect.parameters.tidb_type",
        ),
        ({"type": "record", "name": "t", "namespace": "nodot", "fields": []}, "namespace"),
        (
            {"type": "record", "name": "t", "namespace": "default.db", "fields": [col("x", "string", "INT")]},
            "tidb_type INT cannot be Avro 'string'",
        ),
        (
            {"type": "record", "name": "t", "namespace": "default.db", "fields": [col("x", "int", "GEOMETRY")]},
            "unknown tidb_type",
        ),
        ({"type": "array", "items": "int"}, "not an Avro record schema"),
    ]
    with StandInRegistry() as reg:
        decoder = make_decoder("avro", {"schema-registry-url": reg.url})
        for number, (schema, reason) in enumerate(cases):
            schema_id = reg.register(f"s{number}-value", json.dumps(schema))
            with pytest.raises(DecodeError, match=reason) as info:
                decoder.decode(None, frame(schema_id, b"\x00"))
            assert info.value.where == f"value schema id {schema_id}"


def test_empty_message():
    decoder = make_decoder("avro", {"schema-registry-url": "http://127.0.0.1:9"})
    with pytest.raises(DecodeError, match="neither key nor value"):
        decoder.decode(None, None)
    with pytest.raises(DecodeError, match="shorter than the 5-byte Confluent header") as info:
        decoder.decode(b"\x00\x00", None)
    assert info.value.where == "key"


def test_key_and_value_of_different_tables(registry):
    opts = options(registry.url, True, "precise", "long")
    a, b = encode_stream(
        "avro",
        [
            RowChange(ts(1), "insert", ORDERS, None, {"order_id": 1}),
            RowChange(ts(1), "insert", ALL_TYPES, None, MAX_ROW),
        ],
        options=opts,
    )
    with pytest.raises(
        DecodeError, match=r"key is a default\.sales\.orders record but value a default\.shop\.all_types"
    ):
        make_decoder("avro", opts).decode(a.key, b.value)
