"""The operator's window plugin app, without a server: anonymous requests refused, pages from a snapshot."""

from __future__ import annotations

import sys

import pytest

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.status import view as status_view
from spark_jobs.status.live import BrokerOffsets
from spark_jobs.status.snapshot import write_snapshot
from tests.unit.test_status import TS, snapshot

sys.path.insert(0, str(PROJECT_ROOT / "plugins"))

from ticdc_window.app import authenticated_user, create_app
from ticdc_window.charts import HEIGHT, PAD_BOTTOM, PAD_TOP, line_chart

ROUTES = ["/status", "/status.json", "/metrics", "/docs", "/docs/", "/docs/index.html", "/docs/catalog.json"]
CONFIG = """
runtime:
  local_dir: {lake}
sources:
  - name: shop
    protocol: canal-json
    topics: [shop_cdc]
    kafka:
      bootstrap_servers: 127.0.0.1:1
"""


@pytest.fixture
def client(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    lake = tmp_path / "lake"
    (tmp_path / "pipeline.yaml").write_text(CONFIG.format(lake=lake))
    monkeypatch.setenv("TICDC_LAKE_CONFIG", str(tmp_path / "pipeline.yaml"))
    monkeypatch.setattr(status_view, "high_watermarks", lambda source: BrokerOffsets(True, {("shop_cdc", 0): 12}))
    write_snapshot(lake, snapshot())
    app = create_app()
    return TestClient(app), app, lake


def test_every_route_refuses_an_anonymous_request(client):
    anonymous, _, _ = client
    for route in ROUTES:
        response = anonymous.get(route)
        assert response.status_code == 401, route
        assert "shop" not in response.text
    assert anonymous.get("/openapi.json").status_code == 404
    assert anonymous.get("/redoc").status_code == 404


def test_status_page_json_and_metrics_show_the_snapshot(client):
    c, app, _ = client
    app.dependency_overrides[authenticated_user] = lambda: "operator"
    page = c.get("/status")
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'self'" in page.headers["content-security-policy"]
    html = page.text
    assert str(TS) in html and "gold_shop.shop__orders" in html
    assert "bad &#34;json&#34;" in html  # upstream text is escaped
    assert "shop_cdc[1]@2" in html
    assert "Tables needing a fresh snapshot: shop.orders" in html
    assert "Tables without a primary key or NOT NULL unique key" in html and "shop.audit_log</p>" in html
    assert "Row checksum failures (mismatch, or marked corrupted by TiCDC): 2" in html
    assert "3 tables, 1 differs, 1 match, 1 not compared" in html
    rules = html.split('data-field="table-rules">', 1)[1].split("</p>", 1)[0]
    assert rules == (
        'Table rules (README, "Which tables and columns"): only <span data-field="include">shop.*</span>; not '
        '<span data-field="exclude">shop.tmp_*</span>; without email of <span data-field="exclude-columns">'
        "shop.customers</span>"
    )
    assert '<span data-field="reconcile-mismatched">shop.orders: differs</span>' in html
    assert '<td data-field="deletes">soft</td>' in html  # the table's delete mode and layout
    assert '<td data-field="layout">partitioned by days(placed_at); sorted by placed_at desc</td>' in html
    view = c.get("/status.json").json()["sources"][0]
    assert view["partitions"][0] == {
        "topic": "shop_cdc",
        "partition": 0,
        "landed_offset": 10,
        "high_watermark": 12,
        "offset_lag": 2,
    }
    metrics = c.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'ticdc_lake_offset_lag{source="shop",topic="shop_cdc",partition="0"} 2' in metrics.text
    assert 'ticdc_lake_checksum_failures{source="shop"} 2' in metrics.text
    assert 'ticdc_lake_reconcile_mismatched_tables{source="shop"} 1' in metrics.text


def test_docs_site_serves_only_its_three_files(client):
    c, app, lake = client
    app.dependency_overrides[authenticated_user] = lambda: "operator"
    assert c.get("/docs/").status_code == 404  # not generated yet
    target = lake / "dbt" / "target"
    target.mkdir(parents=True)
    for name, text in {"index.html": "<html>docs</html>", "catalog.json": "{}", "run_results.json": "{}"}.items():
        (target / name).write_text(text)
    assert c.get("/docs", follow_redirects=False).headers["location"] == "docs/"
    assert c.get("/docs/").text == "<html>docs</html>"
    assert c.get("/docs/catalog.json").json() == {}
    assert c.get("/docs/run_results.json").status_code == 404
    assert c.get("/docs/..%2Fdbt%2Ftarget%2Findex.html").status_code == 404


def test_line_chart_scales_from_zero_to_the_largest_value():
    chart = line_chart({"a": [0.0, 5.0, None, 10.0], "b": [2.0]})
    assert chart.top == 10.0 and chart.runs == 4
    a, b = chart.lines
    assert [y for _, y in a.dots] == [HEIGHT - PAD_BOTTOM, (HEIGHT - PAD_BOTTOM + PAD_TOP) / 2, PAD_TOP]
    assert len(b.dots) == 1
    assert line_chart({}).lines == []
