"""`ticdc-lake decode`: canonical events as sorted JSON lines; one clear line and non-zero on bad input."""

import base64
import json
import subprocess
import sys
from pathlib import Path

from tests.reference_vectors import load_vector

CLI = [str(Path(sys.executable).parent / "ticdc-lake"), "decode"]


def run(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def test_one_message_from_files(tmp_path):
    vector = load_vector("canal_json_05_ddl_create_tidb_ext.json")
    (tmp_path / "v").write_bytes(vector["value_bytes"])
    result = run(
        "--protocol", "canal-json", "--option", "enable-tidb-extension=true", "--value-file", str(tmp_path / "v")
    )
    assert result.returncode == 0, result.stderr
    event = json.loads(result.stdout)
    assert event["kind"] == "ddl" and event["commit_ts"] == 417318403368288260 and event["ddl_type"] == "create_table"
    assert result.stdout.startswith('{"after":null,"before":null,')


def test_input_lines_carry_state_across_messages(tmp_path):
    """Simple needs the bootstrap's schema for the insert that follows it."""
    lines = [
        load_vector("simple_02_bootstrap.json"),
        load_vector("simple_01_ddl.json"),
        load_vector("simple_03_insert.json"),
    ]
    (tmp_path / "in.jsonl").write_text(
        "\n".join(
            json.dumps({"key": None, "value": base64.b64encode(v["value_bytes"]).decode(), "partition": 0, "offset": i})
            for i, v in enumerate(lines)
        )
    )
    result = run("--protocol", "simple-json", "--input", str(tmp_path / "in.jsonl"))
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["kind"] for e in events] == ["bootstrap", "ddl", "row"]
    assert events[2]["after"]["age"] == "25" and events[2]["commit_ts"] == 447984084414103554


def test_bad_input_is_one_line_and_nonzero(tmp_path):
    (tmp_path / "in.jsonl").write_text(
        json.dumps(
            {"key": None, "value": base64.b64encode(b'{"type": "INSERT"').decode(), "partition": 2, "offset": 41}
        )
        + "\n"
    )
    result = run("--protocol", "canal-json", "--input", str(tmp_path / "in.jsonl"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "line 1 (partition 2, offset 41): canal-json:" in result.stderr
    assert "Traceback" not in result.stderr
    unknown = run("--protocol", "open", "--option", "no-such-option=1", "--value-file", str(tmp_path / "in.jsonl"))
    assert unknown.returncode == 2 and "unknown option 'no-such-option' for protocol open" in unknown.stderr
