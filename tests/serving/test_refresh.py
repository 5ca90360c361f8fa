"""The background refresher, running inside the app: a moved alias is picked up without a restart,
a refused or failed refresh keeps the last good model or snapshot, and /healthz says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from fastapi.testclient import TestClient

from serving.app import create_app
from serving.refresh import BackgroundRefresher
from serving.state import ModelHolder
from serving.synthetic import make_snapshot, make_state

Q = {"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": "2026-11-05T15:00:00Z"}


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the refresher did not get there in time"
        time.sleep(0.02)


def test_a_moved_champion_alias_is_served_without_a_restart(world, heads) -> None:
    state = make_state(world, heads)
    registry = {"version": "rsvp:v1+attend:v1", "heads": heads}

    def read_registry(holder: ModelHolder) -> None:  # what serving.live.model_refresher does
        if holder.current is None or holder.current.version != registry["version"]:
            rsvp, attend = registry["heads"]
            holder.offer(rsvp, attend, registry["version"])

    state.refresh_models_fn = read_registry
    refresher = BackgroundRefresher(state, model_every_s=0.05, snapshot_every_s=0)
    with TestClient(create_app(state, refresher=refresher)) as client:
        assert client.get("/v1/feed", params=Q).json()["model_version"] == "rsvp:v1+attend:v1"
        registry["version"] = "rsvp:v2+attend:v1"  # the training DAG promoted a new p_rsvp
        _wait_for(lambda: state.model_version() == "rsvp:v2+attend:v1")
        body = client.get("/v1/feed", params=Q).json()
        assert body["model_version"] == "rsvp:v2+attend:v1" and body["served_by"] == "model"
        health = client.get("/healthz").json()
        assert health["components"]["model"] == {**health["components"]["model"], "status": "ok"}
        assert health["refresh"]["model_runs"] >= 1
    assert refresher._thread is None  # stopped with the app


def test_a_champion_on_another_tower_is_refused_by_the_refresh_and_the_last_good_one_serves(
    world, heads
) -> None:
    state = make_state(world, heads)
    stale = (replace(heads[0], tower_version="tower-old"), heads[1])
    state.refresh_models_fn = lambda holder: holder.offer(*stale, "rsvp:v9+attend:v1")
    refresher = BackgroundRefresher(state, model_every_s=0.05, snapshot_every_s=0)
    with TestClient(create_app(state, refresher=refresher)) as client:
        _wait_for(lambda: refresher.stats.model_runs >= 1)
        health = client.get("/healthz").json()
        assert health["components"]["model"]["status"] == "degraded"
        assert "tower tower-old" in health["components"]["model"]["detail"]
        body = client.get("/v1/feed", params=Q).json()
        assert body["model_version"] == "rsvp:v1+attend:v1" and body["served_by"] == "model"


def test_a_failed_snapshot_refresh_keeps_serving_and_the_next_one_recovers(world, heads) -> None:
    state = make_state(world, heads)
    # The next snapshot (from the online store) no longer has the first event at all.
    gone = str(world.catalog["event_id"].iloc[0])
    fresh = make_snapshot(world.catalog[world.catalog["event_id"] != gone], world.now)
    calls = []
    store_back = threading.Event()

    def read_online_store():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise ConnectionError("online store unreachable (injected)")
        store_back.wait()
        return fresh

    state.refresh_snapshot_fn = read_online_store
    refresher = BackgroundRefresher(state, model_every_s=0, snapshot_every_s=0.05)
    with TestClient(create_app(state, refresher=refresher)) as client:
        _wait_for(lambda: refresher.stats.snapshot_runs >= 1)
        body = client.get("/v1/feed", params=Q).json()
        assert body["served_by"] == "model+last_snapshot" and len(body["events"]) == 25
        assert client.get("/healthz").json()["components"]["snapshot"]["status"] == "degraded"
        store_back.set()
        _wait_for(lambda: state.snapshot is fresh)
        body = client.get("/v1/feed", params=Q).json()
        assert body["served_by"] == "model" and len(body["events"]) == 25
        assert client.get("/healthz").json()["components"]["snapshot"]["status"] == "ok"
        assert len(state.snapshot) == len(world.catalog) - 1


def test_turnout_feed_asks_a_running_service(world, heads) -> None:
    """`turnout feed --server URL` (what `make demo` ends with) against a real uvicorn server."""
    import json
    import socket

    import uvicorn
    from typer.testing import CliRunner

    from cli.main import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(make_state(world, heads)), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}"
        args = ["feed", "--server", url, "--wait", "30", "--user-id", "u00001", "--now", Q["now"], "--json"]
        got = CliRunner().invoke(app, args)
        assert got.exit_code == 0, got.output
        body = json.loads(got.stdout.strip().splitlines()[-1])
        assert len(body["events"]) == 25 and body["served_by"] == "model"
        bad = CliRunner().invoke(app, ["feed", "--server", url, "--user-id", "u00001", "--now", "yesterday"])
        assert bad.exit_code == 2 and "ISO-8601" in bad.output
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_newly_published_index_is_followed_and_a_refused_one_keeps_the_last(world, heads) -> None:
    from serving.synthetic import make_index

    state = make_state(world, heads)
    served = state.index
    fresh = make_index(world.catalog, world.now)
    published = {"version": "synthetic"}

    def follow(current: str | None):
        if published["version"] == current:
            return None
        if published["version"] == "v-other-tower":
            raise ValueError("index v-other-tower was built for tower t2, the caller expects tower-syn")
        return fresh, published["version"]

    state.refresh_index_fn = follow
    assert not state.refresh_index() and state.index is served  # pointer unchanged
    published["version"] = "v-other-tower"
    assert not state.refresh_index() and state.index is served
    assert state.health["index"].status == "degraded" and "tower t2" in state.health["index"].detail
    published["version"] = "v2"
    refresher = BackgroundRefresher(state, model_every_s=0, snapshot_every_s=0.05)
    with TestClient(create_app(state, refresher=refresher)) as client:
        _wait_for(lambda: state.index_version == "v2")
        assert state.index is fresh
        assert client.get("/healthz").json()["components"]["index"]["version"] == "v2"
        assert client.get("/v1/feed", params=Q).json()["served_by"] == "model"
