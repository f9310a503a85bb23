"""The Iceberg Spark runtime for the embedded mode, built from PyPI packages only.

The Iceberg runtime jar on PyPI (`snowpark-connect-deps-iceberg`) lacks the relocated Jackson
classes it refers to (`org.apache.iceberg.shaded.com.fasterxml.jackson.*`). We build them by
relocating Spark's own Jackson jars: every class file's constant pool is rewritten so that
`com/fasterxml/jackson/` becomes `org/apache/iceberg/shaded/com/fasterxml/jackson/`. The result is
cached under the local directory; building again is a no-op. The cluster mode uses the official
Maven artifact instead.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
ICEBERG_EXTENSIONS_JAR = "iceberg-spark-extensions-3.5_2.12-1.10.2.jar"
JACKSON_JARS = ("jackson-core", "jackson-databind", "jackson-annotations", "jackson-datatype-jsr310")
SHADED_JAR = "iceberg-shaded-jackson.jar"
RELOCATION_VERSION = "2"  # bump when the relocation changes, so cached jars are rebuilt

# Jackson's package in slash and dot form, unless already relocated (relocating twice changes nothing).
_JACKSON = re.compile(rb"(?<!shaded[/.])com([/.])fasterxml([/.])jackson([/.])")


def _relocate_text(data: bytes) -> bytes:
    return _JACKSON.sub(lambda m: b"org" + m[1] + b"apache" + m[1] + b"iceberg" + m[1] + b"shaded" + m[1] + m[0], data)


def relocate_class(data: bytes) -> bytes:
    """Rewrite the CONSTANT_Utf8 entries of one class file; everything after the pool is unchanged."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack_from(">H", data, 8)[0]
    out = bytearray(data[:10])
    pos, index = 10, 1
    fixed = {3: 4, 4: 4, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            text = _relocate_text(data[pos + 3 : pos + 3 + length])
            out += bytes([1]) + struct.pack(">H", len(text)) + text
            pos += 3 + length
        elif tag in (5, 6):
            out += data[pos : pos + 9]
            pos += 9
            index += 1
        elif tag in fixed:
            out += data[pos : pos + 1 + fixed[tag]]
            pos += 1 + fixed[tag]
        else:
            raise ValueError(f"unknown constant pool tag {tag} at byte {pos}")
        index += 1
    out += data[pos:]
    return bytes(out)


def _relocate_path(name: str) -> str:
    return _relocate_text(name.encode()).decode()


def build_shaded_jackson(jackson_jars: list[Path], target: Path) -> None:
    """One jar with the relocated Jackson classes and service files, written atomically."""
    tmp = target.with_suffix(".tmp")
    seen: set[str] = set()
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for jar in jackson_jars:
            with zipfile.ZipFile(jar) as src:
                for info in src.infolist():
                    name = info.filename
                    if (
                        info.is_dir()
                        or name.endswith("module-info.class")
                        or name.upper().endswith((".SF", ".RSA", ".DSA"))
                    ):
                        continue
                    if name == "META-INF/MANIFEST.MF":
                        continue
                    data = src.read(info)
                    if name.endswith(".class"):
                        data = relocate_class(data)
                    elif name.startswith("META-INF/services/"):
                        data = _relocate_text(data)
                    new_name = _relocate_path(name)
                    if new_name in seen:
                        continue
                    seen.add(new_name)
                    out.writestr(new_name, data)
    tmp.replace(target)


def pyspark_jars() -> Path:
    """The jars folder of the installed pyspark (Spark's and Hadoop's class path)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _iceberg_jars_dir() -> Path:
    import snowpark_connect_deps_iceberg

    return Path(snowpark_connect_deps_iceberg.__file__).parent / "jars"


def prepare_iceberg_runtime(cache_dir: Path) -> list[Path]:
    """The jars to put on the embedded Spark driver's class path (built once, then reused)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    jackson = sorted(p for p in pyspark_jars().glob("jackson-*.jar") if p.name.rsplit("-", 1)[0] in JACKSON_JARS)
    if len(jackson) != len(JACKSON_JARS):
        raise RuntimeError(
            f"expected Spark's Jackson jars {JACKSON_JARS} in {pyspark_jars()}, found {[p.name for p in jackson]}"
        )
    stamp = hashlib.sha256(
        "|".join([RELOCATION_VERSION, *(f"{p.name}:{p.stat().st_size}" for p in jackson)]).encode()
    ).hexdigest()[:12]
    shaded = cache_dir / f"{Path(SHADED_JAR).stem}-{stamp}.jar"
    if not shaded.exists():
        log.info("building relocated Jackson classes for Iceberg into %s", shaded)
        build_shaded_jackson(jackson, shaded)
    return [_iceberg_jars_dir() / ICEBERG_JAR, shaded]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", type=Path)
    args = parser.parse_args()
    for jar in prepare_iceberg_runtime(args.cache_dir):
        print(jar)


if __name__ == "__main__":
    main()
