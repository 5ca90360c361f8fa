"""Publication: build N+1 beside N, validate, switch one pointer, keep N for rollback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conf import Settings
from pipelines.index.run import publish_index_version, rollback_index
from published import versioned as publish_mod
from published.catalog import Catalog, write_catalog
from published.geo_index import GeoParams, build_geo_index
from published.index_store import geo_store, ids_digest, load_live_index, read_geo_index, write_geo_index
from published.tower import tower_store
from published.versioned import (
    IndexValidationError,
    PublicationError,
    TowerVersionMismatch,
    VersionedStore,
)
from tests.index_synthetic import random_events

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[3]


def stage_index(
    store: VersionedStore,
    events: pd.DataFrame,
    now: datetime = NOW,
    tower: str | None = None,
    **meta_overrides: object,
) -> str:
    """What ``build_index_version`` stages, minus the Spark read of silver."""
    index = build_geo_index(events, now, GeoParams())
    meta = {
        "source_events": len(events),
        "source_ids_sha256": ids_digest(events["event_id"].to_numpy()),
        "unplaceable_events": 0,
        "tower_version": tower,
        "missing_embeddings": 0,
        **meta_overrides,
    }

    def write(folder: Path) -> None:
        write_geo_index(folder, index, meta)

    with store.locked():
        version = store.next_numbered_version()
        store.stage(version, write)
    # The catalog the build stages beside it, under the same version (published.catalog).
    VersionedStore(store.root.parent / "catalog").stage(
        version, lambda f: write_catalog(f, catalog_of(events, now))
    )
    return version


def catalog_of(events: pd.DataFrame, now: datetime) -> Catalog:
    """A catalog listing ``events`` (what the index job publishes for serving, minus Spark)."""
    n = len(events)
    listed = pd.DataFrame(
        {
            "event_id": events["event_id"].astype(str),
            "organizer_id": "o1",
            "venue_id": "v1",
            "series_id": None,
            "category": "music",
            "timezone": "Europe/Berlin",
            "metro": "berlin",
            "venue_lat": events["lat"],
            "venue_lng": events["lng"],
            "start_ts": events["start_us"] / 1e6,
            "created_ts": now.timestamp() - 3600,
            "capacity": pd.array([100] * n, dtype="Int64"),
            "rsvps_so_far": 0,
        }
    )
    empty = pd.DataFrame({"user_id": pd.Series([], dtype=str), "event_id": pd.Series([], dtype=str)})
    return Catalog(
        as_of=now,
        events=listed,
        rsvps=empty,
        friendships=empty.rename(columns={"event_id": "friend_id"}),
        capacity=listed[["event_id", "capacity"]].assign(seats_taken=0),
        cancellations=listed[["event_id"]].iloc[:0],
        users=pd.DataFrame({"user_id": ["u1"], "metro": ["berlin"], "home_lat": [52.5], "home_lng": [13.4]}),
    )


def publish_tower(settings: Settings, version: str) -> None:
    """A stand-in tower: only the pointer matters to index publication."""
    store = tower_store(settings)
    current = store.read_pointer()

    def write(folder: Path) -> None:
        (folder / "meta.json").write_text("{}")

    store.stage(version, write, exist_ok=True)
    store.switch(version, expected_current=current.version if current else None)


def events(n: int, seed: int) -> pd.DataFrame:
    return random_events(n, [(52.52, 13.40, 0.2)], NOW, days=30, seed=seed)


def test_stage_validate_switch_rollback(settings: Settings) -> None:
    store = geo_store(settings)
    v1 = stage_index(store, events(1000, 1))
    assert store.read_pointer() is None  # staged is not published
    assert publish_index_version(settings, v1, NOW)["published"]
    v2 = stage_index(store, events(1100, 2))
    assert load_live_index(store, None).version == v1  # N+1 sits beside N, unseen
    out = publish_index_version(settings, v2, NOW)
    assert out["previous"] == v1 and out["history"] == [v1, v2]
    assert len(load_live_index(store, None).index) == 1100
    assert rollback_index(settings) == {"from": v2, "to": v1, "history": [v1]}
    live = load_live_index(store, None)
    assert live.version == v1 and len(live.index) == 1000
    assert store.path(v2).is_dir()  # rolled back, not deleted
    with pytest.raises(PublicationError, match="nothing to roll back"):
        rollback_index(settings)
    # Republishing the live version is a no-op, not a second history entry.
    assert publish_index_version(settings, v1, NOW)["published"] is False


def test_a_crash_between_build_and_switch_leaves_the_live_index_intact(settings: Settings) -> None:
    """Kill a real process after N+1 is staged, halfway through the pointer write."""
    store = geo_store(settings)
    v1 = stage_index(store, events(800, 1))
    publish_index_version(settings, v1, NOW)
    v2 = stage_index(store, events(900, 2))
    script = textwrap.dedent(
        f"""
        import os
        from datetime import datetime, UTC
        from published import versioned
        from pipelines.index.run import publish_index_version
        from tests.conftest import make_settings

        replace = os.replace

        def die(src, dst):  # the temp index pointer is written and fsynced; the rename never happens
            if "/geo/" in str(dst):
                os._exit(9)
            replace(src, dst)

        versioned.os.replace = die
        now = datetime.fromisoformat({NOW.isoformat()!r})
        publish_index_version(make_settings({str(settings.home)!r}), {v2!r}, now)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120)
    assert proc.returncode == 9, proc.stderr.decode()[-2000:]
    assert list(store.root.glob(".CURRENT.json.*.tmp"))  # the half-done write is there, and ignored
    live = load_live_index(store, None, verify=True)
    assert live.version == v1 and len(live.index) == 800
    # The next attempt publishes normally.
    assert publish_index_version(settings, v2, NOW)["previous"] == v1


def test_a_crash_while_staging_leaves_no_version_behind(settings: Settings) -> None:
    store = geo_store(settings)
    v1 = stage_index(store, events(500, 1))
    publish_index_version(settings, v1, NOW)

    def half_written(folder: Path) -> None:
        (folder / "cells.npy").write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.stage(store.next_numbered_version(), half_written)
    assert store.versions() == [v1]
    assert load_live_index(store, None).version == v1


def test_a_failed_pointer_replace_keeps_n(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    store = geo_store(settings)
    v1 = stage_index(store, events(500, 1))
    publish_index_version(settings, v1, NOW)
    v2 = stage_index(store, events(520, 2))

    def refuse(src: object, dst: object) -> None:
        raise OSError("EIO")

    monkeypatch.setattr(publish_mod.os, "replace", refuse)
    with pytest.raises(OSError):
        publish_index_version(settings, v2, NOW)
    monkeypatch.undo()
    assert load_live_index(store, None).version == v1
    assert not list(store.root.glob(".CURRENT.json.*.tmp"))


def test_validation_refuses_and_says_why(settings: Settings) -> None:
    store = geo_store(settings)
    base = events(1000, 1)
    publish_index_version(settings, stage_index(store, base), NOW)

    shrunk = stage_index(store, base.iloc[:300])
    with pytest.raises(IndexValidationError, match="size changed 70%"):
        publish_index_version(settings, shrunk, NOW)
    assert publish_index_version(settings, shrunk, NOW, size_tolerance=0.8)["published"]
    rollback_index(settings)

    lost = stage_index(store, base.iloc[:990], source_events=1000)
    with pytest.raises(IndexValidationError, match="silver had 1000 live events"):
        publish_index_version(settings, lost, NOW)
    swapped = stage_index(store, base, source_ids_sha256=ids_digest(np.array(["other"])))
    with pytest.raises(IndexValidationError, match="differ from the live event ids"):
        publish_index_version(settings, swapped, NOW)
    # Published an hour later than built: events that started meanwhile are past events now.
    stale = stage_index(store, base)
    with pytest.raises(IndexValidationError, match="start at or before"):
        publish_index_version(settings, stale, NOW + timedelta(days=2))
    assert load_live_index(store, None).manifest["events"] == 1000


def test_a_tower_version_mismatch_is_refused(settings: Settings) -> None:
    store = geo_store(settings)
    publish_tower(settings, "ct-aaaa")
    v1 = stage_index(store, events(400, 1), tower="ct-aaaa")
    publish_index_version(settings, v1, NOW)
    assert load_live_index(store, "ct-aaaa").tower_version == "ct-aaaa"
    with pytest.raises(TowerVersionMismatch, match="refusing to serve"):
        load_live_index(store, "ct-bbbb")

    # The tower was retrained after this index was built: its vectors are from the old tower.
    v2 = stage_index(store, events(420, 2), tower="ct-aaaa")
    publish_tower(settings, "ct-bbbb")
    with pytest.raises(TowerVersionMismatch, match="published tower is ct-bbbb"):
        publish_index_version(settings, v2, NOW)
    missing = stage_index(store, events(420, 2), tower="ct-bbbb", missing_embeddings=7)
    with pytest.raises(IndexValidationError, match="7 indexed events have no embedding"):
        publish_index_version(settings, missing, NOW)
    assert load_live_index(store, "ct-aaaa").version == v1


def test_checksums_and_immutability(settings: Settings) -> None:
    store = geo_store(settings)
    v1 = stage_index(store, events(300, 1))
    (store.path(v1) / "start_us.npy").write_bytes(b"tampered")
    with pytest.raises(PublicationError, match="checksum mismatch"):
        read_geo_index(store.path(v1))
    with pytest.raises(PublicationError, match="already exists"):
        store.stage(v1, lambda folder: None)


def test_old_versions_are_pruned_but_n_and_newer_staged_ones_stay(settings: Settings) -> None:
    store = geo_store(settings)
    published = []
    for i in range(5):
        v = stage_index(store, events(300 + i, i))
        publish_index_version(settings, v, NOW)
        published.append(v)
    pending = stage_index(store, events(310, 9))
    publish_tower(settings, "ct-x")  # unrelated store, unaffected
    live = store.read_pointer()
    assert live is not None and live.history == tuple(published[-3:])
    assert store.versions() == sorted([*published[-3:], pending])
    pointer = json.loads((store.root / "CURRENT.json").read_text())
    assert pointer["version"] == published[-1]
