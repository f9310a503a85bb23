"""docker-compose.yml, docker/Dockerfile and config/cluster.yaml describe one deployment: they must not drift.

No container engine runs here, so the files are checked against each other. `compose_drift` returns every
problem as one readable line:

- every host the config names (Spark master, catalog, S3A endpoint, Kafka, Schema Registry, Thrift Server) is a
  compose service listening on that port;
- every environment variable the config reads (`${VAR}`, `*_env` keys) and the S3A credentials reach the
  services that need them, secrets only as `${VAR:?message}`;
- the Maven versions of `runtime.packages` agree with pyspark, with the embedded runtime and with any jar
  named in compose;
- every Spark and Airflow service runs the project image, which holds the file TICDC_LAKE_CONFIG names;
- the metastore can serve Spark's Hive client, reach Postgres and MinIO, and shares the config's warehouse.

The mutation tests below prove that it catches each kind of drift.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from spark_jobs.config import load_config
from spark_jobs.runtime.iceberg_runtime import ICEBERG_JAR

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE, CONFIG_FILE, DOCKERFILE = "docker-compose.yml", "config/cluster.yaml", "docker/Dockerfile"

# Images whose listen port comes from their own defaults: repository -> (port, the environment variable that
# replaces the default, if any). Ports given in `ports`, `expose` or a `--port` argument need no entry.
IMAGE_DEFAULT_PORTS: dict[str, tuple[int, str | None]] = {
    "apache/kafka": (9092, "KAFKA_LISTENERS"),  # its server.properties: PLAINTEXT://:9092
    "confluentinc/cp-schema-registry": (8081, "SCHEMA_REGISTRY_LISTENERS"),
    "postgres": (5432, "PGPORT"),
    "minio/minio": (9000, None),  # `server --address` replaces it
    "apache/hive": (9083, "METASTORE_PORT"),  # its entrypoint.sh, SERVICE_NAME=metastore
}
SCHEME_PORTS = {"http": 80, "https": 443, "thrift": 9083, "spark": 7077}
NOT_HOSTS = {"s3", "s3a", "s3n", "file", "gs", "abfs", "abfss"}  # URL schemes whose "host" is a bucket or nothing
SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|CREDENTIAL", re.I)
SECRET_IN_VALUE = re.compile(r"(?i)password=(?!\$\{)\S|://[^/\s:@]+:(?!\$\{)[^@\s/]+@")
REQUIRED_SECRET = re.compile(r"\$\{[A-Za-z_]\w*:\?[^}]*\}")
COMPOSE_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?:(:?[-?])([^}]*))?\}")
CONFIG_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}")  # what spark_jobs.config expands
URL = re.compile(r"(?<![\w$])([a-z][a-z0-9+.-]*)://(?:[^@/\s]*@)?([A-Za-z0-9_.-]+)(?::(\d+))?")
HIVE_GET_TABLE_REMOVED = (4, 0, 1)  # HIVE-26537: the metastore no longer serves `get_table`
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclasses.dataclass(frozen=True)
class SparkFacts:
    """The project's Spark as installed from requirements.lock, and the embedded mode's Iceberg runtime."""

    pyspark_version: str
    hadoop_version: str  # pyspark's own Hadoop client: hadoop-aws must be the same version
    hive_client_version: str  # the metastore client Spark, and Iceberg's HiveCatalog, call the metastore with
    embedded_iceberg_jar: str


def spark_facts() -> SparkFacts:
    lock = (ROOT / "requirements.lock").read_text()
    jars = [p.name for p in (Path(importlib.util.find_spec("pyspark").origin).parent / "jars").iterdir()]

    def jar_version(prefix: str) -> str:
        return next(m[1] for n in jars if (m := re.fullmatch(re.escape(prefix) + r"-([\d.]+)\.jar", n)))

    return SparkFacts(
        pyspark_version=re.search(r"^pyspark==(\S+)", lock, re.M)[1],
        hadoop_version=jar_version("hadoop-client-api"),
        hive_client_version=jar_version("hive-metastore"),
        embedded_iceberg_jar=ICEBERG_JAR,
    )


def _repo_text(path: str) -> str | None:
    p = ROOT / path
    return p.read_text() if p.is_file() else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _image_repo(image: str) -> str:
    name = image.split("@")[0]
    name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # a registry host
    return "/".join(parts[1:] if parts[0] == "library" else parts)


def _text(value) -> str:
    if value is None:
        return ""
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _command(service: dict) -> str:
    return f"{_text(service.get('entrypoint'))} {_text(service.get('command'))}".strip()


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _compose_value(value: str) -> str | None:
    """A compose value as the container sees it when the host sets nothing: None if it needs the host's value."""
    unknown = False

    def sub(m: re.Match) -> str:
        nonlocal unknown
        if m[2] in (":-", "-"):
            return m[3]
        unknown = True
        return ""

    result = COMPOSE_VAR.sub(sub, value.replace("$$", "\0")).replace("\0", "$")
    return None if unknown else result


def _compose_vars(value: str) -> set[str]:
    return {m[1] for m in COMPOSE_VAR.finditer(value)}


def _listen_ports(service: dict) -> set[int]:
    """The container ports a service listens on. For an image of IMAGE_DEFAULT_PORTS its own settings decide
    (`ports` only publishes); otherwise `ports`, `expose` and the command's `--port` arguments declare them."""
    env, command = _env(service), _command(service)
    ports = {int(p) for p in re.findall(r"--(?:port|webui-port|address)[ =]\S*?(\d+)\b", command)}
    repo = _image_repo(service.get("image", ""))
    if repo in IMAGE_DEFAULT_PORTS and (repo != "apache/hive" or env.get("SERVICE_NAME") == "metastore"):
        default, override = IMAGE_DEFAULT_PORTS[repo]
        if override and env.get(override):
            ports.update(int(p) for p in re.findall(r"(\d+)", env[override]))
        elif not ports:
            ports.add(default)
        return ports
    for spec in service.get("ports") or []:
        target = spec["target"] if isinstance(spec, dict) else str(spec).split("/")[0].rsplit(":", 1)[-1]
        low, _, high = str(target).partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    ports.update(int(str(p).split("/")[0]) for p in service.get("expose") or [])
    for key, value in env.items():
        if key.endswith("LISTENERS"):
            ports.update(int(p) for p in re.findall(r":(\d+)", value))
    return ports


def _addresses(value: str) -> list[tuple[str, int | None]]:
    """(host, port) of `host:port[,host:port]` or URLs (`spark://a:7077,b:7077`, `thrift://m:9083`)."""
    found, scheme = [], None
    for part in (p.strip() for p in value.split(",") if p.strip()):
        if "://" in part:
            scheme = part.split("://", 1)[0]
        if scheme in NOT_HOSTS:
            continue
        parts = urlsplit(part if "://" in part else f"{scheme or 'tcp'}://{part}")
        if parts.hostname:
            found.append((parts.hostname, parts.port or SCHEME_PORTS.get(scheme or "")))
    return found


def _mounts(service: dict) -> list[tuple[str, str, str]]:
    """(type, source, target) of every volume: `bind` sources are repo-relative paths."""
    mounts = []
    for spec in service.get("volumes") or []:
        if isinstance(spec, dict):
            source, target, kind = spec.get("source", ""), spec["target"], spec.get("type", "volume")
        else:
            source, _, rest = str(spec).partition(":")
            target = rest.split(":")[0] if rest else source
            source = source if rest else ""
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        if kind == "bind":
            source = str(PurePosixPath(source.removeprefix("./")))
        mounts.append((kind, source, target))
    return mounts


def _dockerfile_copies(dockerfile: str, exists: Callable[[str], bool]) -> list[tuple[str, str, bool]]:
    """(image path, repo path, whether a directory's contents land there) of every COPY/ADD from the context."""
    copies, workdir = [], PurePosixPath("/")
    for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("WORKDIR", "COPY", "ADD"):
            continue
        if words[0].upper() == "WORKDIR":
            workdir = workdir / words[1]
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words) or len(args) < 2:
            continue
        *sources, dest = args
        target = workdir / dest
        for src in sources:
            src = str(PurePosixPath(src))
            is_dir = src == "." or exists(src + "/")
            into_dir = len(sources) > 1 or dest.endswith("/")
            place = target if is_dir or not into_dir else target / PurePosixPath(src).name
            copies.append((str(place), src, is_dir))
    return copies


def _image_source(path: str, service: dict, copies, exists) -> str | None:
    """The repo file a path in the container comes from: a bind mount, else the image's COPY (the last wins)."""
    entries = [(t, s, exists(s + "/")) for kind, s, t in _mounts(service) if kind == "bind"]
    for target, source, is_dir in entries + list(reversed(copies)):
        if path == target:
            return source
        if is_dir and path.startswith(target.rstrip("/") + "/"):
            rel = path[len(target.rstrip("/")) + 1 :]
            return rel if source == "." else f"{source}/{rel}"
    return None


def _hive_site(text: str) -> dict[str, str]:
    return {p.findtext("name"): (p.findtext("value") or "").strip() for p in ET.fromstring(text).iter("property")}


def _dockerfile_problems(dockerfile: str) -> list[str]:
    required = {
        r"^FROM\s+python:3\.11\b": "FROM python:3.11 (the project's Python)",
        r"openjdk-17-jre": "Java 17 (openjdk-17-jre-headless) for Spark",
        r"uv pip install --system -c requirements\.lock -r pyproject\.toml --extra airflow\b": "the product's dependencies at the lock's versions (uv pip install -c requirements.lock -r pyproject.toml --extra airflow)",
        r"uv pip install --system --no-deps -e \.(\s|$)": "the package installed from the image's checkout (uv pip install --no-deps -e .)",
        r"COPY dbt_project \./dbt_project": "the dbt project beside the package (spark_jobs.config.PROJECT_ROOT)",
        r"SPARK_HOME=\S*site-packages/pyspark": "SPARK_HOME set to pyspark's directory",
        r"PYSPARK_PYTHON=python3\b": "PYSPARK_PYTHON=python3 (the executors' Python)",
        r"PATH=\$SPARK_HOME/bin:": "Spark's bin on PATH (the compose services run spark-class)",
    }
    problems = [f"{DOCKERFILE} lacks {what}" for rx, what in required.items() if not re.search(rx, dockerfile, re.M)]
    return problems


def compose_drift(
    compose: dict,
    config_text: str,
    dockerfile: str,
    *,
    facts: SparkFacts | None = None,
    files: Mapping[str, str | None] | None = None,
    config_file: str = CONFIG_FILE,
) -> list[str]:
    """Every way the compose file, the Dockerfile and the pipeline config disagree, one readable line each."""
    facts = facts or spark_facts()
    files = files or {}

    def text_of(path: str) -> str | None:
        return files[path] if path in files else _repo_text(path)

    def exists(path: str) -> bool:
        """A repo file (or, with a trailing slash, a directory)."""
        if path.endswith("/"):
            return (ROOT / path).is_dir()
        return path in files or (ROOT / path).exists()

    problems: list[str] = []
    services: dict[str, dict] = compose.get("services") or {}
    raw = yaml.load(config_text, Loader=YAML_LOADER) or {}
    rt = raw.get("runtime") or {}
    spark, catalog = rt.get("spark") or {}, rt.get("catalog") or {}
    conf = {str(k): str(v) for k, v in (spark.get("conf") or {}).items()}
    envs = {name: _env(s) for name, s in services.items()}
    cmds = {name: _command(s) for name, s in services.items()}
    repos = {name: _image_repo(s.get("image", "")) for name, s in services.items()}

    # roles
    airflow = {n for n in services if n.startswith("airflow") or cmds[n].startswith("airflow")}
    thrift = {n for n in services if "ticdc-lake thrift-server" in cmds[n]}
    workers = {n for n in services if "deploy.worker.Worker" in cmds[n]}
    spark_services = thrift | workers | {n for n in services if re.search(r"spark-(class|submit)", cmds[n])}
    loaders = airflow | {n for n in services if "ticdc-lake" in cmds[n]}
    metastores = {n for n in services if repos[n] == "apache/hive"}
    hosts = {n: n for n in services}
    for name, s in services.items():
        hosts.update({h: name for h in (s.get("hostname"), s.get("container_name")) if h})
        networks = s.get("networks") if isinstance(s.get("networks"), dict) else {}
        hosts.update({alias: name for net in networks.values() for alias in (net or {}).get("aliases", [])})
    ports = {name: _listen_ports(s) for name, s in services.items()}

    def check_address(where: str, host: str, port: int | None) -> None:
        if host not in hosts:
            problems.append(
                f"{where} names host {host!r}, port {port}; no compose service is called {host!r} "
                f"(services: {', '.join(sorted(services))})"
            )
        elif port is not None and port not in ports[hosts[host]]:
            listening = ", ".join(map(str, sorted(ports[hosts[host]]))) or "none known"
            problems.append(
                f"{where} names host {host!r}, port {port}; compose service {hosts[host]!r} exposes no port {port} "
                f"(its ports: {listening})"
            )

    # the project image: every Spark and Airflow service
    project_images = {
        s.get("image")
        for s in services.values()
        if isinstance(s.get("build"), dict) and s["build"].get("dockerfile") == DOCKERFILE
    }
    for name in sorted(spark_services | airflow):
        build = services[name].get("build")
        if not (isinstance(build, dict) and build.get("dockerfile") == DOCKERFILE) and (
            services[name].get("image") not in project_images - {None}
        ):
            role = "Airflow" if name in airflow else "Spark"
            problems.append(
                f"compose service {name!r} runs {role} but its image is {services[name].get('image')!r}, not the project "
                f"image built from {DOCKERFILE} (its Spark and Python packages would drift from requirements.lock)"
            )
    if len(project_images) > 1:
        problems.append(
            f"the services built from {DOCKERFILE} are tagged differently: {sorted(map(str, project_images))}"
        )

    # environment variables the config reads
    def compose_env(var: str) -> str | None:
        values = {_compose_value(envs[n][var]) for n in sorted(loaders) if var in envs[n]}
        return values.pop() if len(values) == 1 else None

    def expand(value: str) -> str | None:
        unresolved = False

        def sub(m: re.Match) -> str:
            nonlocal unresolved
            value = compose_env(m[1])
            if value is None and m[2] is None:
                unresolved = True
            return value if value is not None else (m[2] or "")

        result = CONFIG_VAR.sub(sub, value)
        return None if unresolved else result

    def walk(node, path: str):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, f"{path}[{i}]")
        else:
            yield path, node

    required: dict[str, tuple[str, set[str]]] = {}  # variable -> (where, services that need it)
    for where, value in walk(raw, ""):
        if isinstance(value, str):
            for m in CONFIG_VAR.finditer(value):
                if m[2] is None:
                    required.setdefault(m[1], (f"config {where}", loaders))
        key = where.rsplit(".", 1)[-1]
        if key.endswith("_env") and key != "executor_env" and isinstance(value, str):
            required.setdefault(value, (f"config {where}", loaders if where.startswith("runtime.") else airflow))
    for var, (where, needing) in sorted(required.items()):
        for name in sorted(needing):
            if not envs[name].get(var):
                problems.append(f"{where} reads environment variable {var}; compose service {name!r} does not set it")

    # every host the config names
    targets = [("config runtime.spark.master", spark.get("master", ""))]
    targets += [("config runtime.catalog.uri", catalog.get("uri", ""))]
    targets += [(f"config runtime.spark.conf.{k}", v) for k, v in conf.items() if "://" in v]
    for i, source in enumerate(raw.get("sources") or []):
        targets.append(
            (f"config sources[{i}].kafka.bootstrap_servers", (source.get("kafka") or {}).get("bootstrap_servers", ""))
        )
        if source.get("schema_registry"):
            targets.append((f"config sources[{i}].schema_registry.url", source["schema_registry"].get("url", "")))
    if rt.get("thrift_server"):
        targets.append(("config runtime.thrift_server", rt["thrift_server"]))
    for where, value in targets:
        resolved = expand(str(value))
        for host, port in _addresses(resolved) if resolved else []:
            check_address(where, host, port)

    # the Spark master every worker joins, the Thrift Server dbt uses
    master = expand(spark.get("master", "")) or ""
    for name in sorted(services):
        for url in re.findall(r"spark://\S+", cmds[name]):
            if url != master:
                problems.append(f"compose service {name!r} joins {url}; config runtime.spark.master is {master}")
    if spark.get("executor_env"):
        problems.append("config runtime.spark.executor_env is set; the project image's python3 already has the package")
    if rt.get("dbt_target") == "cluster" and rt.get("thrift_server"):
        host = rt["thrift_server"].rsplit(":", 1)[0]
        if host in hosts and hosts[host] not in thrift:
            problems.append(
                f"compose service {hosts[host]!r} serves config runtime.thrift_server but does not run "
                "`ticdc-lake thrift-server` (its Spark settings would not be the pipeline's)"
            )

    # S3A credentials: every Spark JVM but the master's, and the metastore; MinIO's root user is the same
    s3 = any(v.startswith("s3a://") for v in [catalog.get("warehouse", ""), *conf.values()])
    if s3 and "spark.hadoop.fs.s3a.access.key" not in conf:
        minio = [n for n in services if repos[n] == "minio/minio"]
        expected = {
            "AWS_ACCESS_KEY_ID": _compose_vars(envs[minio[0]].get("MINIO_ROOT_USER", "")) if minio else None,
            "AWS_SECRET_ACCESS_KEY": _compose_vars(envs[minio[0]].get("MINIO_ROOT_PASSWORD", "")) if minio else None,
        }
        if not minio:
            problems.append("config's warehouse is in S3 (s3a://); no compose service runs minio/minio")
        users = airflow | (spark_services - {n for n in services if "deploy.master.Master" in cmds[n]}) | metastores
        for name in sorted(users):
            for var, minio_vars in expected.items():
                if not envs[name].get(var):
                    problems.append(f"compose service {name!r} reads the s3a:// warehouse but does not set {var}")
                elif minio_vars is not None and _compose_vars(envs[name][var]) != minio_vars:
                    problems.append(f"compose service {name!r} sets {var} from other variables than MinIO's root user")
    warehouse = catalog.get("warehouse", "")
    if warehouse.startswith("s3a://"):
        bucket = urlsplit(warehouse).netloc
        made = rf"\bmb\b[^;&|]*?\S*/{re.escape(bucket)}(?![\w.-])"
        if not any(repos[n] == "minio/mc" and re.search(made, cmds[n]) for n in services):
            problems.append(f"config runtime.catalog.warehouse is in bucket {bucket!r}; no minio/mc service creates it")

    # Maven versions: pyspark, the embedded runtime, and any jar compose names
    packages = {}
    for coordinate in rt.get("packages") or []:
        _group, artifact, version = coordinate.split(":")
        packages[artifact] = version
        if m := re.fullmatch(r"iceberg-spark-runtime-(\d+\.\d+)_(\d+\.\d+)", artifact):
            if m[1] != ".".join(facts.pyspark_version.split(".")[:2]):
                problems.append(
                    f"config runtime.packages has {artifact} (Spark {m[1]}); pyspark is {facts.pyspark_version}"
                )
            if facts.embedded_iceberg_jar != f"{artifact}-{version}.jar":
                problems.append(
                    f"config runtime.packages has {artifact} {version}; the embedded runtime "
                    f"(spark_jobs.runtime.iceberg_runtime.ICEBERG_JAR) is {facts.embedded_iceberg_jar}"
                )
        if artifact == "hadoop-aws" and version != facts.hadoop_version:
            problems.append(
                f"config runtime.packages has hadoop-aws {version}; pyspark's Hadoop is {facts.hadoop_version}"
            )
    for name, service in sorted(services.items()):
        text = json.dumps(service)
        for artifact, version in packages.items():
            named = re.findall(rf":{re.escape(artifact)}:([\w.-]+)", text)
            named += re.findall(rf"\b{re.escape(artifact)}-(\d[\w.-]*?)\.jar", text)
            for other in sorted(set(named) - {version}):
                problems.append(
                    f"compose service {name!r} names {artifact} {other}; config runtime.packages has {version}"
                )

    # runtime.local_dir: one named volume in every Airflow service
    local_dir = rt.get("local_dir")
    if rt.get("mode") == "cluster" and local_dir:
        volumes = set()
        for name in sorted(airflow):
            mount = [
                (kind, src)
                for kind, src, target in _mounts(services[name])
                if local_dir == target or local_dir.startswith(target.rstrip("/") + "/")
            ]
            if not mount or mount[-1][0] != "volume" or not mount[-1][1]:
                problems.append(
                    f"config runtime.local_dir {local_dir} is not a named volume of compose service {name!r} "
                    "(every Airflow service must share it: locks, dbt's work directory)"
                )
            else:
                volumes.add(mount[-1][1])
        if len(volumes) > 1:
            problems.append(f"config runtime.local_dir is a different volume in different services: {sorted(volumes)}")

    # the files the image holds: the config TICDC_LAKE_CONFIG names, the DAGs, the plugins
    copies = _dockerfile_copies(dockerfile, exists)
    for name in sorted(loaders):
        path = envs[name].get("TICDC_LAKE_CONFIG")
        if not path:
            problems.append(f"compose service {name!r} loads the config but does not set TICDC_LAKE_CONFIG")
            continue
        source = _image_source(path, services[name], copies, exists)
        if source is None:
            problems.append(
                f"compose service {name!r}: TICDC_LAKE_CONFIG={path} is no file of the image ({DOCKERFILE})"
            )
        elif source != config_file:
            problems.append(f"compose service {name!r}: TICDC_LAKE_CONFIG={path} holds {source}, not {config_file}")
    for name in sorted(airflow):
        for var in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER"):
            path = envs[name].get(var)
            if path and _image_source(path, services[name], copies, exists) is None:
                problems.append(f"compose service {name!r}: {var}={path} is no directory of the image")
    problems += _dockerfile_problems(dockerfile)

    # the metastore
    for name in sorted(metastores):
        env, tag = envs[name], services[name].get("image", "").rsplit(":", 1)[-1]
        if _version(facts.hive_client_version)[0] < 3 and _version(tag) >= HIVE_GET_TABLE_REMOVED:
            problems.append(
                f"compose service {name!r} runs apache/hive:{tag}, which no longer serves `get_table` (HIVE-26537); "
                f"Spark's Hive client {facts.hive_client_version}, and so Iceberg's HiveCatalog, calls it: use 4.0.0"
            )
        classpath = env.get("HADOOP_CLASSPATH", "")
        mounted = [t for _kind, _s, t in _mounts(services[name])]
        if env.get("DB_DRIVER") == "postgres" and not any(
            t.startswith("/opt/hive/lib/") or t.rstrip("/") + "/" in classpath for t in mounted
        ):
            problems.append(f"compose service {name!r}: apache/hive ships no Postgres JDBC driver; none is mounted")
        if warehouse.startswith("s3a://") and "share/hadoop/tools/lib" not in classpath:
            problems.append(f"compose service {name!r}: hadoop-aws (share/hadoop/tools/lib) is not on HADOOP_CLASSPATH")
        site_src = [
            s for kind, s, t in _mounts(services[name]) if kind == "bind" and t == "/opt/hive/conf/hive-site.xml"
        ]
        site = _hive_site(text_of(site_src[0]) or "<configuration/>") if site_src else {}
        managed = site.get("metastore.warehouse.dir") or site.get("hive.metastore.warehouse.dir")
        if managed != warehouse:
            problems.append(
                f"compose service {name!r}: hive-site.xml metastore.warehouse.dir is {managed!r}; config "
                f"runtime.catalog.warehouse is {warehouse!r}"
            )
        if site.get("metastore.warehouse.external.dir") and warehouse.startswith(managed or "\0"):
            problems.append(f"compose service {name!r}: Hive 4 refuses external tables inside the managed warehouse")
        for key in ("fs.s3a.endpoint", "fs.s3a.path.style.access"):
            if f"spark.hadoop.{key}" in conf and site.get(key) != conf[f"spark.hadoop.{key}"]:
                problems.append(
                    f"compose service {name!r}: hive-site.xml {key} is {site.get(key)!r}; config "
                    f"runtime.spark.conf has {conf[f'spark.hadoop.{key}']!r}"
                )
        if site.get("metastore.disallow.incompatible.col.type.changes", "true") != "false":
            problems.append(
                f"compose service {name!r}: hive-site.xml must set metastore.disallow.incompatible.col.type.changes "
                "false (gold replaces tables whose column types changed; the embedded mode sets the same)"
            )
        if m := re.search(r"ConnectionURL=jdbc:postgresql://([^:/\s]+)[^/\s]*/(\w+)", env.get("SERVICE_OPTS", "")):
            pg_host, database = m[1], m[2]
            user = re.search(r"ConnectionUserName=(\S+)", env["SERVICE_OPTS"])
            pg = services.get(hosts.get(pg_host, ""), {})
            init = " ".join(
                text_of(s) or "" for kind, s, t in _mounts(pg) if kind == "bind" and "docker-entrypoint-initdb.d" in t
            )
            for what, value, env_key in (
                ("DATABASE", database, "POSTGRES_DB"),
                ("ROLE", user and user[1], "POSTGRES_USER"),
            ):
                if value and _env(pg).get(env_key) != value and not re.search(rf"CREATE {what} {value}\b", init, re.I):
                    problems.append(
                        f"compose service {name!r} uses Postgres {what.lower()} {value!r}; compose service "
                        f"{pg_host!r} does not create it ({env_key} or an init script)"
                    )

    # secrets: never literal, required ones as ${VAR:?message}; bind mounts exist; URLs between services
    for where, value in walk(raw, ""):
        if SECRET_KEY.search(where.replace(".", "_")) and not where.endswith("_env") and value:
            problems.append(f"config {where} holds a secret; name an environment variable (*_env) instead")
    for name, service in sorted(services.items()):
        for key, value in sorted(envs[name].items()):
            if SECRET_KEY.search(key) and not REQUIRED_SECRET.fullmatch(value):
                problems.append(f"compose service {name!r} sets {key} to a literal; use ${{VAR:?message}}")
        for key, value in [*sorted(envs[name].items()), ("command", cmds[name])]:
            if SECRET_IN_VALUE.search(value):
                problems.append(f"compose service {name!r} ({key}) holds a literal password; use ${{VAR:?message}}")
            for scheme, host, port in URL.findall(COMPOSE_VAR.sub("x", value)):
                port = int(port) if port else SCHEME_PORTS.get(scheme)
                if host in hosts and host != name:
                    check_address(f"compose service {name!r} ({key})", host, port)
        for kind, source, _target in _mounts(service):
            if kind == "bind" and not exists(source):
                problems.append(f"compose service {name!r} mounts {source}, which does not exist")
        for other in service.get("depends_on") or []:
            if other not in services:
                problems.append(f"compose service {name!r} depends on {other!r}, which is no compose service")
    for name in sorted(services):
        for key, value in envs[name].items():
            for m in COMPOSE_VAR.finditer(value):
                if SECRET_KEY.search(m[1]) and m[2] != ":?":
                    problems.append(
                        f"compose service {name!r} ({key}) reads secret {m[1]} without ${{{m[1]}:?message}}"
                    )
    return sorted(set(problems), key=problems.index)


# ---- the real files ----

COMPOSE_TEXT = (ROOT / COMPOSE_FILE).read_text()
CONFIG_TEXT = (ROOT / CONFIG_FILE).read_text()
DOCKERFILE_TEXT = (ROOT / DOCKERFILE).read_text()
FACTS = spark_facts()
COMPOSE = yaml.load(COMPOSE_TEXT, Loader=YAML_LOADER)


def fresh_compose() -> dict:
    """A private copy (YAML anchors share objects between services; a mutation must touch one service only)."""
    return json.loads(json.dumps(COMPOSE))


def drift(compose=None, config=CONFIG_TEXT, dockerfile=DOCKERFILE_TEXT, **kwargs) -> list[str]:
    return compose_drift(compose or fresh_compose(), config, dockerfile, facts=kwargs.pop("facts", FACTS), **kwargs)


def test_the_real_files_do_not_drift():
    problems = drift()
    assert problems == [], "\n".join(problems)


def test_the_cluster_config_loads(monkeypatch):
    for name in {m[1] for m in CONFIG_VAR.finditer(CONFIG_TEXT)}:
        monkeypatch.setenv(name, "kafka:9092")
    config = load_config(ROOT / CONFIG_FILE)
    assert config.runtime.mode == "cluster" and config.runtime.dbt_target == "cluster"
    assert config.runtime.thrift_server == "spark-thrift:10000" and config.runtime.spark.executor_env is None


# ---- mutations: each is one kind of drift the check must report ----


def service(compose: dict, name: str) -> dict:
    return compose["services"][name]


def rename_metastore(c):
    c["services"]["hive-metastore"] = c["services"].pop("metastore")


def set_command(name, old, new):
    def mutate(c):
        service(c, name)["command"] = [new if part == old else part for part in service(c, name)["command"]]

    return mutate


def set_env(name, key, value):
    def mutate(c):
        if value is None:
            service(c, name)["environment"].pop(key)
        else:
            service(c, name)["environment"][key] = value

    return mutate


def set_image(name, image):
    def mutate(c):
        service(c, name).pop("build", None)
        service(c, name)["image"] = image

    return mutate


def handwritten_thrift_server(c):
    service(c, "spark-thrift")["command"] = (
        "spark-submit --class org.apache.spark.sql.hive.thriftserver.HiveThriftServer2 "
        "--packages org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2,org.apache.hadoop:hadoop-aws:3.3.6"
    )


def drop_local_dir_volume(c):
    api = service(c, "airflow-api-server")
    api["volumes"] = [v for v in api["volumes"] if "/var/lib/ticdc-lake" not in v]


def drop_postgres_init(c):
    service(c, "postgres")["volumes"] = [v for v in service(c, "postgres")["volumes"] if "initdb" not in v]


def missing_postgres_init(c):
    service(c, "postgres")["volumes"][1] = "./docker/missing.sh:/docker-entrypoint-initdb.d/10-metastore.sh:ro"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            rename_metastore,
            "config runtime.catalog.uri names host 'metastore', port 9083; no compose service is called",
        ),
        (
            set_command("spark-master", "7077", "7078"),
            "config runtime.spark.master names host 'spark-master', port 7077; compose service 'spark-master' "
            "exposes no port 7077",
        ),
        (set_env("kafka", "KAFKA_LISTENERS", "PLAINTEXT://:9094,CONTROLLER://:9093"), "exposes no port 9092"),
        (handwritten_thrift_server, "names iceberg-spark-runtime-3.5_2.12 1.9.2; config runtime.packages has 1.10.2"),
        (handwritten_thrift_server, "names hadoop-aws 3.3.6; config runtime.packages has 3.3.4"),
        (handwritten_thrift_server, "does not run `ticdc-lake thrift-server`"),
        (set_image("spark-worker", "apache/spark:3.5.7-python3"), "'spark-worker' runs Spark but its image is"),
        (set_image("spark-thrift", "apache/spark:3.5.7-python3"), "'spark-thrift' runs Spark but its image is"),
        (set_image("airflow-scheduler", "apache/airflow:3.1.0"), "'airflow-scheduler' runs Airflow but its image is"),
        (set_image("metastore", "apache/hive:4.0.1"), "no longer serves `get_table` (HIVE-26537)"),
        (set_env("spark-worker", "AWS_SECRET_ACCESS_KEY", None), "'spark-worker' reads the s3a:// warehouse but does"),
        (set_env("metastore", "AWS_ACCESS_KEY_ID", "${OTHER_KEY:?x}"), "from other variables than MinIO's root user"),
        (set_env("postgres", "POSTGRES_PASSWORD", "hunter2"), "'postgres' sets POSTGRES_PASSWORD to a literal"),
        (
            set_env(
                "airflow-scheduler", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:pw@postgres/airflow"
            ),
            "holds a literal password",
        ),
        (set_env("metastore", "HADOOP_CLASSPATH", "/opt/hadoop/share/hadoop/tools/lib/*"), "no Postgres JDBC driver"),
        (set_env("metastore", "HADOOP_CLASSPATH", "/opt/hive/jdbc/*"), "hadoop-aws (share/hadoop/tools/lib)"),
        (
            set_env("airflow-dag-processor", "TICDC_LAKE_CONFIG", "/opt/ticdc-lakehouse/config/pipeline.yaml"),
            "holds config/pipeline.yaml, not config/cluster.yaml",
        ),
        (set_env("spark-thrift", "TICDC_LAKE_CONFIG", "/etc/cluster.yaml"), "is no file of the image"),
        (set_env("spark-thrift", "TICDC_LAKE_CONFIG", None), "'spark-thrift' loads the config but does not set"),
        (drop_local_dir_volume, "runtime.local_dir /var/lib/ticdc-lake is not a named volume of compose service"),
        (set_command("spark-worker", "spark://spark-master:7077", "spark://spark-master:7078"), "joins spark://"),
        (
            set_env("airflow-scheduler", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://airflow-api-server:8081/"),
            "8081",
        ),
        (drop_postgres_init, "uses Postgres database 'metastore'; compose service 'postgres' does not create it"),
        (missing_postgres_init, "mounts docker/missing.sh, which does not exist"),
    ],
)
def test_compose_mutations_are_caught(mutate, expected):
    compose = fresh_compose()
    mutate(compose)
    problems = drift(compose)
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_a_renamed_service_leaves_no_dangling_dependency():
    compose = fresh_compose()
    rename_metastore(compose)
    assert "compose service 'airflow-scheduler' depends on 'metastore', which is no compose service" in drift(compose)


def test_a_dropped_bucket_is_caught():
    compose = fresh_compose()
    service(compose, "minio-init")["command"] = ["mc mb --ignore-existing lake/other"]
    assert "bucket 'lake'; no minio/mc service creates it" in "\n".join(drift(compose))


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("thrift://metastore:9083", "thrift://metastore:9084", "compose service 'metastore' exposes no port 9084"),
        ("spark-thrift:10000", "spark-thrift:10001", "'spark-thrift' exposes no port 10001"),
        ("spark-thrift:10000", "thrift:10000", "runtime.thrift_server names host 'thrift', port 10000; no compose"),
        ("http://minio:9000", "http://s3:9000", "spark.hadoop.fs.s3a.endpoint names host 's3'"),
        ("bootstrap_servers: kafka:9092", "bootstrap_servers: broker:9092", "names host 'broker'"),
        ("bootstrap_servers: kafka:9092", "bootstrap_servers: ${KAFKA_BOOTSTRAP}", "reads environment variable KAFKA"),
        (
            "bootstrap_servers: kafka:9092",
            "bootstrap_servers: kafka:9092\n      sasl_mechanism: PLAIN\n      sasl_username_env: KAFKA_USER",
            "sasl_username_env reads environment variable KAFKA_USER; compose service 'airflow-scheduler' does not",
        ),
        (
            "warehouse: s3a://lake/warehouse",
            "warehouse: s3a://lake/warehouse\n    credentials_env: CATALOG_TOKEN",
            "reads environment variable CATALOG_TOKEN; compose service 'spark-thrift' does not set it",
        ),
        ("hadoop-aws:3.3.4", "hadoop-aws:3.3.6", "hadoop-aws 3.3.6; pyspark's Hadoop is 3.3.4"),
        ("_2.12:1.10.2", "_2.12:1.10.1", "1.10.1; the embedded runtime"),
        ("runtime-3.5_2.12", "runtime-3.4_2.12", "(Spark 3.4); pyspark is 3.5"),
        ("s3a://lake/warehouse", "s3a://lake/other", "metastore.warehouse.dir is 's3a://lake/warehouse'"),
        ("local_dir: /var/lib/ticdc-lake", "local_dir: /srv/lake", "local_dir /srv/lake is not a named volume"),
        ("    conf:\n", "    executor_env: env.tar.gz\n    conf:\n", "executor_env is set"),
        ("    conf:\n", "    conf:\n      spark.hadoop.fs.s3a.secret.key: hunter2\n", "holds a secret"),
    ],
)
def test_config_mutations_are_caught(old, new, expected):
    assert old in CONFIG_TEXT
    problems = drift(config=CONFIG_TEXT.replace(old, new))
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_a_config_variable_that_compose_provides_is_resolved():
    config = CONFIG_TEXT.replace("bootstrap_servers: kafka:9092", "bootstrap_servers: ${KAFKA_BOOTSTRAP}")
    for value, expected in (("kafka:9092", []), ("kafka:9094", ["exposes no port 9094"])):
        compose = fresh_compose()
        for name in (
            "airflow-init",
            "airflow-api-server",
            "airflow-dag-processor",
            "airflow-triggerer",
            "airflow-scheduler",
            "spark-thrift",
        ):
            service(compose, name)["environment"]["KAFKA_BOOTSTRAP"] = value
        problems = drift(compose, config=config)
        assert [e for e in expected if not any(e in p for p in problems)] == [] and len(problems) == len(expected), (
            "\n".join(problems)
        )


def test_the_embedded_runtime_version_is_compared():
    facts = dataclasses.replace(FACTS, embedded_iceberg_jar="iceberg-spark-runtime-3.5_2.12-1.10.1.jar")
    assert any("the embedded runtime" in p and "1.10.1" in p for p in drift(facts=facts))


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (
            "<value>http://minio:9000</value>",
            "<value>http://minio:9999</value>",
            "fs.s3a.endpoint is 'http://minio:9999'",
        ),
        ("<value>s3a://lake/warehouse</value>", "<value>/opt/hive/data/warehouse</value>", "metastore.warehouse.dir"),
        (
            "<name>metastore.disallow.incompatible.col.type.changes</name>\n    <value>false</value>",
            "<name>metastore.disallow.incompatible.col.type.changes</name>\n    <value>true</value>",
            "disallow.incompatible.col.type.changes",
        ),
    ],
)
def test_hive_site_mutations_are_caught(old, new, expected):
    site = (ROOT / "docker/hive-site.xml").read_text()
    assert old in site
    problems = drift(files={"docker/hive-site.xml": site.replace(old, new)})
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("uv pip install --system --no-deps -e .", "uv pip install --system --no-deps .", "image's checkout"),
        ("COPY dbt_project ./dbt_project", "COPY dbt_project/models ./dbt_project/models", "the dbt project beside"),
        ("FROM python:3.11-slim-bookworm", "FROM python:3.12-slim-bookworm", "FROM python:3.11"),
        ("COPY config ./config", "COPY config/pipeline.yaml ./config/", "is no file of the image"),
        ("PYSPARK_PYTHON=python3", "PYSPARK_PYTHON=/opt/env/bin/python", "PYSPARK_PYTHON=python3"),
        ("ENV PATH=$SPARK_HOME/bin:$PATH", "", "Spark's bin on PATH"),
    ],
)
def test_dockerfile_mutations_are_caught(old, new, expected):
    assert old in DOCKERFILE_TEXT
    problems = drift(dockerfile=DOCKERFILE_TEXT.replace(old, new))
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"
