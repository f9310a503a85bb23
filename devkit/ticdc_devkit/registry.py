"""A minimal Confluent-compatible Schema Registry, for tests only.

This is a stand-in: the real Schema Registry is a Java service and cannot run in the test
environment; docker-compose runs the real one for the cluster deployment. It implements just what
TiCDC and our client use:

  POST /subjects/{subject}/versions          register -> {"id": N} (the same schema keeps its id)
  GET  /schemas/ids/{id}                     -> {"schema": "..."}, 404 error_code 40403 when unknown
  GET  /subjects/{subject}/versions/latest   -> {"subject", "version", "id", "schema"}

with optional HTTP basic auth (wrong or missing credentials -> 401) and optional TLS. Ids are
global across subjects as in Confluent's registry, but start at a random base so that two
stand-ins that happen to reuse a port never look alike to a process-wide schema cache. Every
request is recorded in `requests` as (method, path) so tests can count registry round trips.

Faults for the tests, on the same URL: `outage(503)` (or 401, ...) answers every request from then on
(or from the `after`-th on) with that status until `outage(None)`; `stop()` closes the port (connection
refused) and `start()` serves again on it, with the schemas it had.
"""

from __future__ import annotations

import base64
import json
import random
import ssl
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class StandInRegistry:
    """Serve on 127.0.0.1 from a background thread while used as a context manager."""

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
    ):
        self.username, self.password = username, password
        self.certfile, self.keyfile = certfile, keyfile
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._next_id = random.randint(1, 1_000_000)
        self._schemas: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._subjects: dict[str, list[int]] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._outage_status: int | None = None
        self._outage_from = 0  # the index in `requests` of the first request the outage answers
        self.url = ""

    def __enter__(self) -> StandInRegistry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> StandInRegistry:
        """Serve (again): on a free port the first time, then on the same one."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), _handler_for(self))
        self._server.daemon_threads = True
        scheme = "http"
        if self.certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.certfile, self.keyfile)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        port = self._port = self._server.server_address[1]
        host = "localhost" if self.certfile else "127.0.0.1"
        self.url = f"{scheme}://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="stand-in-schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port: clients get connection refused until `start()`."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = None

    def outage(self, status: int | None, after: int = 0) -> None:
        """Answer `status` to every request after the next `after` ones; None ends the outage."""
        with self._lock:
            self._outage_status = status
            self._outage_from = len(self.requests) + after

    def register(self, subject: str, schema_text: str) -> int:
        normal = json.dumps(json.loads(schema_text), sort_keys=True, separators=(",", ":"))
        with self._lock:
            schema_id = self._ids.get(normal)
            if schema_id is None:
                schema_id = self._next_id
                self._next_id += 1
                self._ids[normal] = schema_id
                self._schemas[schema_id] = schema_text
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def authorized(self, header: str | None) -> bool:
        if self.username is None and self.password is None:
            return True
        expected = base64.b64encode(f"{self.username or ''}:{self.password or ''}".encode()).decode()
        return header == f"Basic {expected}"


def _handler_for(registry: StandInRegistry):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _start(self) -> list[str] | None:
            with registry._lock:
                registry.requests.append((self.command, self.path))
                failing = registry._outage_status if len(registry.requests) > registry._outage_from else None
            if failing is not None:
                self._reply(failing, {"error_code": failing, "message": f"stand-in outage: HTTP {failing}"})
                return None
            if not registry.authorized(self.headers.get("Authorization")):
                self._reply(401, {"error_code": 401, "message": "Unauthorized"})
                return None
            return [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]

        def do_GET(self) -> None:
            parts = self._start()
            if parts is None:
                return
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                text = registry._schemas.get(int(parts[2]))
                if text is None:
                    self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                else:
                    self._reply(200, {"schema": text})
            elif len(parts) == 4 and parts[0] == "subjects" and parts[2:] == ["versions", "latest"]:
                versions = registry._subjects.get(parts[1])
                if not versions:
                    self._reply(404, {"error_code": 40401, "message": f"Subject '{parts[1]}' not found."})
                else:
                    self._reply(
                        200,
                        {
                            "subject": parts[1],
                            "version": len(versions),
                            "id": versions[-1],
                            "schema": registry._schemas[versions[-1]],
                        },
                    )
            else:
                self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

        def do_POST(self) -> None:
            parts = self._start()
            if parts is None:
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not (len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions"):
                self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
                return
            try:
                schema_text = json.loads(self.rfile.read(length))["schema"]
                schema_id = registry.register(parts[1], schema_text)
            except (ValueError, KeyError, TypeError):
                self._reply(422, {"error_code": 42201, "message": "Invalid schema"})
                return
            self._reply(200, {"id": schema_id})

    return Handler


@contextmanager
def running_registry(username: str | None = None, password: str | None = None):
    """The URL of a stand-in registry that runs for the duration of the `with` block."""
    with StandInRegistry(username, password) as registry:
        yield registry.url
