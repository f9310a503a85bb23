# Two commands do all the set-up on a fresh machine (Python 3.11 and Java 17):
#   make demo   the embedded demo: broker on loopback, change stream, ingest DAG, gold tables
#   make test   the whole test suite
# Both create .venv from requirements.lock when it is missing or stale, with the product (this directory) and the
# development kit (devkit/: the demo, the embedded broker, the simulator, the loopback cluster) installed editable.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint format bench bench-decode bench-land bench-silver bench-gold bench-freshness lock venv check-java check-browser check-mariadb clean cluster-up cluster-demo cluster-down

# Bytecode: the sync compiles all of site-packages (uv compiles nothing by default; uv 0.13's install compiles only
# what it installed, so the flag belongs on the sync), and `venv` compiles the checkout's own code where it is
# stale, on every call. These machines set PYTHONDONTWRITEBYTECODE, so without it every process compiles every
# module it imports from source: `import airflow` took 6.4 s instead of 3.0.
$(STAMP): requirements.lock pyproject.toml devkit/pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip sync --python $(BIN)/python --quiet --compile-bytecode requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps -e . -e devkit
	@touch $@

venv: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 spark_jobs dags plugins devkit/ticdc_devkit tests bench

check-java:
	@java -version 2>&1 | grep -q 'version "17' || { echo "Java 17 is required (java -version)"; exit 1; }

# The browser tests drive Debian's Chromium (Playwright cannot download its own browser here): installed
# when missing if we are root, otherwise one line says what to do.
CHROMIUM := /usr/bin/chromium

check-browser:
	@test -x $(CHROMIUM) || { test "$$(id -u)" = 0 \
		&& apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
		&& test -x $(CHROMIUM); } \
		|| { echo "Chromium is required for the browser tests: run 'apt-get install -y chromium' as root"; exit 1; }

# Reconciliation's live path is tested against Debian's MariaDB (a real MySQL-protocol server on loopback):
# installed when missing if we are root, otherwise one line says what to do.
MARIADBD := /usr/sbin/mariadbd

check-mariadb:
	@test -x $(MARIADBD) || { test "$$(id -u)" = 0 \
		&& apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null 2>&1 \
		&& test -x $(MARIADBD); } \
		|| { echo "MariaDB is required for the reconciliation tests: run 'apt-get install -y mariadb-server' as root"; exit 1; }

demo: venv check-java
	$(BIN)/ticdc-kit demo

# The suite runs over two worker processes (pytest-xdist, whole files per worker), each with its own Spark session,
# broker and Airflow home, as a single run has. The workers take the loopback cluster and the kill loops first
# (tests/conftest.py orders the files), then the rest, so that they end together. Three workers kept the machine
# busier and took as long (docs/test-times.md): each test's share of the CPU shrank by a third.
# The codec suite runs once more on its precise path (no generated fast paths) beside them; any failure fails the
# target.
WORKERS ?= 2
PRECISE_LOG := .local/test-precise.log

test: venv check-java check-browser check-mariadb
	@mkdir -p .local
	@$(BIN)/python -m tests.jvm_archive
	@TICDC_CODECS_PRECISE_ONLY=1 $(BIN)/python -m pytest tests/codecs -q -p no:cacheprovider > $(PRECISE_LOG) 2>&1 & precise=$$!; \
	trap 'kill $$precise 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --basetemp=.local/pytest; suite=$$?; \
	wait $$precise; precise=$$?; \
	echo "== the codec suite on its precise path (TICDC_CODECS_PRECISE_ONLY=1; log: $(PRECISE_LOG)) =="; \
	if [ $$precise = 0 ]; then tail -n 3 $(PRECISE_LOG); else cat $(PRECISE_LOG); fi; \
	test $$suite = 0 && test $$precise = 0

test-fast: venv
	$(BIN)/python -m pytest -m "not e2e and not long and not cluster"

# ruff (style), import-linter (the layers of docs/architecture.md: pyproject.toml's [tool.importlinter]; the checkout
# and plugins/ on the path make the DAG files the package `dags`), mypy and sqlfluff (the dbt project's SQL).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONPATH=.:plugins $(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/sqlfluff lint dbt_project/models

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# every benchmark and one table of their ratios; QUICK=1 for smaller sizes, README=1 to write it into README.md
bench: venv check-java
	$(BIN)/python bench/all.py $(if $(QUICK),--quick) $(if $(README),--readme)

bench-decode: venv
	$(BIN)/python bench/decode.py

bench-land: venv check-java
	$(BIN)/python bench/land.py

bench-silver: venv check-java
	$(BIN)/python bench/silver.py

bench-gold: venv check-java
	$(BIN)/python bench/gold.py

# continuous mode: seconds from a change's production to the gold publication that first includes it (CLUSTER=1:
# on a loopback cluster of its own)
bench-freshness: venv check-java
	$(BIN)/python bench/freshness.py $(if $(CLUSTER),--cluster)

# Cluster mode on one machine: every service a real process (README, "Running on a cluster").
CLUSTER_CONFIG := .local/cluster/cluster.yaml

cluster-up: venv check-java
	$(BIN)/ticdc-kit cluster up

cluster-demo: venv check-java
	@$(BIN)/ticdc-kit cluster status >/dev/null || $(BIN)/ticdc-kit cluster up
	$(BIN)/ticdc-kit demo --config $(CLUSTER_CONFIG)

cluster-down: venv
	$(BIN)/ticdc-kit cluster down

# Recompile the lock file after changing requirements.in.
lock: venv
	$(BIN)/uv pip compile --python-version 3.11 --quiet requirements.in -o requirements.lock

clean:
	rm -rf .local dbt_project/target dbt_project/logs
