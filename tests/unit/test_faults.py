"""Transient faults are not data faults: a registry, claim-check store or broker that is down, slow or refuses
the credentials raises a named TransientFault with one line (credentials redacted); only a message that is
itself bad (an unknown schema id, a missing claim-check file) is a DecodeError for quarantine. Everything
here runs against real servers on loopback (the registry stand-in, closed ports, a silent socket)."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.bronze.kafka_reader import (
    MESSAGE_SCHEMA,
    BrokerWatch,
    metadata_admin,
    metadata_consumer,
    read_range,
)
from spark_jobs.codecs import DecodeError, make_decoder
from spark_jobs.codecs.large_message import read_claim_check, write_claim_check
from spark_jobs.codecs.schema_registry import SchemaRegistryClient, clear_cache
from spark_jobs.errors import (
    BrokerUnavailableError,
    ClaimCheckUnavailableError,
    CommitConflictError,
    DbtError,
    RegistryUnavailableError,
    TransientFault,
    commit_conflict_in,
    redact_address,
    transient_fault_in,
)
from spark_jobs.silver.decode import decode_batches
from ticdc_devkit.processes import free_port
from ticdc_devkit.registry import StandInRegistry
from ticdc_devkit.simulator.model import Column, RowChange, Table
from ticdc_devkit.simulator.stream import encode_stream

ITEMS = Table("f", "items", (Column("id", "int", nullable=False), Column("name", "varchar(8)")), key=("id",))


# ---- the line, the redaction, the way back from a Spark task -------------------------------------------


def test_a_fault_is_one_line_naming_source_service_address_and_what_to_check():
    fault = RegistryUnavailableError.at(
        "https://alice:s3cret@registry:8081", "answered HTTP 503", "the registry's health", "shop"
    )
    assert (
        str(fault)
        == "source shop: schema registry https://registry:8081 answered HTTP 503; check the registry's health"
    )
    assert "\n" not in str(fault) and "s3cret" not in str(fault)
    assert isinstance(fault, TransientFault) and not isinstance(fault, DecodeError)
    copied = pickle.loads(pickle.dumps(fault))
    assert (type(copied), str(copied)) == (RegistryUnavailableError, str(fault))
    anonymous = BrokerUnavailableError.at("127.0.0.1:9092", "unreachable", "Kafka")
    assert str(anonymous.for_source("kl")) == "source kl: Kafka broker 127.0.0.1:9092 unreachable; check Kafka"


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("http://u:p%40ss@reg:8081/ctx", "http://reg:8081/ctx"),
        ("user:pw@10.0.0.1:9092,other:pw2@10.0.0.2:9092", "10.0.0.1:9092,10.0.0.2:9092"),
        (
            "https://acct.blob.core.windows.net/cc?sv=2024&sig=abc%2Fdef",
            "https://acct.blob.core.windows.net/cc?sv=***&sig=***",
        ),
        ("/data/claim@check/dir", "/data/claim@check/dir"),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
    ],
)
def test_addresses_lose_their_credentials(address, shown):
    assert redact_address(address) == shown


def test_a_fault_raised_in_a_spark_task_comes_back_as_itself():
    """Spark hands a task's exception to the driver as text holding the worker's traceback."""
    try:
        raise ClaimCheckUnavailableError.at(
            "/mnt/cc", "cannot be read: PermissionError: Permission denied", "the mount"
        )
    except ClaimCheckUnavailableError as exc:
        worker_traceback = "".join(traceback.format_exception(exc))
    from_spark = RuntimeError(
        f"An exception was thrown from the Python worker.\n{worker_traceback}\n\tat org.apache..."
    )
    fault = transient_fault_in(from_spark, "shop")
    assert type(fault) is ClaimCheckUnavailableError
    assert (
        str(fault)
        == "source shop: claim-check store /mnt/cc cannot be read: PermissionError: Permission denied; check the mount"
    )
    assert transient_fault_in(RuntimeError("ValueError: bad\nspark_jobs.errors.KafkaRangeError: x"), "shop") is None


@pytest.mark.parametrize(
    ("iceberg", "said"),
    [  # Iceberg 1.10's words when another writer's commit came first (MergingSnapshotProducer, RewriteFiles)
        (
            "ValidationException: Cannot commit, missing data files: [file:/w/gold_s.db/t/data/0-1.parquet]",
            "Cannot commit, missing data files: [file:/w/gold_s.db/t/data/0-1.parquet]",
        ),
        (
            "ValidationException: Found conflicting files that can contain records matching true: [a.parquet]",
            "Found conflicting files that can contain records matching true: [a.parquet]",
        ),
        (
            "ValidationException: Cannot commit, found new position delete for replaced data file: a.parquet",
            "Cannot commit, found new position delete for replaced data file: a.parquet",
        ),
        (
            "CommitFailedException: Cannot commit gold_s.t: metadata location changed",
            "Cannot commit gold_s.t: metadata location changed",
        ),
    ],
)
def test_a_commit_another_writer_overtook_is_transient(iceberg, said):
    """Through Spark (a Py4JJavaError) or through dbt (its failure line), the refusal is a CommitConflictError."""
    from_spark = RuntimeError(
        f"An error occurred while calling o75.sql.\n: org.apache.iceberg.exceptions.{iceberg}\n\tat x"
    )
    fault = transient_fault_in(DbtError(f"dbt build for source s failed: t: {from_spark}"), "s")
    assert type(fault) is CommitConflictError and isinstance(fault, TransientFault)
    assert str(fault) == (
        f"source s: Iceberg refused a commit: another writer committed to the table first ({said}); run again"
    )
    assert commit_conflict_in(from_spark) == said


def test_other_iceberg_validation_failures_are_not_transient():
    schema = RuntimeError("org.apache.iceberg.exceptions.ValidationException: Cannot add column, name already exists")
    assert transient_fault_in(schema, "s") is None and commit_conflict_in(schema) is None


# ---- the Schema Registry ---------------------------------------------------------------------------------


@pytest.fixture
def avro_message():
    """A registry stand-in holding one schema, and an Avro message written with it."""
    clear_cache()
    with StandInRegistry("alice", "pw-0123") as registry:
        options = {"schema-registry-url": registry.url, "schema-registry-username": "alice"}
        options["schema-registry-password"] = "pw-0123"
        [message] = encode_stream(
            "avro", [RowChange(1 << 18, "insert", ITEMS, None, {"id": 1, "name": "a"})], options=options
        )
        clear_cache()
        yield registry, options, message
    clear_cache()


@pytest.mark.parametrize("status", [401, 403, 500, 503, 429])
def test_a_registry_refusing_or_failing_is_transient(avro_message, status):
    registry, options, message = avro_message
    registry.outage(status)
    with pytest.raises(RegistryUnavailableError) as info:
        make_decoder("avro", options).decode(message.key, message.value)
    assert f"HTTP {status}" in str(info.value) and registry.url in str(info.value)
    assert "pw-0123" not in str(info.value) and "; check " in str(info.value)
    registry.outage(None)
    assert make_decoder("avro", options).decode(message.key, message.value)[0].after["id"] == "1"


def test_wrong_credentials_say_so_without_the_password(avro_message):
    _, options, message = avro_message
    with pytest.raises(RegistryUnavailableError, match=r"refused the credentials \(HTTP 401\)") as info:
        make_decoder("avro", options | {"schema-registry-password": "wrong-pw-77"}).decode(message.key, message.value)
    assert "wrong-pw-77" not in str(info.value) and "username_env" in str(info.value)


def test_a_stopped_registry_is_transient_and_serves_again_after_start(avro_message):
    registry, options, message = avro_message
    registry.stop()
    with pytest.raises(
        RegistryUnavailableError, match=r"unreachable: ConnectionError: \[Errno 111\] Connection refused"
    ):
        make_decoder("avro", options).decode(message.key, message.value)
    registry.start()
    assert make_decoder("avro", options).decode(message.key, message.value)[0].after["name"] == "a"


def test_a_registry_that_does_not_answer_times_out_as_transient():
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RegistryUnavailableError, match=r"did not answer within 0.5 s \(schema id 7\)"):
            SchemaRegistryClient(url, timeout=0.5).schema(7)


def test_an_unknown_schema_id_is_still_a_data_fault(avro_message):
    registry, _, _ = avro_message
    with pytest.raises(DecodeError, match="schema id 424242 not found") as info:
        SchemaRegistryClient(registry.url, "alice", "pw-0123").schema(424242)
    assert not isinstance(info.value, TransientFault)


def bronze_batch(messages) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {
                "topic": "t",
                "partition": 0,
                "offset": i,
                "timestamp": None,
                "key": m.key,
                "value": m.value,
                "headers": [],
            }
            for i, m in enumerate(messages)
        ],
        schema=MESSAGE_SCHEMA,
    )


def test_silver_decoding_stops_on_an_outage_instead_of_quarantining(avro_message):
    registry, options, message = avro_message
    registry.outage(503)
    with pytest.raises(RegistryUnavailableError):
        list(decode_batches(iter([bronze_batch([message])]), "avro", options))
    registry.outage(None)
    unknown = type(message)(message.topic, message.partition, message.key, b"\x00\x00\x06\x79\x42" + message.value[5:])
    [decoded] = list(decode_batches(iter([bronze_batch([message, unknown])]), "avro", options))
    assert decoded.column("kind").to_pylist() == ["row", "quarantine"]
    assert "schema id 424258 not found" in decoded.column("reason").to_pylist()[1]


# ---- the claim-check store -------------------------------------------------------------------------------


def test_a_missing_claim_check_file_is_a_data_fault(tmp_path):
    store = tmp_path / "claim-check"
    write_claim_check(str(store / "a.json"), b"k", b"v")
    assert read_claim_check("open", str(store / "a.json")) == (b"k", b"v")
    for missing in (f"file://{store}/gone.json", str(tmp_path / "no-such-store" / "a.json")):
        with pytest.raises(DecodeError, match="cannot be read") as info:
            read_claim_check("open", missing)
        assert not isinstance(info.value, TransientFault)


def test_a_claim_check_store_denying_permission_is_transient(tmp_path):
    store = tmp_path / "claim-check"
    write_claim_check(str(store / "a.json"), b"k", b"v")
    store.chmod(0)
    try:
        outcome = _as_unprivileged(lambda: read_claim_check("open", str(store / "a.json")))
    finally:
        store.chmod(0o755)
    assert outcome == (
        f"ClaimCheckUnavailableError: claim-check store {store} cannot be read: PermissionError: Permission denied;"
        " check that the store under claim-check-storage-uri is mounted/reachable and readable by this job"
    )


def _as_unprivileged(read) -> str:
    """`read()`'s outcome as `Type: text`, in a forked child that dropped root (root reads anything)."""
    if os.geteuid() != 0:
        return _outcome(read)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(writer, _outcome(read).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return text


def _outcome(read) -> str:
    try:
        return f"read {read()!r}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


# ---- the broker ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", [metadata_consumer, metadata_admin], ids=["consumer", "admin"])
def test_an_unreachable_broker_is_one_line_and_librdkafka_prints_nothing(capfd, client):
    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnavailableError) as info, client({"bootstrap.servers": bootstrap}, "kl") as c:
        c.list_topics(timeout=2)
    line = str(info.value)
    assert line.startswith(f"source kl: Kafka broker {bootstrap} unreachable for 2 s, ")
    assert "connect attempts (last: Connection refused) while asking for topic metadata and offsets" in line
    assert "; check that Kafka runs and kafka.bootstrap_servers" in line
    attempts = int(line.split("unreachable for 2 s, ")[1].split(" ")[0])
    assert attempts >= 5
    out, err = capfd.readouterr()
    assert "Connect to" not in out + err and "rdkafka" not in out + err


def test_reading_a_range_from_an_unreachable_broker_is_one_line(capfd):
    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnavailableError) as info:
        list(read_range({"bootstrap.servers": bootstrap}, "t", 1, 5, 9, poll_timeout=2))
    assert str(info.value).startswith(f"Kafka broker {bootstrap} unreachable for 3 s, ")
    assert "while reading t[1] at offset 5; check " in str(info.value)
    out, err = capfd.readouterr()
    assert "Connect to" not in out + err


def test_a_watch_counts_suppressed_repeats():
    watch = BrokerWatch("b:9092")
    watch.client_settings()["logger"].error(
        "FAIL [rdkafka#consumer-1] [thrd:b:9092/bootstrap]: b:9092/bootstrap: Connect to ipv4#10.1.1.1:9092 failed: "
        "Connection refused (after 0ms in state CONNECT, 28 identical error(s) suppressed)"
    )
    assert (watch.connect_failures, watch.last_failure) == (29, "Connection refused")
    assert (
        watch.summary()
        == "Kafka broker b:9092: 29 connect attempts failed before it answered (last: Connection refused)"
    )


# ---- the catalog (cluster mode) --------------------------------------------------------------------------


def test_an_unreachable_catalog_is_one_line_before_any_jvm():
    from spark_jobs.config import CatalogSettings
    from spark_jobs.errors import CatalogUnavailableError
    from spark_jobs.runtime.spark_session import check_catalog_reachable

    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(CatalogUnavailableError) as info:
        check_catalog_reachable(CatalogSettings(uri=f"thrift://{closed}", warehouse="s3a://lake/w"), 2)
    assert str(info.value) == (
        f"catalog thrift://{closed} unreachable (Connection refused); check that the metastore (or REST catalog) "
        "service is running and runtime.catalog.uri"
    )


def test_a_step_in_cluster_mode_with_the_metastore_down_exits_75_with_one_line(tmp_path):
    closed = f"127.0.0.1:{free_port()}"
    (tmp_path / "pipeline.yaml").write_text(
        "runtime:\n"
        "  mode: cluster\n"
        f"  local_dir: {tmp_path / 'lake'}\n"
        f"  catalog: {{type: hive, uri: 'thrift://{closed}', warehouse: 's3a://lake/w'}}\n"
        "sources:\n"
        "  - name: shop\n"
        "    protocol: canal-json\n"
        "    topics: [shop_cdc]\n"
        "    kafka: {bootstrap_servers: '127.0.0.1:9'}\n"
    )
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ticdc-lake"),
            "land",
            "--source",
            "shop",
            "--config",
            str(tmp_path / "pipeline.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 75, run.stderr
    assert run.stderr.strip().splitlines() == [
        f"ticdc-lake land: catalog thrift://{closed} unreachable (Connection refused); check that the metastore "
        "(or REST catalog) service is running and runtime.catalog.uri"
    ]
