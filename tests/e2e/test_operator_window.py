"""The operator's window in a real browser: the status page and the dbt docs site inside `airflow api-server`.

Two ingest DAG runs of one source (the second with more changes, the first with two messages no decoder
accepts), then an API server on loopback with this repository's plugins. Headless Chromium (Debian's, driven
by Playwright) logs in through Airflow's login page, reads the status page and checks its numbers against
the tables, opens the dbt docs page of a gold table and its lineage graph. Every plugin route refuses an
anonymous or forged request, and no page shows a secret. Screenshots go to `.local/screenshots/`; with
TICDC_SAVE_README_SCREENSHOTS=1 the README's two images are written to `docs/images/` as well.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spark_jobs.gold.publish import latest_publication
from spark_jobs.runtime.tables import (
    BRONZE_LANDING_RUNS,
    BRONZE_MESSAGES,
    GOLD_TABLES,
    SILVER_DDL_EVENTS,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_RUNS,
)
from tests.conftest import REPO, TEST_HOME
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message, Watermark
from ticdc_devkit.simulator.shop_stream import shop_stream, shop_stream_more
from ticdc_devkit.simulator.stream import encode_stream

pytestmark = pytest.mark.e2e

SOURCE = "window"
PARTITIONS = 2
BAD_MESSAGES = [Message(SOURCE, 1, b"k", b"{not json"), Message(SOURCE, 1, None, b"\x00\x01 binary")]
USER, PASSWORD = "operator", "operator-window-password"
CHROMIUM = Path(os.environ.get("TICDC_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PLUGIN = "/ticdc-window"
ROUTES = [
    "/status",
    "/status.json",
    "/metrics",
    "/docs",
    "/docs/",
    "/docs/index.html",
    "/docs/manifest.json",
    "/docs/catalog.json",
]
GOLD_MODEL = "model.ticdc_lakehouse.gold_window__shop__customers"
SCREENSHOTS = REPO / ".local" / "screenshots"
README_IMAGES = REPO / "docs" / "images"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def window(source_config, config_file, broker, spark, airflow_db):
    """The `window` source ingested twice through the ingest DAG; yields its config file, the events sent and
    the offsets of the bad messages."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    config = source_config(SOURCE)
    path = config_file(config, TEST_HOME / f"{SOURCE}.yaml")
    previous = os.environ["TICDC_LAKE_CONFIG"]
    os.environ["TICDC_LAKE_CONFIG"] = str(path)
    source = config.source(SOURCE)
    broker.create_topics([SOURCE], partitions=PARTITIONS)
    sent = []
    try:
        for events, extra in ((shop_stream(), BAD_MESSAGES), (shop_stream_more(), [])):
            messages = encode_stream(
                source.protocol, events, topic=SOURCE, partitions=PARTITIONS, options=source.options
            )
            if extra:
                first_bad = sum(m.partition == 1 for m in messages)
                bad_offsets = {first_bad + i for i in range(len(extra))}
            produce(broker.bootstrap, messages + extra)
            sent.append(events)
            bag = DagBag(dag_folder=str(REPO / "dags"))
            assert not bag.import_errors, bag.import_errors
            run = bag.get_dag(f"ticdc_ingest__{SOURCE}").test()
            assert run.state == DagRunState.SUCCESS, f"DAG run ended {run.state}"
        yield path, [e for events in sent for e in events], bad_offsets
    finally:
        os.environ["TICDC_LAKE_CONFIG"] = previous


@pytest.fixture(scope="module")
def api_server(window, airflow_db):
    """`airflow api-server` on loopback with the plugins of this repository and one viewer user."""
    config_path, _, _ = window
    port = _free_port()
    passwords = TEST_HOME / "simple_auth_passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = {
        **os.environ,
        "TICDC_LAKE_CONFIG": str(config_path),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__WORKERS": "1",
    }
    log = (TEST_HOME / "api-server.log").open("w")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while _get_or_none(f"{base}/api/v2/monitor/health") != 200:
            assert process.poll() is None, f"api-server exited; see {log.name}"
            assert time.monotonic() < deadline, f"api-server not ready in 180 s; see {log.name}"
            time.sleep(1)
        yield base
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _get_or_none(url: str) -> int | None:
    try:
        return _get(url)[0]
    except OSError:
        return None


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Chromium (apt-get install -y chromium, as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def page(browser, api_server):
    """A browser tab logged in through Airflow's own login page."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.goto(f"{api_server}/auth/login")
    tab.get_by_label("Username").fill(USER)
    tab.get_by_label("Password").fill(PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    tab.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)
    assert any(c["name"] == "_token" for c in context.cookies())
    yield tab
    context.close()


def _screenshot(tab, name: str, readme: str | None = None) -> None:
    tab.mouse.move(0, 0)  # no tooltip in the picture
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    if readme and os.environ.get("TICDC_SAVE_README_SCREENSHOTS") == "1":
        README_IMAGES.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(README_IMAGES / readme), full_page=True)


def _cell(tab, selector: str) -> str:
    return tab.locator(selector).inner_text().strip().replace(",", "")


def _scalar(spark, query: str):
    return spark.sql(query, args={"source": SOURCE}).collect()[0][0]


def test_every_plugin_route_refuses_anonymous_and_forged_requests(api_server):
    for route in ROUTES:
        assert _get(api_server + PLUGIN + route)[0] == 401, route
        forged = _get(api_server + PLUGIN + route, {"Authorization": "Bearer not-a-token"})[0]
        assert forged in (401, 403), route
        assert _get(api_server + PLUGIN + route, {"Cookie": "_token=forged"})[0] in (401, 403), route
    # FastAPI's own schema and docs pages are off, not open
    assert _get(f"{api_server}{PLUGIN}/openapi.json")[0] == 404


def test_status_page_shows_the_numbers_of_the_tables(page, api_server, spark, window):
    _, events, bad_offsets = window
    page.goto(f"{api_server}{PLUGIN}/status")
    section = f"section[data-source={SOURCE}]"
    page.wait_for_selector(section)
    _screenshot(page, "status-page.png", readme="status-page.png")

    # offsets: landed up to the broker's high watermark on every partition
    landed = {
        r[0]: r[1] + 1
        for r in spark.sql(
            f"SELECT `partition`, max(`offset`) FROM {BRONZE_MESSAGES} WHERE source = :source GROUP BY 1",
            args={"source": SOURCE},
        ).collect()
    }
    assert sorted(landed) == list(range(PARTITIONS))
    assert page.locator(f"{section} [data-field=broker]").inner_text() == "broker reachable"
    for partition, offset in landed.items():
        row = f"{section} tr[data-topic={SOURCE}][data-partition='{partition}']"
        assert int(_cell(page, f"{row} [data-field=landed-offset]")) == offset
        assert int(_cell(page, f"{row} [data-field=high-watermark]")) == offset
        assert _cell(page, f"{row} [data-field=offset-lag]") == "0"

    # lag per layer: the TiDB timestamps behind it
    decoded = _scalar(
        spark,
        f"""SELECT max(commit_ts) FROM (SELECT commit_ts FROM {SILVER_ROW_CHANGES} WHERE source = :source
            UNION ALL SELECT commit_ts FROM {SILVER_DDL_EVENTS} WHERE source = :source)""",
    )
    consistent = max(e.ts for e in events if isinstance(e, Watermark))
    assert (
        _scalar(spark, f"SELECT max_by(consistent_ts, finished_at) FROM {SILVER_RUNS} WHERE source = :source")
        == consistent
    )
    kafka_ms = _scalar(spark, f"SELECT unix_millis(max(`timestamp`)) FROM {BRONZE_MESSAGES} WHERE source = :source")
    layer = f"{section} tr[data-layer='%s']"
    assert int(page.locator(layer % "landed" + " [data-field=physical-ms]").get_attribute("data-value")) == kafka_ms
    assert int(_cell(page, layer % "decoded" + " [data-field=ts]")) == decoded
    assert int(_cell(page, layer % "consistent" + " [data-field=ts]")) == consistent
    assert int(_cell(page, layer % "gold" + " [data-field=ts]")) == consistent
    assert "d " in _cell(page, layer % "gold" + " [data-field=lag]")  # the stream is days old

    # the last runs, newest first: records landed and messages decoded per run
    per_run = spark.sql(
        f"SELECT sum(records) FROM {BRONZE_LANDING_RUNS} WHERE source = :source GROUP BY batch_id "
        "ORDER BY max(landed_at) DESC",
        args={"source": SOURCE},
    ).collect()
    decoded_runs = spark.sql(
        f"SELECT messages, row_changes FROM {SILVER_RUNS} WHERE source = :source ORDER BY finished_at DESC",
        args={"source": SOURCE},
    ).collect()
    runs = page.locator(f"{section} tr[data-run]")
    assert runs.count() == 2
    for i in range(2):
        assert int(_cell(runs.nth(i), "[data-field=landed-records]")) == per_run[i][0]
        assert int(_cell(runs.nth(i), "[data-field=decoded-messages]")) == decoded_runs[i]["messages"]
        assert int(_cell(runs.nth(i), "[data-field=row-changes]")) == decoded_runs[i]["row_changes"]

    # quarantine by reason, with the coordinates of the two bad messages
    reasons = dict(
        spark.sql(
            f"SELECT reason, count(*) FROM {SILVER_QUARANTINE} WHERE source = :source GROUP BY reason",
            args={"source": SOURCE},
        ).collect()
    )
    assert sum(reasons.values()) == len(BAD_MESSAGES)
    shown = page.locator(f"{section} tr[data-field=quarantine-reason]")
    assert {
        shown.nth(i).locator("td.reason").inner_text(): int(_cell(shown.nth(i), "[data-field=messages]"))
        for i in range(shown.count())
    } == reasons
    samples = " ".join(shown.nth(i).inner_text() for i in range(shown.count()))
    assert all(f"{SOURCE}[1]@{o}" in samples for o in bad_offsets)

    # gold tables: rows and consistent ts as the tables have them
    gold = [r[1] for r in spark.sql(f"SHOW TABLES IN gold_{SOURCE}").collect() if not r[1].endswith("__history")]
    assert gold
    for table in gold:
        relation = f"gold_{SOURCE}.{table}"
        row = f"{section} tr[data-gold-table='{relation}']"
        assert int(_cell(page, f"{row} [data-field=rows]")) == spark.table(relation).count()
        assert int(_cell(page, f"{row} [data-field=versions]")) == spark.table(relation + "__history").count()
        recorded = spark.sql(
            f"SELECT consistent_ts FROM {GOLD_TABLES} WHERE gold_relation = :relation", args={"relation": relation}
        ).collect()[0][0]
        assert int(_cell(page, f"{row} [data-field=consistent-ts]")) == recorded

    # the newest publication: the name every gold and history table is pinned under
    publication = latest_publication(spark, SOURCE)
    assert _cell(page, f"{section} [data-field=publication-tag]") == publication["tag"] == f"ticdc_{consistent}"

    # the same numbers as JSON and as Prometheus text
    status = json.loads(page.request.get(f"{api_server}{PLUGIN}/status.json").text())
    (view,) = [v for v in status["sources"] if v["source"] == SOURCE]
    assert {t["relation"]: t["rows"] for t in view["gold_tables"]} == {
        f"gold_{SOURCE}.{t}": spark.table(f"gold_{SOURCE}.{t}").count() for t in gold
    }
    assert view["quarantined"] == len(BAD_MESSAGES)
    metrics = page.request.get(f"{api_server}{PLUGIN}/metrics").text()
    for table in gold:
        rows = spark.table(f"gold_{SOURCE}.{table}").count()
        assert f'ticdc_lake_gold_rows{{source="{SOURCE}",table="gold_{SOURCE}.{table}"}} {rows}' in metrics
    assert f'ticdc_lake_quarantined_messages{{source="{SOURCE}"}} {len(BAD_MESSAGES)}' in metrics
    assert f'ticdc_lake_broker_up{{source="{SOURCE}"}} 1' in metrics


def test_status_page_shows_the_continuous_driver(page, api_server, window):
    """A continuous driver's heartbeat (written here as the driver writes it; tests/e2e/test_continuous*.py run
    real drivers) is on the page: its state, batches, rate and how far gold is behind; a stale one is not running."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime import heartbeat

    config_path, _, _ = window
    local_dir = load_config(config_path).local_dir
    now = heartbeat.now_ms()
    recent = [{"finished_at_ms": now - 30_000 + 5_000 * i, "seconds": 2.5, "records": 3} for i in range(7)]
    beat = {
        "source": SOURCE,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "state": heartbeat.WAITING,
        "batches": 7,
        "paused": 0,
        "consistent_ts": (now - 9_000) << 18,
        "recent": recent,
    }
    section = f"section[data-source={SOURCE}]"
    try:
        heartbeat.write_heartbeat(local_dir, {**beat, "heartbeat_at_ms": now})
        page.goto(f"{api_server}{PLUGIN}/status")
        assert _cell(page, f"{section} [data-field=continuous-state]") == "waiting"
        assert _cell(page, f"{section} [data-field=continuous-batches]") == "7"
        assert _cell(page, f"{section} [data-field=continuous-rate]") == "12.0"
        assert _cell(page, f"{section} [data-field=continuous-behind]").endswith(" s")
        heartbeat.write_heartbeat(local_dir, {**beat, "state": heartbeat.FAILED, "heartbeat_at_ms": now})
        page.goto(f"{api_server}{PLUGIN}/status")
        assert _cell(page, f"{section} [data-field=continuous-state]") == "not running"
    finally:
        heartbeat.heartbeat_path(local_dir, SOURCE).unlink(missing_ok=True)


def test_status_page_and_docs_site_are_under_browse_in_airflow(page, api_server):
    for view, inside in (("Pipeline status", f"section[data-source={SOURCE}]"), ("dbt docs", "text=Overview")):
        page.goto(f"{api_server}/")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name=view).click()
        page.frame_locator(f"iframe[title='{view}']").locator(inside).first.wait_for(timeout=60_000)
        if view == "Pipeline status":
            _screenshot(page, "status-page-in-airflow.png")


def test_docs_site_shows_gold_tables_and_their_lineage(page, api_server, spark):
    manifest = json.loads(page.request.get(f"{api_server}{PLUGIN}/docs/manifest.json").text())
    catalog = json.loads(page.request.get(f"{api_server}{PLUGIN}/docs/catalog.json").text())
    gold = {
        f"model.ticdc_lakehouse.gold_{SOURCE}__{table}": spark.table(f"gold_{SOURCE}.{table}").count()
        for _, table, _ in spark.sql(f"SHOW TABLES IN gold_{SOURCE}").collect()
        if not table.endswith("__history")
    }
    assert GOLD_MODEL in gold
    for node in gold:  # each gold table's history beside it, described
        assert manifest["nodes"][node + "__history"]["description"].startswith("Every version of every row")
    for node, rows in gold.items():
        assert manifest["nodes"][node]["description"].startswith("Current state of upstream table")
        assert {c.lower() for c in catalog["nodes"][node]["columns"]} >= {"_row_key", "_commit_ts", "_op"}
        # the live rows of the snapshot summary: what the table holds
        assert catalog["nodes"][node]["stats"]["rows"]["value"] == rows > 0

    page.goto(f"{api_server}{PLUGIN}/docs/#!/model/{GOLD_MODEL}")
    page.get_by_text("Current state of upstream table shop.customers").first.wait_for(timeout=60_000)
    for column in ("_row_key", "email", "created_at"):
        assert page.get_by_text(column, exact=True).count() >= 1
    catalog_rows = catalog["nodes"][GOLD_MODEL]["stats"]["rows"]["value"]
    assert re.search(rf"rows\s+{catalog_rows}\b", page.locator("body").inner_text(), re.IGNORECASE)
    page.get_by_title("View Lineage Graph").click()
    page.get_by_text("Lineage Graph", exact=True).wait_for()
    time.sleep(2)  # the graph lays itself out after it appears
    _screenshot(page, "docs-site.png", readme="docs-site.png")

    # the whole lineage: silver's changes through staging, the run's plan (a source: the DDL replay's schema
    # versions, written by spark_jobs.gold.plan), the gold model
    page.get_by_title("View Fullscreen").first.click()
    time.sleep(2)
    shown = set(page.evaluate("() => document.querySelector('#cy')._cyreg.cy.nodes(':visible').map(n => n.id())"))
    plan = f"source.ticdc_lakehouse.gold_{SOURCE}__plan.gold_{SOURCE}__plan"
    assert {
        "source.ticdc_lakehouse.silver.row_changes",
        "model.ticdc_lakehouse.stg_row_changes",
        plan,
        GOLD_MODEL,
    } <= shown, shown
    _screenshot(page, "docs-lineage.png")


def test_no_page_shows_a_secret(page, api_server):
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "_token")
    secrets = [os.environ["AIRFLOW__API_AUTH__JWT_SECRET"], PASSWORD, token]
    for route in ROUTES:
        body = page.request.get(api_server + PLUGIN + route).text()
        assert not [s for s in secrets if s in body], route
