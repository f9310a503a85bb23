"""Large-message handling shared by the protocols: value compression and claim-check files.

A claim-check file that is missing, or not what TiCDC writes, is the message's fault (DecodeError:
quarantine). A store that cannot be read (down, permission denied, timing out, refusing the credentials)
is not: ClaimCheckUnavailableError stops the run, and the next run after recovery reads it.
"""

from __future__ import annotations

import base64

import orjson

from spark_jobs.errors import ClaimCheckUnavailableError, DecodeError

COMPRESSIONS = ("none", "snappy", "lz4")
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_UNAVAILABLE_STATUSES = (401, 403, 408, 429)  # and every 5xx (fsspec's HTTP-based stores carry `status`/`code`)
_CHECK_STORE = "that the store under claim-check-storage-uri is mounted/reachable and readable by this job"


def decompress(protocol: str, data: bytes, method: str | None) -> bytes:
    """Undo `large-message-handle-compression` (snappy block format, lz4 frame format)."""
    if not method or method == "none":
        return data
    try:
        if method == "snappy":
            import snappy

            plain: bytes = snappy.uncompress(data)
            return plain
        if method == "lz4":
            import lz4.frame

            plain = lz4.frame.decompress(data)
            return plain
    except Exception as exc:  # the libraries raise their own error types for corrupt input
        raise DecodeError(protocol, f"corrupt {method} compressed value: {exc}", "value") from None
    raise DecodeError(protocol, f"unknown compression {method!r}; allowed: {', '.join(COMPRESSIONS)}")


def compress(data: bytes, method: str | None) -> bytes:
    """The inverse of `decompress`, for the simulator."""
    if not method or method == "none":
        return data
    if method == "snappy":
        import snappy

        packed: bytes = snappy.compress(data)
        return packed
    if method == "lz4":
        import lz4.frame

        packed = lz4.frame.compress(data)
        return packed
    raise ValueError(f"unknown compression {method!r}")


def read_claim_check(protocol: str, location: str, raw_value: bool = False) -> tuple[bytes | None, bytes]:
    """Read a claim-check file: `{"key": base64|null, "value": base64}`, or the raw value bytes.

    `location` is `<claim-check-storage-uri>/<uuid>.json`: a local path, `file://`, or any URI an
    installed fsspec filesystem serves (s3://, gs://, azure://).
    """
    import fsspec

    try:
        with fsspec.open(location, "rb") as handle:
            data = handle.read()
    except Exception as exc:
        if store_unavailable(exc):
            raise ClaimCheckUnavailableError.at(
                _store_of(location), f"cannot be read: {type(exc).__name__}: {_reason(exc)}", _CHECK_STORE
            ) from None
        raise DecodeError(
            protocol, f"claim-check file {location} cannot be read: {exc}", "claimCheckLocation"
        ) from None
    if raw_value:
        return None, data
    try:
        doc = orjson.loads(data)
        key = doc.get("key")
        return (base64.b64decode(key) if key else None), base64.b64decode(doc["value"])
    except Exception as exc:
        raise DecodeError(
            protocol, f"claim-check file {location} is not {{key, value}} JSON: {exc}", "claimCheckLocation"
        ) from None


def store_unavailable(exc: Exception) -> bool:
    """Whether reading a claim-check file failed because of the store rather than the file: permission
    denied, connection trouble, a timeout, a 401/403/408/429/5xx answer. A file that is not there is the
    message's fault (the location it names is wrong, or the file was deleted)."""
    if isinstance(exc, _MISSING):
        return False
    if isinstance(exc, OSError | TimeoutError):
        return True
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    return isinstance(status, int) and (status >= 500 or status in _UNAVAILABLE_STATUSES)


def _store_of(location: str) -> str:
    """The store's address: the location without the file name."""
    return location.rsplit("/", 1)[0] or location


def _reason(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))[:200]


def write_claim_check(location: str, key: bytes | None, value: bytes, raw_value: bool = False) -> None:
    """Write a claim-check file as TiCDC does, for the simulator."""
    import fsspec

    data = (
        value
        if raw_value
        else orjson.dumps(
            {
                "key": base64.b64encode(key).decode() if key is not None else None,
                "value": base64.b64encode(value).decode(),
            }
        )
    )
    with fsspec.open(location, "wb", auto_mkdir=True) as handle:
        handle.write(data)
