"""The FastAPI app Airflow mounts under /ticdc-window: status page, its JSON, Prometheus text, dbt docs site.

Airflow 3 does not protect a plugin's app: every route here depends on `authenticated_user`, which runs
Airflow's own check (`airflow.api_fastapi.core_api.security.get_user`: a JWT from `Authorization: Bearer`
or the `_token` cookie the login page sets), so an anonymous or forged request gets 401/403 and nothing
else. FastAPI's own /docs and /openapi.json are off (app-level dependencies do not cover them).

Nothing here opens a SparkSession (the embedded metastore admits one JVM): the numbers come from the
snapshot the ingest DAG writes, the broker's offsets are asked live with a short timeout.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from jinja2 import Environment, FileSystemLoader, select_autoescape

from spark_jobs.config import load_config
from spark_jobs.errors import ConfigError
from spark_jobs.status.metrics import CONTENT_TYPE, prometheus_text
from spark_jobs.status.snapshot import LAYERS, physical_ms
from spark_jobs.status.view import status_views
from ticdc_window.charts import line_chart

TEMPLATES = Path(__file__).with_name("templates")
DOCS_FILES = ("index.html", "manifest.json", "catalog.json")  # the dbt docs site; nothing else of dbt's target
BEARER = HTTPBearer(auto_error=False)
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
# Pages may be framed by Airflow's UI only; the status page has no script and loads nothing.
DOCS_POLICY = "frame-ancestors 'self'"
STATUS_PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'"


async def authenticated_user(request: Request, bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]):
    """The Airflow user making the request, verified exactly as Airflow's own API verifies it.

    Imported here, not at module level: plugins are also loaded by the scheduler and the workers,
    which have no use for the API server's security module."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, bearer)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 0:
        return "ahead"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def _utc(ms: int | None) -> str:
    if ms is None:
        return "—"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    env.filters.update(duration=_duration, utc=_utc, tso_utc=lambda ts: _utc(physical_ms(ts)), number=_number)
    return env


def _config():
    try:
        return load_config()
    except ConfigError as exc:
        raise HTTPException(status_code=500, detail=str(exc)) from None


def _charts(view: dict) -> dict:
    runs = list(reversed(view["runs"]))  # oldest first
    return {
        "lag": line_chart({layer: [r["lag_seconds"][layer] for r in runs] for layer in LAYERS}),
        "throughput": line_chart(
            {
                "landed records/s": [r["landed_per_second"] for r in runs],
                "decoded messages/s": [r["decoded_per_second"] for r in runs],
            }
        ),
    }


def create_app() -> FastAPI:
    app = FastAPI(
        title="ticdc-lakehouse operator's window",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(authenticated_user)],
    )
    templates = _environment()

    @app.get("/status", response_class=HTMLResponse)
    def status_page() -> HTMLResponse:
        """Every source: lag per layer, offsets, runs, quarantine, gaps, snapshots needed, gold tables."""
        views = status_views(_config())
        html = templates.get_template("status.html").render(
            views=views, charts={v["source"]: _charts(v) for v in views if v["recorded"]}
        )
        return HTMLResponse(html, headers={**NO_STORE, "Content-Security-Policy": STATUS_PAGE_POLICY})

    @app.get("/status.json")
    def status_json() -> JSONResponse:
        """The same numbers as the page."""
        return JSONResponse({"sources": status_views(_config())}, headers=NO_STORE)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """The same numbers as Prometheus text; scrape with `Authorization: Bearer <Airflow JWT>`."""
        return PlainTextResponse(prometheus_text(status_views(_config())), media_type=CONTENT_TYPE, headers=NO_STORE)

    @app.get("/docs")
    def docs_root() -> RedirectResponse:
        return RedirectResponse("docs/", status_code=307)

    @app.get("/docs/")
    def docs_index() -> FileResponse:
        return docs_file("index.html")

    @app.get("/docs/{name}")
    def docs_file(name: str) -> FileResponse:
        """The dbt docs site `dbt docs generate` wrote under `<local_dir>/dbt/target` (its three files only)."""
        if name not in DOCS_FILES:
            raise HTTPException(status_code=404)
        path = _config().local_dir / "dbt" / "target" / name
        if not path.is_file():
            raise HTTPException(
                status_code=404, detail="no dbt docs site yet: the ingest DAG's generate_docs task writes it"
            )
        return FileResponse(path, headers={**NO_STORE, "Content-Security-Policy": DOCS_POLICY})

    return app
