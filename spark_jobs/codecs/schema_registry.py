"""A small Confluent Schema Registry REST client: schemas by id for the Avro decoder.

Schema ids are immutable in a registry, so a schema fetched once is cached for the whole process
(keyed by registry URL and id): every partition's decoder shares one GET per id. Credentials are
taken from the arguments or from `user:password@` in the URL (URL-encoded, as TiCDC's
`--schema-registry` accepts them), sent only as HTTP basic auth, and never appear in a URL we
print, a log line or an exception text.

A registry that cannot be reached, times out, refuses the credentials (401/403) or fails (408, 429, 5xx)
raises RegistryUnavailableError: the registry's fault, not the message's, so the run stops and nothing is
quarantined. Only an answer about the message itself (404: no such schema id) is a DecodeError.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import requests

from spark_jobs.errors import DecodeError, RegistryUnavailableError

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_SCHEMAS: dict[tuple[str, int], str] = {}
_SCHEMAS_LOCK = threading.Lock()
_UNAVAILABLE_STATUSES = (408, 429)  # and every 5xx: the registry's trouble, not the message's
_CHECK_RUNNING = "that the Schema Registry runs and schema_registry.url points at it"
_CHECK_CREDENTIALS = "schema_registry.username_env / password_env (or connection): the credentials it accepts"
_CHECK_HEALTH = "the Schema Registry's health and its logs"
_CHECK_TLS = "schema_registry.ca_file: the CA that signed the registry's certificate"
_ERRNO_TEXT = re.compile(r"\[(?:Errno -?\d+|SSL: \w+)\] [^'\")]+")


def clear_cache() -> None:
    """Forget every cached schema (tests that count registry requests start from here)."""
    with _SCHEMAS_LOCK:
        _SCHEMAS.clear()


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """`https://user:pw@host:8081/` -> (`https://host:8081`, user, pw), credentials URL-decoded."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        raise ValueError("schema registry URL must look like http(s)://host[:port]")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), username, password


class SchemaRegistryClient:
    """GET /schemas/ids/{id} (cached) and POST /subjects/{subject}/versions (for the simulator)."""

    def __init__(
        self,
        url: str,
        username: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        *,
        protocol: str = "avro",
        timeout: float = 10.0,
    ):
        self.protocol = protocol
        try:
            self.url, url_user, url_password = split_credentials(url)
        except ValueError as exc:
            raise DecodeError(protocol, str(exc), "schema-registry-url") from None
        username = username if username is not None else url_user
        password = password if password is not None else url_password
        self._secrets = [s for s in (password, url_password) if s]
        self._timeout = timeout
        self._session = requests.Session()
        self._session.headers["Accept"] = _CONTENT_TYPE
        if username is not None or password is not None:
            self._session.auth = (username or "", password or "")
        # per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a session's verify
        self._verify: str | bool = ca_file or True

    def __repr__(self) -> str:
        return f"SchemaRegistryClient({self.url!r})"

    def schema(self, schema_id: int) -> str:
        """The schema text registered under this id; DecodeError when it is not there."""
        cache_key = (self.url, schema_id)
        cached = _SCHEMAS.get(cache_key)
        if cached is not None:
            return cached
        where = f"schema id {schema_id}"
        response = self._request("GET", f"/schemas/ids/{schema_id}", where)
        if response.status_code == 404:
            raise DecodeError(self.protocol, f"schema id {schema_id} not found in registry {self.url}", where)
        body = self._json(response, where)
        text = body.get("schema") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise DecodeError(
                self.protocol, f"registry {self.url} answered schema id {schema_id} without a schema", where
            )
        with _SCHEMAS_LOCK:
            _SCHEMAS[cache_key] = text
        return text

    def register(self, subject: str, schema_text: str) -> int:
        """Register a schema under a subject and return its id (the same schema keeps its id)."""
        where = f"subject {subject}"
        response = self._request("POST", f"/subjects/{subject}/versions", where, json={"schema": schema_text})
        body = self._json(response, where)
        if not isinstance(body, dict) or not isinstance(body.get("id"), int):
            raise DecodeError(self.protocol, f"registry {self.url} answered the registration without an id", where)
        schema_id: int = body["id"]
        return schema_id

    def _request(self, method: str, path: str, where: str, **kwargs: Any) -> requests.Response:
        try:
            response = self._session.request(
                method, self.url + path, timeout=self._timeout, verify=self._verify, **kwargs
            )
        except requests.Timeout:
            raise RegistryUnavailableError.at(
                self.url, f"did not answer within {self._timeout:g} s ({where})", _CHECK_RUNNING
            ) from None
        except requests.RequestException as exc:
            check = _CHECK_TLS if isinstance(exc, requests.exceptions.SSLError) else _CHECK_RUNNING
            raise RegistryUnavailableError.at(
                self.url, f"unreachable: {type(exc).__name__}: {self._short(exc)} ({where})", check
            ) from None
        status = response.status_code
        if status in (401, 403):
            raise RegistryUnavailableError.at(
                self.url, f"refused the credentials (HTTP {status}) ({where})", _CHECK_CREDENTIALS
            )
        if status >= 500 or status in _UNAVAILABLE_STATUSES:
            raise RegistryUnavailableError.at(
                self.url, f"answered HTTP {status}: {self._redact(response.text[:200])!r} ({where})", _CHECK_HEALTH
            )
        if status >= 400 and status != 404:
            raise DecodeError(
                self.protocol,
                f"schema registry {self.url} answered HTTP {status}: {self._redact(response.text[:200])}",
                where,
            )
        return response

    def _short(self, exc: Exception) -> str:
        """The OS's or TLS's reason (`[Errno 111] Connection refused`) rather than urllib3's nested repr of it."""
        text = self._redact(str(exc))
        found = _ERRNO_TEXT.findall(text)
        return found[-1].strip() if found else text[:200]

    def _json(self, response: requests.Response, where: str) -> Any:
        if response.status_code == 404:
            raise DecodeError(self.protocol, f"registry {self.url} has no {where}", where)
        try:
            return response.json()
        except ValueError:
            raise DecodeError(
                self.protocol, f"schema registry {self.url} answered something that is not JSON", where
            ) from None

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text
