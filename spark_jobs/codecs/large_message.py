"""Large-message handling shared by the protocols: value compression and claim-check files."""

from __future__ import annotations

import base64

import orjson

from spark_jobs.codecs.errors import DecodeError

COMPRESSIONS = ("none", "snappy", "lz4")


def decompress(protocol: str, data: bytes, method: str | None) -> bytes:
    """Undo `large-message-handle-compression` (snappy block format, lz4 frame format)."""
    if not method or method == "none":
        return data
    try:
        if method == "snappy":
            import snappy

            return snappy.uncompress(data)
        if method == "lz4":
            import lz4.frame

            return lz4.frame.decompress(data)
    except Exception as exc:  # the libraries raise their own error types for corrupt input
        raise DecodeError(protocol, f"corrupt {method} compressed value: {exc}", "value") from None
    raise DecodeError(protocol, f"unknown compression {method!r}; allowed: {', '.join(COMPRESSIONS)}")


def compress(data: bytes, method: str | None) -> bytes:
    """The inverse of `decompress`, for the simulator."""
    if not method or method == "none":
        return data
    if method == "snappy":
        import snappy

        return snappy.compress(data)
    if method == "lz4":
        import lz4.frame

        return lz4.frame.compress(data)
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
