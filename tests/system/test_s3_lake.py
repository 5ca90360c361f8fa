"""The Delta lake and the landing zone on S3 (``s3a://``), against the same lines on local disk.

``conf/s3-local.yaml`` is the local profile with ``lake.root`` and ``landing.root`` in a bucket of
an S3-compatible server on loopback (moto's server, from PyPI, as a process of its own) and Hadoop's
S3A connector on Spark's classpath (``make jars-s3``). One small simulated history is delivered to
a local landing folder and uploaded, file by file, to the bucket; then ingest -> bronze -> silver ->
gold -> suites -> apply -> materialize (``tests/system/lake_pipeline.py``) runs once per profile,
each in a process of its own, and:

* every bronze, silver and gold table and the quarantine have the same rows (order-free hashes),
  the ingest counts agree and the same keys reach the online store;
* the S3 run's tables are Delta tables in the bucket (their commits listed over the S3 API), and
  nothing of the lake was written to its home.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from simulator import SimulationConfig, simulate
from tests.integration.training_world import history_end
from tests.system.processes import running

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
S3_PORT = 59390  # conf/s3-local.yaml's spark.hadoop.fs.s3a.endpoint
BUCKET = "turnout-lake"
CONFIG = SimulationConfig(users=250, days=16, seed=31)
END = history_end(CONFIG)
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "turnout", "AWS_SECRET_ACCESS_KEY": "turnout-secret"}


def _pipeline(home: Path, profile: str, extra: dict[str, str]) -> dict[str, Any]:
    """``tests/system/lake_pipeline.py`` in a process of its own; its JSON summary."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TURNOUT_"))}
    env.update(TURNOUT_HOME=str(home), TURNOUT_PROFILE=profile, **extra)
    args = [PYTHON, "-m", "tests.system.lake_pipeline", END.isoformat()]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _s3_ready() -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{S3_PORT}/moto-api/", timeout=5) as r:
        return bool(r.status == 200)


def _run_on_s3(tmp_path: Path, landing: Path) -> tuple[dict[str, Any], set[str], int]:
    """An S3 server, the landing files uploaded to it, the pipeline in the s3-local profile; returns
    its summary, every object key under the bucket's ``lake/`` and how many files were uploaded."""
    import boto3

    server = [PYTHON, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(S3_PORT)]
    with running(server, dict(os.environ), tmp_path / "s3.log", _s3_ready, 60):
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{S3_PORT}",
            region_name="us-east-1",
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket=BUCKET)
        files = sorted(p for p in landing.rglob("*") if p.is_file())
        for f in files:
            s3.upload_file(str(f), BUCKET, f"landing/{f.relative_to(landing)}")
        summary = _pipeline(tmp_path / "s3", "s3-local", CREDENTIALS)
        listed = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="lake/")
        keys = {o["Key"] for page in listed for o in page.get("Contents", [])}
    return summary, keys, len(files)


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_s3_lake_writes_what_the_local_lake_writes(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    simulate(CONFIG, landing, tmp_path / "simulator")
    local = _pipeline(tmp_path / "local", "local", {"TURNOUT__LANDING__ROOT": str(landing)})
    on_s3, keys, files = _run_on_s3(tmp_path, landing)

    assert (local["lake"], on_s3["lake"]) == (str(tmp_path / "local" / "lake"), f"s3a://{BUCKET}/lake")
    assert files > 50 and local["ingest"]["tables"]["impressions"]["written"] > 1000
    assert all(t["rows"] > 0 for t in local["gold"].values()), local["gold"]
    assert sum(rows for _, rows in local["materialized"].values()) > 0
    for part in ("ingest", "bronze", "silver", "quarantine", "gold", "validated", "materialized"):
        assert on_s3[part] == local[part], part
    for layer, tables in (("silver", on_s3["silver"]), ("gold", on_s3["gold"])):
        for table in tables:
            assert f"lake/{layer}/{table}/_delta_log/00000000000000000000.json" in keys, (layer, table)
    assert not (tmp_path / "s3" / "lake").exists()
