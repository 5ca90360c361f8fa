"""The serving benchmark, run small: its report's shape, and the Feast SDK read path returning
exactly the values the feed path serves from (a local SQLite store on a temporary home)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench.bench_serving import run_bench, with_entity_keys
from serving.synthetic import MARKET, ORGANIZER, make_world


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """One small run with the Feast baseline: it imports feast and starts Spark once (apply)."""
    return run_bench(requests=4, events=1_500, baseline_requests=2, feast_requests=1, feast_user_requests=5)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_report_has_the_feed_path_and_both_baselines_side_by_side(report: dict[str, Any]) -> None:
    assert report["requests"] == 4
    assert report["candidates_p50"] > 0
    assert 0 < report["p50_ms"] <= report["p99_ms"]
    assert {"retrieve", "score", "user"} <= set(report["stages_ms"])
    assert report["baseline_full_lightgbm_ms"]["requests"] == 2
    assert report["http_ms"]["requests"] == 4 and 0 < report["http_ms"]["p50"] <= report["http_ms"]["p99"]
    feast = report["baseline_feast_sdk_read_ms"]
    assert set(feast) >= {"p50", "p99", "requests", "rows_per_request"}
    assert feast["requests"] == 1 and 0 < feast["p50"] <= feast["p99"]
    assert feast["rows_per_request"] == report["candidates_p50"]  # the same requests' candidates
    user = report["feast_user_read_ms"]
    assert set(user) >= {"p50", "p99", "requests"} and user["requests"] == 5
    written = report["feast_store"]["rows_written"]
    assert written["event_features"] == written["event_embeddings"] == 1_500
    assert written["user_features"] == 500


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_feast_read_returns_the_snapshots_values(report: dict[str, Any]) -> None:
    feast, user = report["baseline_feast_sdk_read_ms"], report["feast_user_read_ms"]
    # Every model column of every candidate (embedding included), and every user feature.
    assert feast["values_checked"] >= feast["rows_per_request"] * 64
    assert feast["mismatches"] == 0
    assert user["values_checked"] > 0 and user["mismatches"] == 0


def test_feast_requests_zero_skips_the_feast_baseline() -> None:
    report = run_bench(requests=2, events=300, baseline_requests=1, feast_requests=0)
    assert report["baseline_feast_sdk_read_ms"] is None and report["feast_user_read_ms"] is None
    assert report["baseline_full_lightgbm_ms"]["requests"] == 1


def test_entity_stats_are_one_value_per_key_and_the_snapshot_follows() -> None:
    world = with_entity_keys(make_world(n_events=400, n_users=5))
    catalog = world.catalog
    for key, columns in (("organizer_id", ORGANIZER), ("market_key", MARKET)):
        per_key = catalog.groupby(key)[columns].nunique(dropna=False)
        assert (per_key <= 1).all().all(), key
    assert catalog["market_key"].str.fullmatch(r"[^|]+\|[^|]+\|[0-9]{1,3}").all()
    rate = world.snapshot.features[:, world.snapshot.column_positions(["org_attend_rate"])[0]]
    np.testing.assert_array_equal(rate, catalog["org_attend_rate"].to_numpy())
    assert pd.isna(catalog.loc[catalog["organizer_id"] == "o00000", "org_event_count"]).all()
