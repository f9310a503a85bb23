"""An S3-compatible object store on loopback (moto's S3 in a process of its own): the storage of an embedded
broker whose topics and records outlive the broker's process (`EmbeddedBroker(..., storage="s3")`).

The store keeps its objects in its own memory: they survive broker restarts, not the store's `stop()`.

Two changes make moto behave like S3 where Tansu's S3 engine depends on it:
- requests are served one at a time: Tansu allocates offsets with conditional puts (If-Match, If-None-Match),
  which moto checks and then writes without a lock; two concurrent puts could both pass;
- listings give LastModified to the microsecond (moto gives whole seconds): Tansu answers the latest offset of
  a partition with its newest record object, and of objects written in the same second it takes the first.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ticdc_devkit.processes import free_port, terminate

log = logging.getLogger(__name__)

ACCESS_KEY = "devkit"  # moto takes any credentials; these only have to be present
SECRET_KEY = "devkit-secret"
REGION = "us-east-1"


class ObjectStore:
    """`with ObjectStore(log_dir) as store:` a bucket `store.bucket` at `store.endpoint`; `store.env()` holds the
    AWS_* variables an S3 client (Tansu's) needs to reach it."""

    def __init__(self, log_dir: Path, port: int | None = None, bucket: str = "tansu"):
        self.log_dir = Path(log_dir)
        self.port = port or free_port()
        self.bucket = bucket
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self, timeout: float = 30.0) -> ObjectStore:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_dir / f"object-store-{self.port}.log", "ab")  # noqa: SIM115 (the process keeps it)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "ticdc_devkit.object_store", str(self.port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log_file.close()
        self._request("PUT", f"/{self.bucket}", timeout)  # the bucket must exist before Tansu starts
        log.info("object store ready at %s (pid %d, bucket %s)", self.endpoint, self._process.pid, self.bucket)
        return self

    def _request(self, method: str, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"object store exited with code {self._process.returncode}; see {self.log_dir}")
            try:
                urllib.request.urlopen(urllib.request.Request(self.endpoint + path, method=method), timeout=5).close()
                return
            except urllib.error.HTTPError as exc:
                self.stop()
                raise RuntimeError(f"object store at {self.endpoint}: {method} {path} answered {exc.code}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"object store at {self.endpoint} did not answer within {timeout:.0f}s"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self._process and self._process.poll() is None:
            terminate(self._process)
        self._process = None

    def __enter__(self) -> ObjectStore:
        return self.start() if self._process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(port: int) -> None:
    """Moto's S3 on 127.0.0.1:`port`, one request at a time, with LastModified to the microsecond (see above)."""
    import moto.core.serialize
    import moto.s3.models
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    moto.core.serialize.S3Serializer.DEFAULT_TIMESTAMP_FORMAT = "iso8601"  # with microseconds when there are any
    moto.s3.models.FakeKey.last_modified_ISO8601 = property(
        lambda key: key.last_modified.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    )
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serialized(environ, start_response):
        with one_at_a_time:
            return list(app(environ, start_response))

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args, **kwargs) -> None:  # a line per request would fill the log
            pass

    server = make_server("127.0.0.1", port, serialized, threaded=True, request_handler=QuietHandler)
    print(f"object store serving S3 on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
