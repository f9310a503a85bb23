"""A loopback cluster made of the real programs: `ticdc-kit cluster up | status | down`.

Cluster mode on one machine, each service its own process (the same services docker-compose.yml runs in
containers):

- `metastore`: the Hive Metastore service from pyspark's Hive jars; it alone opens its Derby database, so
  several Spark applications share one catalog at once;
- `broker`: the Kafka-compatible broker (Tansu, in memory);
- `spark-master` and `spark-worker`: Spark standalone from pyspark's `spark-class`; executors run in the
  worker's JVMs with the packed Python environment (`runtime.executor_env`);
- `thrift-server`: the Spark Thrift Server, a Spark application of its own, which dbt uses (`method: thrift`);
- `airflow-api-server`, `airflow-scheduler`, `airflow-dag-processor`, `airflow-triggerer`: Airflow on SQLite with
  the LocalExecutor (the triggerer watches deferred tasks: the continuous DAG's driver).

`up` starts from a clean cluster directory (the broker keeps nothing across restarts, so old tables would
describe topics that no longer exist), packs the executors' environment, starts the services in dependency
order, waits until each answers, and writes `cluster.yaml` (the pipeline configuration in `mode: cluster`,
with the sources of the configuration it was given) and `cluster.json` (what runs where) into the directory.
Every service's output goes to `logs/<service>.log` there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import yaml

from spark_jobs.config import DEFAULT_CONFIG, PROJECT_ROOT, load_config
from spark_jobs.runtime.thrift_server import spark_class, spark_home
from ticdc_devkit.broker import tansu_command
from ticdc_devkit.processes import free_port

log = logging.getLogger("ticdc-lake.cluster")

STATE_FILE, CONFIG_FILE = "cluster.json", "cluster.yaml"
WORKER_CORES, WORKER_MEMORY = 4, "6g"  # advertised: the Thrift Server and two jobs hold executors at once
APP_CORES, THRIFT_CORES, EXECUTOR_MEMORY = 2, 1, "1g"
# as docker-compose.yml's worker: the directory of an application that ended an hour ago goes (each holds its
# executors' unpacked Python, about 350 MB, and a run of the ingest DAG starts six applications)
WORKER_CLEANUP = (
    "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=600 -Dspark.worker.cleanup.appDataTtl=3600"
)
READY_SECONDS = 180
DEFAULT_DIRECTORY = PROJECT_ROOT / ".local" / "cluster"
EXECUTOR_ENV_ARCHIVE = PROJECT_ROOT / ".local" / "executor-env.tar.gz"  # outside the cluster: survives `up`


@dataclass
class Service:
    name: str
    pid: int
    port: int
    log: str
    ui: int = 0  # Spark's master and worker: the web UI's port (its /json/ says what runs)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def kill_strays(directory: Path) -> list[int]:
    """SIGKILL every process whose command line names `directory` once the services are down: a task process the
    scheduler started in a session of its own (a task's `spark-submit`) outlives its parent's process group."""
    marker, stray, ours = str(directory).encode(), [], _ancestry()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                stray.append(int(entry.name))
        except OSError:
            continue  # ended meanwhile, or not ours to read
    return stray


def _ancestry() -> set[int]:
    """This process and its ancestors (a shell that ran `ticdc-kit cluster down --dir ...` names the directory)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            break
    return pids


def _alive(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that ended (started by `up` in this process)
            return False
    except ChildProcessError:
        pass  # not our child: `up` ran in another process
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


class LoopbackCluster:
    """The cluster under `directory`; `up()` starts it, `down()` stops every process `cluster.json` names."""

    def __init__(self, directory: Path):
        self.directory = Path(directory).resolve()
        self.logs = self.directory / "logs"
        self.services: dict[str, Service] = {}
        state = self.directory / STATE_FILE
        if state.is_file():
            self.services = {s["name"]: Service(**s) for s in json.loads(state.read_text())["services"]}

    @property
    def config_path(self) -> Path:
        return self.directory / CONFIG_FILE

    def port(self, service: str) -> int:
        return self.services[service].port

    def running(self) -> dict[str, bool]:
        return {name: _alive(s.pid) for name, s in self.services.items()}

    # -- up -----------------------------------------------------------------------------------------------------

    def up(self, base_config: Path = DEFAULT_CONFIG, airflow: bool = True, jvm_options: str = "") -> LoopbackCluster:
        """Start every service. `jvm_options` go to the metastore's JVM and every executor's
        (`spark.executor.extraJavaOptions` in the cluster's configuration), as `SPARK_SUBMIT_OPTS` go to what
        `spark-submit` starts; the tests give all of them C1 only (docs/environment.md)."""
        if any(self.running().values()):
            raise RuntimeError(f"a cluster already runs from {self.directory}; `ticdc-kit cluster down` first")
        load_config(base_config)  # a bad configuration stops here, before anything starts
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.logs.mkdir(parents=True)
        self.scratch_dir.mkdir()
        self.services = {}
        started = time.monotonic()
        try:
            self._start_metastore(jvm_options)
            self._start_broker()
            self._start_spark()
            self._write_config(base_config, jvm_options)
            self._pack_executor_env()
            self._start_thrift_server()
            if airflow:
                self._start_airflow()
        except BaseException:
            self.down()
            raise
        log.info("loopback cluster up in %.0fs: %s", time.monotonic() - started, self.config_path)
        return self

    def _spawn(self, name: str, port: int, args: list[str], env: dict[str, str] | None = None, ui: int = 0) -> Service:
        """A detached process (its own session: it outlives this command), its output in logs/<name>.log."""
        log_path = self.logs / f"{name}.log"
        with log_path.open("ab") as out:
            process = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=self.directory,
                start_new_session=True,
            )
        service = Service(name, process.pid, port, str(log_path), ui)
        self.services[name] = service
        self._save()
        return service

    def _wait(self, service: Service, ready, what: str) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while not ready():
            if not _alive(service.pid):
                raise RuntimeError(f"{service.name} exited while starting; see {service.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{service.name} did not {what} within {READY_SECONDS}s; see {service.log}")
            time.sleep(0.5)
        log.info("  %-22s pid %-7d port %d", service.name, service.pid, service.port)

    def _spark_env(self, **extra: str) -> dict[str, str]:
        """The Spark JVMs' environment: their scratch (block manager, fetched jars and archives) stays in the
        cluster's directory, where a killed executor's is removed with it, instead of in /tmp."""
        return {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.scratch_dir),
            **extra,
        }

    @property
    def scratch_dir(self) -> Path:
        return self.directory / "spark-local"

    def _daemon_env(self, **extra: str) -> dict[str, str]:
        """The environment of the metastore, the master and the worker: without a class path added to the
        environment's (the tests add the Iceberg runtime to their Spark JVMs'), so that the worker's executors get
        their jars from the driver, as on a cluster of machines."""
        return self._spark_env(SPARK_DIST_CLASSPATH="", **extra)

    def _start_metastore(self, jvm_options: str) -> None:
        conf_dir = self.directory / "metastore" / "conf"
        conf_dir.mkdir(parents=True)
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.directory / 'metastore' / 'db'};create=true",
            "hive.metastore.warehouse.dir": self.warehouse,
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.async.log.enabled": "false",  # else NoClassDefFoundError: com/lmax/disruptor/EventTranslatorVararg
            # gold replaces a table in one commit when a DDL changed a column's type (Iceberg owns the schema)
            "hive.metastore.disallow.incompatible.col.type.changes": "false",
            # concurrent requests must not share a half-built compiled query (spark_session.py, embedded mode)
            "datanucleus.cache.queryCompilation.type": "none",
            "datanucleus.cache.queryCompilationDatastore.type": "none",
        }
        properties = "".join(
            f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>" for k, v in settings.items()
        )
        (conf_dir / "hive-site.xml").write_text(f"<configuration>{properties}</configuration>\n")
        # `spark-class` gives a class of its own (not Spark's daemons) no SPARK_DAEMON_* options or memory, only the
        # conf directory's `java-opts` file (its launcher splits a line as a shell does) and SPARK_DRIVER_MEMORY
        # its scratch (a session's `<id>_resources` directory) in the cluster's, its `hive.log` beside the other
        # logs: by default both go to /tmp, where every cluster left them behind
        options = [
            f"-Dderby.system.home={self.directory / 'metastore'}",
            f"-Djava.io.tmpdir={self.scratch_dir}",
            f"-Dhive.log.dir={self.logs}",
            *shlex.split(jvm_options),
        ]
        (conf_dir / "java-opts").write_text(shlex.join(options) + "\n")
        port = free_port()
        service = self._spawn(
            "metastore",
            port,
            [
                spark_class(),
                "org.apache.hadoop.hive.metastore.HiveMetaStore",
                "-p",
                str(port),
            ],
            self._daemon_env(SPARK_CONF_DIR=str(conf_dir), SPARK_DRIVER_MEMORY="1g"),
        )
        self._wait(service, lambda: _port_open(port), "listen")

    @property
    def warehouse(self) -> str:
        return (self.directory / "warehouse").as_uri()

    def _start_broker(self) -> None:
        port = free_port()
        service = self._spawn("broker", port, tansu_command(port))
        self._wait(service, lambda: _port_open(port), "listen")

    def _start_spark(self) -> None:
        port, ui = free_port(), free_port()
        master = self._spawn(
            "spark-master",
            port,
            [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
            + ["--webui-port", str(ui)],
            self._daemon_env(SPARK_DAEMON_MEMORY="512m"),
            ui,
        )
        self._wait(master, lambda: _port_open(port), "listen")
        self.start_worker()

    def start_worker(self) -> Service:
        """The Spark worker (again, after a failure): registered with the master before this returns."""
        ui = free_port()
        worker = self._spawn(
            "spark-worker",
            ui,
            [spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", self.master_url]
            + ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--webui-port", str(ui)]
            + ["--work-dir", str(self.work_dir)],
            self._daemon_env(SPARK_DAEMON_MEMORY="512m", SPARK_WORKER_OPTS=WORKER_CLEANUP),
            ui,
        )
        self._wait(worker, lambda: self._registered(ui), "register with the master")
        return worker

    def _registered(self, worker_ui: int) -> bool:
        return any(
            w["state"] == "ALIVE" and w["webuiaddress"].endswith(f":{worker_ui}")
            for w in self.master_json().get("workers", [])
        )

    @property
    def work_dir(self) -> Path:
        """Where the worker runs executors: one directory per application, one per executor in it (its stderr)."""
        return self.directory / "spark-work"

    def master_json(self) -> dict:
        """The master's state: workers, active and completed applications (its web UI's /json/)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.services['spark-master'].ui}/json/", timeout=2) as r:
                return json.load(r)
        except OSError:
            return {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port('spark-master')}"

    def _write_config(self, base_config: Path, jvm_options: str) -> None:
        """The pipeline configuration in cluster mode: this cluster's runtime, the base configuration's sources,
        maintenance, freshness and daily settings (as written: `${...}` references stay for the services'
        environment to resolve)."""
        raw = yaml.safe_load(Path(base_config).read_text())
        thrift_port = free_port()
        raw["runtime"] = {
            "mode": "cluster",
            "local_dir": str(self.directory / "local"),
            "spark": {
                "master": self.master_url,
                "driver_memory": "1g",
                "shuffle_partitions": 4,
                "executor_env": str(EXECUTOR_ENV_ARCHIVE),
                "conf": {
                    "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1",
                    "spark.cores.max": str(APP_CORES),
                    "spark.executor.memory": EXECUTOR_MEMORY,
                    # the JVMs' temporary files stay in the cluster's directory: an executor copies the executors'
                    # environment (116 MB) there before unpacking it, and a killed one leaves the copy
                    "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={self.scratch_dir}",
                    "spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={self.scratch_dir} {jvm_options}".strip(),
                    # the metastore's Derby has no lock tables (HIVE_LOCKS): Iceberg must not ask for locks;
                    # the pipeline's own lock (runtime/lock.py) keeps one writer per source
                    "spark.hadoop.iceberg.engine.hive.lock-enabled": "false",
                },
            },
            "catalog": {
                "type": "hive",
                "uri": f"thrift://127.0.0.1:{self.port('metastore')}",
                "warehouse": self.warehouse,
            },
            "dbt_target": "cluster",
            "thrift_server": f"127.0.0.1:{thrift_port}",
        }
        self.config_path.write_text(
            "# Written by `ticdc-kit cluster up`: the loopback cluster in "
            + str(self.directory)
            + "\n"
            + yaml.safe_dump(raw, sort_keys=False)
        )
        load_config(self.config_path)

    def _pack_executor_env(self) -> None:
        from spark_jobs.runtime.executor_env import pack_executor_env

        pack_executor_env(EXECUTOR_ENV_ARCHIVE)

    def _start_thrift_server(self) -> None:
        from spark_jobs.runtime.thrift_server import thrift_server_command

        config = load_config(self.config_path)
        port = int(config.runtime.thrift_server.rsplit(":", 1)[1])
        service = self._spawn("thrift-server", port, thrift_server_command(config, THRIFT_CORES), self._spark_env())
        self._wait(service, lambda: _port_open(port), "listen")

    def airflow_env(self, api_port: int | None = None) -> dict[str, str]:
        """What every Airflow process of the cluster (and `airflow` commands against it) runs with; the API
        server's port is the running one's unless given (while starting it)."""
        api = api_port or (self.port("airflow-api-server") if "airflow-api-server" in self.services else None)
        env = {
            "AIRFLOW_HOME": str(self.directory / "airflow"),
            # SQLite's 5 s default wait for a lock is too short for three Airflow processes on two busy cores
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.directory / 'airflow' / 'airflow.db'}?timeout=60",
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            # each parse of a DAG file is a process of its own: every 2 minutes, not Airflow's 30 s, on two cores
            # (a changed DAG file shows within 2 minutes)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API_AUTH__JWT_SECRET": self._jwt_secret(),
            "TICDC_LAKE_CONFIG": str(self.config_path),
            "TICDC_DEMO_BOOTSTRAP": f"127.0.0.1:{self.port('broker')}",
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "False",
            "SPARK_LOCAL_DIRS": str(self.scratch_dir),  # the drivers' scratch, as the other Spark JVMs'
        }
        if api is not None:
            env |= {
                "AIRFLOW__API__PORT": str(api),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api}/execution/",
            }
        return env

    def _jwt_secret(self) -> str:
        """One secret the three Airflow processes share, in a file only its owner reads (never in a log)."""
        path = self.directory / "airflow" / "jwt-secret"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(os.urandom(48).hex())
        return path.read_text()

    def _start_airflow(self) -> None:
        api_port = free_port()
        env = self.airflow_env(api_port)
        subprocess.run(
            [_bin("airflow"), "db", "migrate"],
            env={**os.environ, **env},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        api = self._spawn("airflow-api-server", api_port, [_bin("airflow"), "api-server", "--port", str(api_port)], env)
        scheduler = self._spawn("airflow-scheduler", 0, [_bin("airflow"), "scheduler"], env)
        processor = self._spawn("airflow-dag-processor", 0, [_bin("airflow"), "dag-processor"], env)
        triggerer = self._spawn("airflow-triggerer", 0, [_bin("airflow"), "triggerer"], env)
        self._wait(api, lambda: _http_ok(f"http://127.0.0.1:{api_port}/api/v2/monitor/health"), "answer")
        self._wait(scheduler, lambda: True, "start")
        self._wait(processor, lambda: True, "start")
        self._wait(triggerer, lambda: True, "start")

    def airflow(self, *args: str) -> str:
        """An `airflow` command against this cluster's Airflow; its standard output."""
        done = subprocess.run(
            [_bin("airflow"), *args],
            env={**os.environ, **self.airflow_env()},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def start_run(self, dag_id: str) -> str:
        """A run of `dag_id` through the scheduler; its run id. A paused DAG is unpaused, which starts the run
        its schedule has due (a timedelta schedule without catchup always has one; `@continuous`, at once); an
        active DAG is triggered. Waits first until the dag processor has put the DAG in the database."""
        deadline = time.monotonic() + READY_SECONDS
        while (paused := self._paused(dag_id)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dag processor did not parse {dag_id} within {READY_SECONDS}s; see {self.logs}")
            time.sleep(2)
        if not paused:
            answer = self.airflow("dags", "trigger", dag_id, "-o", "json").splitlines()
            return json.loads(next(line for line in answer if line.startswith("[")))[0]["dag_run_id"]  # after warnings
        self.airflow("dags", "unpause", dag_id)
        while not (runs := self._runs(dag_id)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"unpausing {dag_id} started no run within {READY_SECONDS}s; see {self.logs}")
            time.sleep(2)
        return max(runs, key=lambda r: r["run_after"])["run_id"]

    def _metadata(self, query: str, *params) -> list[tuple]:
        """A read of the cluster's Airflow database (SQLite: cheap, where every `airflow` command costs seconds of
        CPU to start)."""
        database = self.directory / "airflow" / "airflow.db"
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)) as connection:
            return connection.execute(query, params).fetchall()

    def _paused(self, dag_id: str) -> bool | None:
        """None: the DAG is not in the database yet."""
        rows = self._metadata("SELECT is_paused FROM dag WHERE dag_id = ?", dag_id)
        return bool(rows[0][0]) if rows else None

    def _runs(self, dag_id: str) -> list[dict]:
        rows = self._metadata("SELECT run_id, state, run_after FROM dag_run WHERE dag_id = ?", dag_id)
        return [{"run_id": run_id, "state": state, "run_after": after} for run_id, state, after in rows]

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> tuple[str | None, int] | None:
        """(state, try number) of a task of a run; None before the run has the task."""
        rows = self._metadata(
            "SELECT state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            dag_id,
            run_id,
            task_id,
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        return next((r["state"] for r in self._runs(dag_id) if r["run_id"] == run_id), None)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 1200) -> str:
        """Wait until the run ends (success or failed); its state."""
        deadline = time.monotonic() + timeout
        while (state := self.run_state(dag_id, run_id)) not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_id} run {run_id} still {state} after {timeout:.0f}s; see {self.logs}")
            time.sleep(5)
        return state

    def _save(self) -> None:
        state = {"directory": str(self.directory), "services": [asdict(s) for s in self.services.values()]}
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    # -- down ---------------------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every service (SIGTERM to its process group, SIGKILL after 20 s), the last started first; then
        drop what the executors unpacked and fetched (hundreds of MB an application), keeping their logs."""
        stopped = []
        for service in reversed(list(self.services.values())):
            if not service.pid or not _alive(service.pid):
                continue
            try:
                os.killpg(service.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 20
            while _alive(service.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(service.pid):
                os.killpg(service.pid, signal.SIGKILL)
            stopped.append(service.name)
        stopped += [f"stray process {pid}" for pid in kill_strays(self.directory)]
        shutil.rmtree(self.scratch_dir, ignore_errors=True)
        for copy in self.work_dir.glob("app-*/*/*"):
            if copy.is_dir():
                shutil.rmtree(copy, ignore_errors=True)
            elif copy.name not in ("stdout", "stderr"):
                copy.unlink(missing_ok=True)
        return stopped
