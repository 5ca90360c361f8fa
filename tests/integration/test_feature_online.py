"""Apply, materialize and read back on real engines: Spark + Delta offline, SQLite or Redis online.

Every online test runs against SQLite and against a real Redis (``TURNOUT_TEST_REDIS_URL``, e.g.
``redis://127.0.0.1:6390/0``; skipped with the reason when unset). Both read one gold lake
written once per module, so they can be compared with one offline (point-in-time) frame.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import pandas as pd
import pytest

from bench.bench_materialize import online_contents
from conf import Settings
from pipelines import feast_store
from pipelines.features import definitions, materialize
from pipelines.training import retrieval
from published import feature_store
from tests.conftest import make_settings
from tests.integration import gold_tables as G

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning"),
]

REDIS_URL = os.environ.get("TURNOUT_TEST_REDIS_URL")
END_1 = G.T0 + timedelta(days=3)
END_2 = G.T0 + timedelta(days=5)  # the history runs to T0 + 6 d: some rows are never due
INCREMENTAL_VIEWS = ["event_dynamics", "social", "user_features"]
NO_LOOKBACK = timedelta(0)


def _redis_connection_string(url: str) -> str:
    """Feast's ``host:port,db=N`` from a ``redis://host:port/N`` URL."""
    parsed = urlparse(url)
    db = (parsed.path or "/0").lstrip("/") or "0"
    return f"{parsed.hostname}:{parsed.port or 6379},db={db}"


@pytest.fixture(scope="module")
def history() -> dict[str, list[dict[str, Any]]]:
    return G.history(seed=11, n_users=10, n_events=14)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory: pytest.TempPathFactory, history) -> Iterator[Settings]:  # type: ignore[no-untyped-def]
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    settings = make_settings(tmp_path_factory.mktemp("online") / "home")
    G.write_history(spark, settings, history)
    yield settings
    spark.conf.set("spark.sql.shuffle.partitions", previous)


def _backend_settings(lake: Settings, backend: str) -> Settings:
    project = f"turnout_{backend}_{uuid.uuid4().hex[:8]}"  # isolates keys in a shared Redis
    if backend == "redis":
        assert REDIS_URL is not None
        online: dict[str, str] = {"type": "redis", "connection_string": _redis_connection_string(REDIS_URL)}
    else:
        online = {"type": "sqlite", "path": str(lake.home / f"feast-{backend}" / "online.db")}
    feast = lake.feast.model_copy(
        update={
            "project": project,
            "registry": str(lake.home / f"feast-{backend}" / "registry.db"),
            "online_store": online,
        }
    )
    return lake.model_copy(update={"feast": feast})


@pytest.fixture(
    scope="module",
    params=[
        "sqlite",
        pytest.param(
            "redis",
            marks=pytest.mark.skipif(
                not REDIS_URL,
                reason="TURNOUT_TEST_REDIS_URL is not set: start redis-server on loopback and export "
                "TURNOUT_TEST_REDIS_URL=redis://127.0.0.1:<port>/0 (see .ci/run)",
            ),
        ),
    ],
)
def backend(request: pytest.FixtureRequest, lake: Settings) -> Iterator[tuple[str, Settings]]:
    settings = _backend_settings(lake, request.param)
    report = definitions.apply_definitions(settings)
    assert report["applied"] is True and report["registry_hash"] is None
    yield request.param, settings
    if request.param == "redis":
        import redis

        assert REDIS_URL is not None
        client = redis.Redis.from_url(REDIS_URL)
        # Feast's Redis key is the serialized entity key followed by the project name.
        for key in client.scan_iter(match=f"*{settings.feast.project}".encode(), count=1000):
            client.delete(key)


def _newest(rows: list[dict[str, Any]], keys: tuple[str, ...], end: datetime) -> dict[tuple[Any, ...], dict]:
    """Brute force: per key, the newest row with event_timestamp <= end (ties: latest created)."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        if row["event_timestamp"] > end:
            continue
        key = tuple(row[k] for k in keys)
        current = best.get(key)
        if current is None or (row["event_timestamp"], row["created"]) > (
            current["event_timestamp"],
            current["created"],
        ):
            best[key] = row
    return best


def _online_values(settings: Settings, refs: list[str], rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    store = feast_store.get_store(settings)
    return store.get_online_features(features=refs, entity_rows=rows).to_dict()


def test_apply_runs_only_when_definitions_change(backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, settings = backend
    unchanged = definitions.apply_definitions(settings)
    assert unchanged["applied"] is False
    assert unchanged["definitions_hash"] == unchanged["registry_hash"]

    from features import views

    # A metadata change (Feast updates it in place) and a schema change (Feast versions the view).
    monkeypatch.setattr(views.market_rates, "ttl", timedelta(days=31))
    changed = definitions.apply_definitions(settings)
    assert changed["applied"] is True and changed["changed"] == ["FeatureView:market_rates"]
    without = [f for f in views.event_embeddings.features if f.name != "tower_version"]
    monkeypatch.setattr(views.event_embeddings, "features", without)
    changed = definitions.apply_definitions(settings)
    assert changed["applied"] is True and changed["changed"] == ["FeatureView:event_embeddings"]
    monkeypatch.undo()
    restored = definitions.apply_definitions(settings)
    assert restored["applied"] is True and restored["definitions_hash"] == unchanged["definitions_hash"]
    assert definitions.apply_definitions(settings)["applied"] is False


def test_materialization_is_incremental_contiguous_and_idempotent(backend, history) -> None:  # type: ignore[no-untyped-def]
    _, settings = backend
    first = materialize.materialize(settings, END_1, INCREMENTAL_VIEWS, lookback=NO_LOOKBACK)
    for name in INCREMENTAL_VIEWS:
        window = first["views"][name]
        assert window["status"] == "materialized" and window["end"] == END_1.isoformat()
    assert first["views"]["social"]["rows"] == len(_newest(history["social"], G.KEYS["social"], END_1))

    again = materialize.materialize(settings, END_1, INCREMENTAL_VIEWS, lookback=NO_LOOKBACK)
    assert {v["status"] for v in again["views"].values()} == {"up_to_date"} and again["rows"] == 0

    second = materialize.materialize(settings, END_2, INCREMENTAL_VIEWS, lookback=NO_LOOKBACK)
    for name in INCREMENTAL_VIEWS:
        assert second["views"][name]["start"] == END_1.isoformat()  # starts where the last one ended
    intervals = materialize.materialized_intervals(settings)
    for name in INCREMENTAL_VIEWS:
        windows = intervals[name]
        assert [end for _, end in windows] == [END_1.isoformat(), END_2.isoformat()]
        assert all(b[0] <= a[1] for a, b in zip(windows, windows[1:], strict=False)), "a gap"

    # The online store holds exactly the newest row at or before END_2 for every key.
    newest = _newest(history["user_features"], ("user_id",), END_2)
    users = sorted(k[0] for k in newest)
    online = _online_values(settings, ["user_features:attend_rate_shrunk"], [{"user_id": u} for u in users])
    assert online["attend_rate_shrunk"] == [newest[(u,)]["attend_rate_shrunk"] for u in users]


def test_an_old_window_never_moves_an_online_value_backwards(backend, history) -> None:  # type: ignore[no-untyped-def]
    name, settings = backend
    newest = _newest(history["user_features"], ("user_id",), END_2)
    older = _newest(history["user_features"], ("user_id",), END_1)
    moved = sorted(k[0] for k in newest if k in older and older[k] is not newest[k])
    assert moved, "the generated history should change some users between END_1 and END_2"
    refs, rows = ["user_features:attend_rate_shrunk"], [{"user_id": u} for u in moved]
    expected = [newest[(u,)]["attend_rate_shrunk"] for u in moved]

    refused = materialize.materialize(settings, END_1, ["user_features"])
    assert refused["views"]["user_features"]["status"] == "behind" and refused["rows"] == 0
    assert _online_values(settings, refs, rows)["attend_rate_shrunk"] == expected

    # Why the guard exists: Feast itself happily re-materializes an old window.
    store = feast_store.get_store(settings)
    store.materialize(start_date=G.T0, end_date=END_1, feature_views=["user_features"])
    after_raw = _online_values(settings, refs, rows)["attend_rate_shrunk"]
    if name == "sqlite":
        # SQLite upserts without comparing event times: the values went back to END_1's.
        assert after_raw == [older[(u,)]["attend_rate_shrunk"] for u in moved]
        # Any window that ends at the last end is safe, so that is also the repair.
        store.materialize(start_date=G.T0, end_date=END_2, feature_views=["user_features"])
        assert _online_values(settings, refs, rows)["attend_rate_shrunk"] == expected
    else:
        # Redis compares each key's stored event time and skips older writes.
        assert after_raw == expected


def _request_rows(history: dict[str, list[dict[str, Any]]], at: datetime) -> list[dict[str, Any]]:
    events = _newest(history["event_features"], ("event_id",), at)
    rows = []
    for pair in sorted({(r["user_id"], r["event_id"]) for r in history["social"]})[:24]:
        event = events.get((pair[1],))
        rows.append(
            {
                "user_id": pair[0],
                "event_id": pair[1],
                # Keys the caller carries from the candidate's event row (Feast does not chain lookups).
                "organizer_id": event["organizer_id"] if event else "o0",
                "venue_id": event["venue_id"] if event else "v0",
                "series_id": (event["series_id"] if event else None) or "s0",
                "market_key": event["market_key"] if event else "none",
                "request_lat": 37.79,
                "request_lng": -122.40,
                "request_ts": at.timestamp(),
                "request_utc_offset_min": -480,
            }
        )
    return rows


@pytest.fixture(scope="module")
def offline_at_end_2(lake: Settings, history) -> tuple[list[dict[str, Any]], pd.DataFrame]:  # type: ignore[no-untyped-def]
    """p_rsvp_v1 from the offline store for a set of (user, event) requests at END_2."""
    settings = _backend_settings(lake, "offline")
    definitions.apply_definitions(settings)
    rows = _request_rows(history, END_2)
    entity_df = pd.DataFrame(rows).assign(event_timestamp=pd.Timestamp(END_2))
    return rows, retrieval.historical_features(settings, entity_df, "p_rsvp_v1")


def _missing(value: Any) -> bool:
    if value is None:
        return True
    return not hasattr(value, "__len__") and bool(pd.isna(value))


def _same(a: Any, b: Any) -> bool:
    missing_a, missing_b = _missing(a), _missing(b)
    if missing_a or missing_b:
        return missing_a and missing_b
    if hasattr(a, "__len__") and not isinstance(a, str):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    return bool(a == b)


def test_offline_and_online_features_are_equal_after_materialization(backend, offline_at_end_2) -> None:  # type: ignore[no-untyped-def]
    _, settings = backend
    report = materialize.materialize(settings, END_2, lookback=NO_LOOKBACK)
    assert {v["status"] for v in report["views"].values()} <= {"materialized", "up_to_date"}

    rows, offline = offline_at_end_2
    store = feast_store.get_store(settings)
    online = feature_store.online_features(store, "p_rsvp_v1", rows, now=END_2)
    names = feature_store.service_feature_names(store.get_feature_service("p_rsvp_v1"))
    assert set(online) == set(names)
    mismatches = [
        (i, name, offline[name].iloc[i], online[name][i])
        for name in names
        for i in range(len(rows))
        if not _same(offline[name].iloc[i], online[name][i])
    ]
    assert not mismatches, mismatches[:10]
    # The comparison is not vacuous: most features are present, some are missing (TTL, no row).
    present = sum(not _missing(online[n][i]) for n in names for i in range(len(rows)))
    assert 0.5 * len(names) * len(rows) < present < len(names) * len(rows)


@pytest.mark.parametrize("service", ["p_rsvp_v1", "p_attend_v1"])
def test_the_sorted_store_equals_feasts_stock_store_on_a_whole_service(lake, history, service) -> None:  # type: ignore[no-untyped-def]
    """Every view of a head's service through both offline stores, on-demand crosses and the
    embedding included, at instants where some rows are not yet written and some past their TTL."""
    settings = _backend_settings(lake, "offline")
    definitions.apply_definitions(settings)
    entity_df = pd.concat(
        [
            pd.DataFrame(_request_rows(history, at)).assign(event_timestamp=pd.Timestamp(at))
            for at in (G.T0 + timedelta(hours=20), END_1, END_2, G.T0 + timedelta(days=9))
        ],
        ignore_index=True,
    )
    frames = {
        store: retrieval.historical_features(
            settings.model_copy(update={"feast": settings.feast.model_copy(update={"offline_store": store})}),
            entity_df,
            service,
        )
        for store in ("spark", "pipelines.offline_store.SortedSparkOfflineStore")
    }
    stock, ours = frames.values()
    assert list(ours.columns) == list(stock.columns)
    names = feature_store.service_feature_names(feast_store.get_store(settings).get_feature_service(service))
    assert "distance_km" in names and set(names) <= set(ours.columns)
    differ = [
        (i, name, ours[name].iloc[i], stock[name].iloc[i])
        for name in ours.columns
        for i in range(len(ours))
        if not _same(ours[name].iloc[i], stock[name].iloc[i])
    ]
    assert not differ, differ[:10]
    # Not vacuous: both present and missing values (not yet written, past TTL, no row) occur.
    present = sum(not _missing(ours[n].iloc[i]) for n in names for i in range(len(ours)))
    assert 0.3 * len(names) * len(ours) < present < len(names) * len(ours)


def test_the_columnar_engine_writes_what_feasts_local_engine_writes(lake, backend) -> None:  # type: ignore[no-untyped-def]
    """Every view materialized twice from nothing online, once through Feast's stock local engine
    and once through ``pipelines.online_write`` (the default): the stores hold the same bytes."""
    name, _ = backend
    contents = {}
    for label, engine in (("feast", "local"), ("columnar", "pipelines.online_write.ColumnarComputeEngine")):
        settings = _backend_settings(lake, f"{name}_{label}")
        if name == "redis":
            settings = settings.model_copy(
                update={
                    "feast": settings.feast.model_copy(update={"online_store": backend[1].feast.online_store})
                }
            )
        settings = settings.model_copy(
            update={"feast": settings.feast.model_copy(update={"batch_engine": engine})}
        )
        definitions.apply_definitions(settings)
        report = materialize.materialize(settings, END_2)
        assert report["rows"] > 0 and {v["status"] for v in report["views"].values()} == {"materialized"}
        contents[engine] = online_contents(settings, REDIS_URL if name == "redis" else None)
    feasts, ours = contents.values()
    assert ours == feasts
    values = sum(len(v) for v in ours.values())
    assert values > 100, "not vacuous: the stores hold rows"
