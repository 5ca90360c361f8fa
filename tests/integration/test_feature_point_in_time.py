"""Point-in-time correctness of the training frame, checked against a brute-force oracle.

The generated history has what breaks naive joins: values that change after a label instant,
rows written late (``created`` hours after ``event_timestamp``), restatements (same
``event_timestamp``, later ``created``), and TTL edges. At instant T the oracle sees, per key,
the newest row with ``event_timestamp <= T``, ``created <= T`` and ``event_timestamp >= T - ttl``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from conf import Settings
from pipelines import feast_store
from pipelines.features import definitions, materialize
from pipelines.training import retrieval
from tests.conftest import make_settings
from tests.integration import gold_tables as G

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning"),
]

FEATURES = {"user_features": "attend_rate_shrunk", "event_dynamics": "rsvp_count", "social": "friends_going"}
REFS = [f"{view}:{feature}" for view, feature in FEATURES.items()]
SECOND = timedelta(seconds=1)


def _ttl(view: str) -> timedelta:
    from features.repo import FEATURE_VIEWS

    ttl = {v.name: v.ttl for v in FEATURE_VIEWS}[view]
    assert ttl is not None
    return ttl


def generate(seed: int) -> dict[str, list[dict[str, Any]]]:
    """Histories for three views, with late writes and restatements mixed in."""
    rng = random.Random(seed)
    users, events = [f"u{i}" for i in range(8)], [f"e{i}" for i in range(8)]
    keys = {
        "user_features": [{"user_id": u} for u in users],
        "event_dynamics": [{"event_id": e} for e in events],
        "social": [{"user_id": u, "event_id": e} for u in users for e in rng.sample(events, 3)],
    }
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in keys}
    for table, table_keys in keys.items():
        for key in table_keys:
            for _ in range(rng.randint(2, 5)):
                ts = G.T0 + timedelta(seconds=rng.randrange(0, 4 * 86400))
                row = G.default_row(table, rng, key, ts)
                if rng.random() < 0.4:
                    row["created"] = ts + timedelta(seconds=rng.randrange(60, 30 * 3600))  # written late
                out[table].append(row)
                if rng.random() < 0.25:  # restated later: same instant, new value
                    restated = G.default_row(table, rng, key, ts)
                    restated["created"] = max(row["created"], ts) + timedelta(
                        seconds=rng.randrange(60, 30 * 3600)
                    )
                    out[table].append(restated)
    return out


def oracle(
    rows: list[dict[str, Any]], key: dict[str, str], at: datetime, ttl: timedelta, feature: str
) -> Any:
    visible = [
        r
        for r in rows
        if all(r[k] == v for k, v in key.items())
        and r["event_timestamp"] <= at
        and r["created"] <= at
        and r["event_timestamp"] >= at - ttl
    ]
    if not visible:
        return None
    return max(visible, key=lambda r: (r["event_timestamp"], r["created"]))[feature]


def label_rows(history: dict[str, list[dict[str, Any]]], seed: int) -> pd.DataFrame:
    """(user, event, T) rows whose instants sit on and next to every stamp and TTL edge."""
    rng = random.Random(seed)
    pairs = sorted({(r["user_id"], r["event_id"]) for r in history["social"]})
    pairs += [(f"u{rng.randrange(8)}", f"e{rng.randrange(8)}") for _ in range(6)]  # maybe no social row
    rows: set[tuple[str, str, datetime]] = set()
    for user, event in pairs:
        related = [r for r in history["user_features"] if r["user_id"] == user]
        related += [r for r in history["event_dynamics"] if r["event_id"] == event]
        related += [r for r in history["social"] if (r["user_id"], r["event_id"]) == (user, event)]
        instants = {G.T0 + timedelta(seconds=rng.randrange(0, 5 * 86400))}
        for r in related:
            instants |= {r["event_timestamp"] + d for d in (-SECOND, timedelta(0), SECOND)}
            instants |= {r["created"] - SECOND, r["created"]}
        for r in [r for r in related if "rsvp_count" in r]:
            edge = r["event_timestamp"] + _ttl("event_dynamics")
            instants |= {edge, edge + SECOND}
        rows |= {(user, event, t) for t in rng.sample(sorted(instants), min(8, len(instants)))}
    frame = pd.DataFrame(sorted(rows), columns=["user_id", "event_id", "event_timestamp"])
    frame["event_timestamp"] = pd.to_datetime(frame["event_timestamp"], utc=True)
    return frame


@pytest.fixture(scope="module")
def pit(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, dict, pd.DataFrame]]:  # type: ignore[no-untyped-def]
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    settings = make_settings(tmp_path_factory.mktemp("pit") / "home")
    history = generate(seed=5)
    G.write_history(spark, settings, history)
    definitions.apply_definitions(settings)
    yield settings, history, label_rows(history, seed=6)
    spark.conf.set("spark.sql.shuffle.partitions", previous)


def _expected(history: dict[str, list[dict[str, Any]]], labels: pd.DataFrame) -> dict[str, list[Any]]:
    expected: dict[str, list[Any]] = {f: [] for f in FEATURES.values()}
    for user, event, ts in labels.itertuples(index=False):
        at = ts.to_pydatetime()
        for view, feature in FEATURES.items():
            key = {"user_id": user, "event_id": event}
            key = {k: v for k, v in key.items() if k in G.KEYS[view]}
            expected[feature].append(oracle(history[view], key, at, _ttl(view), feature))
    return expected


def _as_python(value: Any) -> Any:
    return None if pd.isna(value) else value.item() if hasattr(value, "item") else value


def test_training_frame_matches_the_brute_force_oracle(pit) -> None:  # type: ignore[no-untyped-def]
    settings, history, labels = pit
    frame = retrieval.historical_features(settings, labels, REFS)
    assert list(frame.index) == list(labels.index)
    assert frame[["user_id", "event_id"]].equals(labels[["user_id", "event_id"]])
    expected = _expected(history, labels)
    for feature, values in expected.items():
        got = [_as_python(v) for v in frame[feature]]
        wrong = [
            (i, labels.iloc[i].tolist(), g, e)
            for i, (g, e) in enumerate(zip(got, values, strict=True))
            if g != e
        ]
        assert not wrong, f"{feature}: {len(wrong)} rows differ, e.g. {wrong[:5]}"

    # The generated cases really happen among the label rows (the test is not vacuous).
    late = restated = ttl_edge = 0
    for user, event, ts in labels.itertuples(index=False):
        at = ts.to_pydatetime()
        mine = [r for r in history["user_features"] if r["user_id"] == user]
        late += any(r["event_timestamp"] <= at < r["created"] for r in mine)
        restated += any(
            a is not b
            and a["event_timestamp"] == b["event_timestamp"]
            and max(a["created"], b["created"]) <= at
            for a in mine
            for b in mine
        )
        dyn = [r for r in history["event_dynamics"] if r["event_id"] == event]
        ttl_edge += any(
            at - r["event_timestamp"] in (_ttl("event_dynamics"), _ttl("event_dynamics") + SECOND)
            for r in dyn
        )
    assert late > 10 and restated > 2 and ttl_edge > 2, (late, restated, ttl_edge)


@pytest.mark.parametrize("by_created", [True, False])
def test_the_sorted_store_and_feasts_stock_spark_store_return_identical_frames(pit, by_created) -> None:  # type: ignore[no-untyped-def]
    """The sorted point-in-time join behind the same API gives the stock store's frame, value for
    value, with and without the created-timestamp rule (ties, restatements and TTL edges included)."""
    settings, _, labels = pit

    def with_store(offline_store: str):  # type: ignore[no-untyped-def]
        return settings.model_copy(
            update={"feast": settings.feast.model_copy(update={"offline_store": offline_store})}
        )

    stock = retrieval.historical_features(with_store("spark"), labels, REFS, by_created)
    sorted_ = retrieval.historical_features(
        with_store("pipelines.offline_store.SortedSparkOfflineStore"), labels, REFS, by_created
    )
    pd.testing.assert_frame_equal(sorted_, stock, check_dtype=False)
    assert stock[list(FEATURES.values())].notna().sum().min() > 10  # not a frame of missing values


def test_without_the_created_filter_feast_leaks_late_writes_into_the_past(pit) -> None:  # type: ignore[no-untyped-def]
    """Why historical_features passes filter_by_created_timestamp: Feast's default join leaks."""
    settings, history, labels = pit
    refs = ["user_features:attend_rate_shrunk"]
    leaky = retrieval.historical_features(settings, labels, refs, filter_by_created=False)
    got = leaky["attend_rate_shrunk"].map(_as_python).tolist()
    expected = _expected(history, labels)["attend_rate_shrunk"]
    leaked = [
        i
        for i, (user, _, ts) in enumerate(labels.itertuples(index=False))
        if got[i] != expected[i]
        and any(
            r["user_id"] == user and r["event_timestamp"] <= ts.to_pydatetime() < r["created"]
            for r in history["user_features"]
        )
    ]
    assert leaked, "expected Feast's default join to show values written after the label instant"


def test_materialization_looks_back_for_rows_written_late(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path / "home")
    rng = random.Random(3)
    first_end = G.T0 + timedelta(days=2)
    early = G.default_row("user_features", rng, {"user_id": "late"}, G.T0)
    G.write_gold(spark, settings, "user_features", [early], mode="overwrite")
    definitions.apply_definitions(settings)
    materialize.materialize(settings, first_end, ["user_features"])

    # The job writes, after first_end, a value that became known an hour before it.
    late = G.default_row("user_features", rng, {"user_id": "late"}, first_end - timedelta(hours=1))
    late["created"], late["attend_rate_shrunk"] = first_end + timedelta(minutes=5), 0.123
    G.write_gold(spark, settings, "user_features", [late])
    store = feast_store.get_store(settings)

    def online() -> Any:
        refs = ["user_features:attend_rate_shrunk"]
        return store.get_online_features(features=refs, entity_rows=[{"user_id": "late"}]).to_dict()[
            "attend_rate_shrunk"
        ][0]

    blind = materialize.materialize(settings, first_end + SECOND, ["user_features"], lookback=timedelta(0))
    assert blind["views"]["user_features"]["rows"] == 0 and online() == early["attend_rate_shrunk"]
    caught = materialize.materialize(settings, first_end + 2 * SECOND, ["user_features"])  # jobs' lookback
    assert caught["views"]["user_features"]["rows"] == 1 and online() == 0.123
