"""Airflow plugin: the pipeline status page and the dbt docs site, under Browse in Airflow's UI.

The app (ticdc_window/app.py) is mounted at /ticdc-window on the API server; the external views frame its
pages in the UI. Every route requires an authenticated Airflow user.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from ticdc_window.app import create_app

URL_PREFIX = "/ticdc-window"


class TicdcWindowPlugin(AirflowPlugin):
    name = "ticdc_window"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "ticdc-lakehouse operator's window"}]
    external_views = [
        {
            "name": "Pipeline status",
            "href": f"{URL_PREFIX.lstrip('/')}/status",
            "category": "Browse",
            "url_route": "ticdc-status",
        },
        {
            "name": "dbt docs",
            "href": f"{URL_PREFIX.lstrip('/')}/docs/",
            "category": "Browse",
            "url_route": "ticdc-dbt-docs",
        },
    ]
