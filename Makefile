# turnout — `make help` lists the targets. State lives under $TURNOUT_HOME (default ./.turnout).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
TURNOUT_HOME ?= $(CURDIR)/.turnout
# The demo's history runs 2026-10-12 .. 2026-11-09; features and the index are built as of its
# last day (gold validation rightly rejects it as stale as of today).
DEMO_NOW ?= 2026-11-09T00:00Z
# The content tower as it stood three weeks earlier (the start of the training window), so the
# training set's label instants see embeddings, as they would where the tower predates the events.
DEMO_TOWER_AT ?= 2026-10-19T00:00Z
# `make demo` ends by starting the feed service here and asking it for a feed.
DEMO_PORT ?= 8765
# Where `make up` / `make demo` serve the Airflow and MLflow UIs.
AIRFLOW_PORT ?= 8080
MLFLOW_PORT ?= 5000
export TURNOUT_HOME

.DEFAULT_GOAL := help
.PHONY: help setup jars jars-s3 spark-classes lock demo test test-cluster lint typecheck unit integration docs clean up down loop cluster-up cluster-down

help: ## Show this help.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: $(VENV)/.installed .cache/jars/.fetched spark-classes ## Create .venv from requirements.lock, fetch Delta's jars, dump Spark's class archive.

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==$(UV_VERSION)
	@# --compile-bytecode (pip's default, not uv's): where PYTHONDONTWRITEBYTECODE is set, as on our
	@# dev machines, every process otherwise compiles what it imports from source: great-expectations
	@# 5.5 -> 2.3 s, Feast 7 -> 5 s per process, and each DAG task, CLI step and test is a process.
	$(BIN)/uv pip sync --compile-bytecode --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --no-deps -e .
	touch $@

.cache/jars/.fetched: conf/jars/pom.xml
	$(MAKE) jars
	touch $@

jars: ## Copy Delta Lake's jars from Maven Central into .cache/jars (needs mvn, once).
	cd conf/jars && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
		-DincludeGroupIds=io.delta -DoutputDirectory=$(CURDIR)/.cache/jars

spark-classes: $(VENV)/.installed .cache/jars/.fetched ## Dump the classes a Spark + Delta job loads, for faster driver starts (~1 min, once per JDK and jars).
	$(BIN)/python -m pipelines.spark_classes

.cache/jars-s3/.fetched: conf/jars/s3/pom.xml
	$(MAKE) jars-s3
	touch $@

jars-s3: ## Copy Hadoop's S3A connector and the AWS SDK bundle into .cache/jars-s3 (Delta on s3a://; ~690 MB).
	cd conf/jars/s3 && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/.cache/jars-s3

lock: ## Re-resolve requirements.lock from pyproject.toml.
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements.lock

demo: setup ## Simulate a history, build it through the deployment (make up: ingest -> features -> index, tower, both heads), evaluate, ask the feed service; leaves the UIs up.
	$(BIN)/turnout simulate --users 3000 --days 28 --seed 7 --overwrite
	UP_SERVICES="airflow mlflow" AIRFLOW_PORT=$(AIRFLOW_PORT) MLFLOW_PORT=$(MLFLOW_PORT) ops/up.sh
	$(BIN)/turnout demo --now $(DEMO_NOW) --tower-at $(DEMO_TOWER_AT) --airflow-url http://127.0.0.1:$(AIRFLOW_PORT)
	$(BIN)/turnout evaluate
	@# The feed service on the published clock (the index's instant, DEMO_NOW), asked over HTTP.
	UP_SERVICES=feed FEED_PORT=$(DEMO_PORT) ops/up.sh
	$(BIN)/turnout feed --server http://127.0.0.1:$(DEMO_PORT) --wait 900 --user-id u0000001
	@echo "Airflow UI http://127.0.0.1:$(AIRFLOW_PORT)  MLflow UI http://127.0.0.1:$(MLFLOW_PORT)  feed http://127.0.0.1:$(DEMO_PORT)/v1/feed?user_id=u0000001  (make down stops them)"

lint: setup ## ruff, and the import-layer contract of pyproject.toml (lint-imports).
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: setup ## mypy.
	$(BIN)/mypy

unit: setup .cache/jars-s3/.fetched ## Unit tests only (no engines).
	$(BIN)/pytest -m "not integration"

test: setup .cache/jars-s3/.fetched lint typecheck ## ruff, mypy, the pytest suite, then the cluster test (what CI runs).
	$(BIN)/pytest
	@# In a pytest process of its own: no suite JVM beside the Spark cluster's.
	TURNOUT_CLUSTER_TEST=1 $(BIN)/pytest tests/system/test_cluster.py

test-cluster: setup .cache/jars-s3/.fetched ## Only the cluster profile on real servers against the local profile (~10 min).
	TURNOUT_CLUSTER_TEST=1 $(BIN)/pytest tests/system/test_cluster.py

docs: setup ## Regenerate docs/landing-schema.md from the code.
	$(BIN)/turnout schema > docs/landing-schema.md

clean: ## Remove $(TURNOUT_HOME) (all local state).
	rm -rf $(TURNOUT_HOME)

up: setup ## Start the deployment: Airflow (UI :8080), MLflow UI (:5000), feed service (:8765).
	AIRFLOW_PORT=$(AIRFLOW_PORT) MLFLOW_PORT=$(MLFLOW_PORT) ops/up.sh

LOOP_HOURS ?= 6
LOOP_STEP ?= 6
loop: setup ## Play the next LOOP_HOURS platform hours through the running deployment, LOOP_STEP at a time (make up first).
	$(BIN)/turnout loop --hours $(LOOP_HOURS) --step $(LOOP_STEP) --airflow-url http://127.0.0.1:$(AIRFLOW_PORT)

down: ## Stop everything `make up` started (whole process groups, workers included).
	TURNOUT_HOME=$(TURNOUT_HOME) ops/down.sh

cluster-up: setup ## Start conf/cluster-local.yaml's servers: PostgreSQL, Spark master + 2 workers, Redis, MLflow server, Airflow on PostgreSQL.
	TURNOUT_HOME=$(TURNOUT_HOME) ops/cluster-up.sh

cluster-down: ## Stop everything `make cluster-up` started.
	TURNOUT_HOME=$(TURNOUT_HOME) ops/cluster-down.sh
