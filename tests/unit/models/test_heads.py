"""A head: Feast frame -> model matrix, fit, odds correction, calibration, files without pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.calibration import SamplingCorrection, fit_segment_calibrators
from models.heads import (
    FIRST_STAGE_COLUMNS,
    FIRST_STAGE_FILE,
    MODEL_FILE,
    Head,
    Scorer,
    fit_booster,
    model_columns,
    segment_of,
    segments,
    to_model_frame,
)
from pipelines.training.split import random_split, split_boundaries, temporal_split


def test_segments_split_price_and_history_depth() -> None:
    got = segment_of([1, 0, 1, None], [0, 2, 9, None])
    assert got.tolist() == ["free|cold", "paid|light", "free|regular", "paid|cold"]


def test_model_frame_spreads_the_embedding_and_turns_missing_into_nan() -> None:
    frame = pd.DataFrame(
        {"history_depth": [3, None], "embedding": [[0.5, -1.0, 2.0], None], "is_free": [1, 0]}
    )
    features = ["history_depth", "embedding", "is_free"]
    x = to_model_frame(frame, features, embedding_dim=3)
    assert (
        list(x.columns)
        == model_columns(features, 3)
        == [
            "history_depth",
            "embedding_0",
            "embedding_1",
            "embedding_2",
            "is_free",
        ]
    )
    assert x.dtypes.eq(np.float64).all()
    assert x.iloc[0].tolist() == [3.0, 0.5, -1.0, 2.0, 1.0]
    assert np.isnan(x.iloc[1][["history_depth", "embedding_0"]]).all()


def _synthetic(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(
        {
            "history_depth": rng.integers(0, 10, n).astype(float),
            "is_free": rng.integers(0, 2, n).astype(float),
            "signal": rng.normal(size=n),
        }
    )
    p = 1 / (1 + np.exp(-(x["signal"] * 1.5 - 2.0 + 0.5 * x["is_free"])))
    return x, (rng.random(n) < p).astype(float)


def _head(tmp_params: dict | None = None) -> tuple[Head, pd.DataFrame, np.ndarray]:
    x, y = _synthetic(6000, 1)
    xv, yv = _synthetic(3000, 2)
    booster = fit_booster(x, y, xv, yv, {"num_boost_round": 40, **(tmp_params or {})}, seed=3, num_threads=1)
    correction = SamplingCorrection(keep_rate=1.0, injected_per_negative=0.25)
    calibrators = fit_segment_calibrators(
        correction.apply(booster.predict(xv)), yv, segments(xv), min_rows=200
    )
    head = Head(
        name="rsvp",
        booster=booster,
        features=list(x.columns),
        columns=list(x.columns),
        embedding_dim=0,
        schema_hash="abc",
        correction=correction,
        calibrators=calibrators,
    )
    return head, xv, yv


def test_saved_head_loads_from_text_and_json_and_predicts_the_same(tmp_path: Path) -> None:
    head, xv, _ = _head()
    head.save(tmp_path / "h")
    assert (tmp_path / "h" / MODEL_FILE).read_text().startswith("tree")  # LightGBM's text format
    loaded = Head.load(tmp_path / "h")
    assert loaded.model_sha256() == head.model_sha256()
    np.testing.assert_array_equal(loaded.predict(xv), head.predict(xv))
    assert loaded.correction == head.correction


def test_a_model_file_that_changed_after_saving_is_refused(tmp_path: Path) -> None:
    head, _, _ = _head()
    head.save(tmp_path / "h")
    other, _, _ = _head({"learning_rate": 0.2})
    other.booster.save_model(str(tmp_path / "h" / MODEL_FILE))
    with pytest.raises(ValueError, match="do not match"):
        Head.load(tmp_path / "h")


def test_the_first_stage_reads_the_heads_strongest_columns_and_ranks_like_it() -> None:
    """Distilled from the head's raw score on 116 columns, where the label leans on six: it reads
    FIRST_STAGE_COLUMNS of them, those six among them, in the head's order, and on fresh rows it
    orders candidates as the head does."""
    from serving.synthetic import _training_frame, make_head

    head = make_head("rsvp", rows=8000, rounds=120, seed=5)
    stage = head.first_stage
    assert stage is not None and len(stage.columns) == FIRST_STAGE_COLUMNS
    signal = {"distance_km", "category_affinity", "friends_going", "market_rsvp_rate", "org_attend_rate"}
    assert signal <= set(stage.columns)
    assert stage.columns == [c for c in head.columns if c in stage.columns]
    x, _ = _training_frame(5000, head.columns, seed=99)
    full, first = head.raw(x), head.first_stage_raw(x)
    assert pd.Series(full).corr(pd.Series(first), method="spearman") > 0.9
    tenth = len(x) // 10
    overlap = np.intersect1d(np.argsort(-full)[:tenth], np.argsort(-first)[:tenth])
    assert len(overlap) > 0.7 * tenth  # a random tenth would hold ~10%


def test_the_first_stage_is_saved_beside_the_head_and_checked_on_load(tmp_path: Path) -> None:
    from serving.synthetic import _training_frame, make_head

    head = make_head("rsvp", rounds=40, seed=6)
    head.save(tmp_path / "h")
    loaded = Head.load(tmp_path / "h")
    assert loaded.first_stage is not None and loaded.first_stage.columns == head.first_stage_columns()
    x, _ = _training_frame(500, head.columns, seed=7)
    np.testing.assert_array_equal(loaded.first_stage_raw(x), head.first_stage_raw(x))
    assert loaded.model_sha256() == head.model_sha256()
    # Another first stage beside the same head is another model.
    make_head("rsvp", rounds=40, seed=8).first_stage.booster.save_model(
        str(tmp_path / "h" / FIRST_STAGE_FILE)
    )
    with pytest.raises(ValueError, match="do not match"):
        Head.load(tmp_path / "h")


def test_training_is_deterministic() -> None:
    assert _head()[0].model_sha256() == _head()[0].model_sha256()


def test_scorer_multiplies_the_heads_and_a_missing_head_counts_as_one() -> None:
    head, xv, _ = _head()
    both = Scorer(head, head).score(xv)
    alone = Scorer(head, None).score(xv)
    np.testing.assert_allclose(both["score"], alone["p_rsvp"] ** 2)
    np.testing.assert_array_equal(alone["score"], alone["p_rsvp"])


def _frame(n: int = 2000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    ts = pd.Timestamp("2026-10-01", tz="UTC") + pd.to_timedelta(
        np.sort(rng.integers(0, 28 * 86400, n)), unit="s"
    )
    created = ts.map(pd.Timestamp.timestamp).to_numpy() - rng.integers(0, 10 * 86400, n)
    return pd.DataFrame(
        {
            "event_timestamp": ts,
            "event_created_ts": created.astype(np.int64),
            "is_injected": (rng.random(n) < 0.2).astype(int),
        }
    )


def test_temporal_split_keeps_test_events_out_of_training_and_injections_out_of_evaluation() -> None:
    frame = _frame()
    t = frame["event_timestamp"]
    b1, b2 = split_boundaries(t.min().to_pydatetime(), t.max().to_pydatetime(), 0.7, 0.82)
    split = temporal_split(frame, b1, b2)
    assert (t[split.train] < split.calibration_start).all()
    assert (t[split.test] >= split.test_start).all()
    # Every test event was created after training ended: none can have a training row.
    assert (frame.loc[split.test, "event_created_ts"] >= split.calibration_start.timestamp()).all()
    assert (frame.loc[split.calibration | split.test, "is_injected"] == 0).all()
    assert not (split.train & split.test).any() and not (split.train & split.calibration).any()


def test_random_split_is_disjoint_and_stays_inside_its_pool() -> None:
    frame = _frame()
    pool = np.arange(len(frame)) % 3 != 0
    split = random_split(frame, pool, seed=1)
    for mask in (split.train, split.calibration, split.test):
        assert not (mask & ~pool).any()
    assert not (split.train & split.test).any() and not (split.calibration & split.test).any()
    assert 0.1 < split.test.sum() / pool.sum() < 0.3
