"""The fault matrix: each dependency of the real `turnout serve` process taken away for real (files
moved, a Redis server stopped, the impression log's file turned into /dev/full), at start-up and
while serving, and given back. The service must keep answering (no 5xx), name the fallback in
``served_by`` and ``/healthz``, and recover by itself.

The world is a copy of the session's trained world (both heads promoted, index and catalog
published, features online), served through a Redis capacity counter this test starts, with the
dependency checks every second. The table it measures is written to ``$TURNOUT_FAULT_MATRIX``
(default: the test's temp folder) as JSON and Markdown; the README's table is that output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.training_world import AS_OF, TrainedWorld

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

REDIS = shutil.which("redis-server")
FEEDS_PER_PHASE = 8
DETECT_S = 30.0
RECOVER_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A real redis-server on loopback, stopped and started again on the same port."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS is not None
        self.proc = subprocess.Popen(
            [REDIS, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


class Service:
    """`turnout serve` as a process on a free port, over ``home``."""

    def __init__(self, home: Path, redis: Redis) -> None:
        import httpx

        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "TURNOUT_HOME": str(home),
            "TURNOUT__SERVING__HEALTH_CHECK_SECONDS": "1",
            "TURNOUT__SERVING__MODEL_REFRESH_SECONDS": "2",
            "TURNOUT__SERVING__SNAPSHOT_REFRESH_SECONDS": "600",
            "TURNOUT__SERVING__AVAILABILITY__TYPE": "redis",
            "TURNOUT__SERVING__AVAILABILITY__URL": redis.url,
            "TURNOUT__SERVING__AVAILABILITY__SEED_FROM_SILVER": "true",
        }
        env.pop("TURNOUT_PROFILE", None)
        turnout = str(Path(sys.executable).with_name("turnout"))
        self.log = (home / f"serve-{self.port}.log").open("wb")
        self.proc = subprocess.Popen(
            [turnout, "serve", "--now", AS_OF.isoformat(), "--port", str(self.port)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.client = httpx.Client(base_url=self.base, timeout=60)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"`turnout serve` exited {self.proc.returncode}: see {self.log.name}")
            try:
                self.client.get("/healthz")
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def feed(self, user: str) -> tuple[int, str]:
        response = self.client.get("/v1/feed", params={"user_id": user})
        return response.status_code, response.json().get(
            "served_by", ""
        ) if response.status_code == 200 else ""

    def health(self) -> dict[str, Any]:
        return dict(self.client.get("/healthz").json())

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.client.close()
        self.log.close()


@dataclass
class World:
    home: Path
    users: list[str]
    redis: Redis
    moved: Path


@dataclass
class Fault:
    dependency: str
    component: str  # in /healthz
    tag: str  # in served_by while it is down
    take: Callable[[World, Service], None]
    give_back: Callable[[World, Service], None]


def _move(path: Path, world: World) -> None:
    shutil.move(str(path), str(world.moved / path.name))


def _restore(path: Path, world: World) -> None:
    shutil.move(str(world.moved / path.name), str(path))


def _index_version(home: Path) -> Path:
    pointer = json.loads((home / "index" / "geo" / "CURRENT.json").read_text())
    return home / "index" / "geo" / "versions" / pointer["version"]


def _impression_file(service: Service) -> Path:
    return Path(service.health()["components"]["impression_log"]["path"])


def _fill_disk(world: World, service: Service) -> None:
    """The impression log's file becomes /dev/full: every write fails with ENOSPC, for real."""
    target = _impression_file(service)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        _move(target, world)
    target.symlink_to("/dev/full")


def _free_disk(world: World, service: Service) -> None:
    target = _impression_file(service)
    target.unlink()
    if (world.moved / target.name).exists():
        _restore(target, world)


FAULTS = [
    Fault(
        "geo index (its published version's folder moved away)", "index", "index_scan",
        lambda w, s: _move(_index_version(w.home), w), lambda w, s: _restore(_index_version(w.home), w),
    ),
    Fault(
        "online store (feast/online.db moved away)", "online_store", "user_store_down",
        lambda w, s: _move(w.home / "feast" / "online.db", w), lambda w, s: _restore(w.home / "feast" / "online.db", w),
    ),
    Fault(
        "registry (mlflow/mlflow.db moved away)", "registry", "registry_down",
        lambda w, s: _move(w.home / "mlflow" / "mlflow.db", w), lambda w, s: _restore(w.home / "mlflow" / "mlflow.db", w),
    ),
    Fault(
        "capacity counter (redis-server stopped)", "availability", "availability_stale",
        lambda w, s: w.redis.stop(), lambda w, s: w.redis.start(),
    ),
    Fault("impression log (its file is /dev/full: ENOSPC)", "impression_log", "unlogged", _fill_disk, _free_disk),
]  # fmt: skip


@dataclass
class Phase:
    """One dependency, one phase: what the service answered while it was down, and its recovery."""

    dependency: str
    phase: str
    feeds: int = 0
    served_ok: int = 0
    five_xx: int = 0
    served_by: set[str] = field(default_factory=set)
    healthz: str = ""
    detect_s: float | None = None
    recover_s: float | None = None
    recovered_by: str = ""

    def row(self) -> str:
        detect = "-" if self.detect_s is None else f"{self.detect_s:.1f} s"
        return (
            f"| {self.dependency} | {self.phase} | {self.served_ok}/{self.feeds} | "
            f"{', '.join(f'`{s}`' for s in sorted(self.served_by))} | {self.healthz} | {self.five_xx} | "
            f"{detect} | {self.recover_s:.1f} s (`{self.recovered_by}`) |"
        )


def _feeds(service: Service, world: World, result: Phase, n: int) -> None:
    for i in range(n):
        status, served_by = service.feed(world.users[(result.feeds + i) % len(world.users)])
        result.feeds += 1
        result.five_xx += status >= 500
        if status == 200:
            result.served_ok += 1
            result.served_by.add(served_by)


def _until(
    service: Service, world: World, result: Phase, done: Callable[[str], bool], limit_s: float
) -> float:
    """Seconds until a feed's served_by satisfies ``done`` (feeds counted as they go)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        status, served_by = service.feed(world.users[result.feeds % len(world.users)])
        result.feeds += 1
        result.five_xx += status >= 500
        if status == 200:
            result.served_ok += 1
            if done(served_by):
                return time.monotonic() - started
            result.served_by.add(served_by)
        time.sleep(0.2)
    raise AssertionError(f"{result.dependency} ({result.phase}): not seen within {limit_s:.0f} s")


def _recover(service: Service, world: World, fault: Fault, result: Phase) -> None:
    started = time.monotonic()
    _until(service, world, result, lambda by: by == "model", RECOVER_S)
    deadline = time.monotonic() + RECOVER_S
    while service.health()["components"][fault.component]["status"] != "ok":
        assert time.monotonic() < deadline, f"{fault.component} not ok in /healthz after recovery"
        time.sleep(0.2)
    result.recover_s, result.recovered_by = time.monotonic() - started, "model"


@pytest.fixture(scope="module")
def world(trained_world: TrainedWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    if REDIS is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's)")
    from published.catalog import load_live_catalog

    home = tmp_path_factory.mktemp("faults") / "home"
    shutil.copytree(trained_world.settings.home, home, symlinks=True)
    users = load_live_catalog(trained_world.settings).users["user_id"].astype(str).tolist()[:40]
    moved = home.parent / "moved"
    moved.mkdir()
    redis = Redis(tmp_path_factory.mktemp("redis"))
    redis.start()
    yield World(home, users, redis, moved)
    redis.stop()


def test_every_fault_is_served_around_seen_and_recovered(world: World, tmp_path: Path) -> None:
    results: list[Phase] = []
    # At start-up: the dependency is gone before the service starts.
    for fault in FAULTS:
        result = Phase(fault.dependency, "at start-up")
        early = fault.component != "impression_log"  # the log's file exists only once serving
        if early:
            fault.take(world, None)  # type: ignore[arg-type]
        service = Service(world.home, world.redis)
        try:
            if not early:
                fault.take(world, service)
            _feeds(service, world, result, FEEDS_PER_PHASE)
            assert any(fault.tag in s for s in result.served_by), (fault.dependency, result.served_by)
            result.healthz = service.health()["components"][fault.component]["status"]
            assert result.healthz != "ok"
            fault.give_back(world, service)
            _recover(service, world, fault, result)
        finally:
            service.stop()
        results.append(result)
    # At run time: one service, each dependency taken away and given back in turn.
    service = Service(world.home, world.redis)
    try:
        _feeds(service, world, Phase("warm-up", ""), FEEDS_PER_PHASE)
        for fault in FAULTS:
            result = Phase(fault.dependency, "at run time")
            fault.take(world, service)
            result.detect_s = _until(service, world, result, lambda by, tag=fault.tag: tag in by, DETECT_S)
            _feeds(service, world, result, FEEDS_PER_PHASE)
            result.healthz = service.health()["components"][fault.component]["status"]
            assert result.healthz != "ok"
            fault.give_back(world, service)
            _recover(service, world, fault, result)
            results.append(result)
    finally:
        service.stop()

    table = [
        "| dependency | when | feeds served | `served_by` while down | `/healthz` while down | 5xx | detected in | recovered in |",
        "| --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
        *(r.row() for r in results),
    ]
    out = Path(os.environ.get("TURNOUT_FAULT_MATRIX", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / "fault_matrix.md").write_text("\n".join(table) + "\n")
    (out / "fault_matrix.json").write_text(
        json.dumps([{**r.__dict__, "served_by": sorted(r.served_by)} for r in results], indent=1)
    )
    print("\n".join(table))
    assert all(r.five_xx == 0 for r in results)
    assert all(r.served_ok == r.feeds for r in results)
