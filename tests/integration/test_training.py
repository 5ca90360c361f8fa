"""Training end to end on real Spark, Delta, Feast, LightGBM and MLflow (SQLite), on a simulated world.

One small world (simulate -> ingest -> gold -> tower -> embeddings -> feast apply) serves every
test; heads are trained, registered, gated, promoted, rejected and rolled back against it.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from tests.integration.training_world import AS_OF, TrainedWorld, lenient, with_training

# The shared world is built inside the first test's time budget.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

World = TrainedWorld


@pytest.fixture
def world(trained_world: TrainedWorld) -> TrainedWorld:
    return trained_world


def test_training_set_counts_add_up_and_the_injection_is_corrected(spark, world: World) -> None:  # type: ignore[no-untyped-def]
    from pipelines.training.sets import read_training_set, split_training_set, training_set_description

    frame, version = read_training_set(world.settings, "rsvp", world.rsvp["training_set_version"])
    described = training_set_description(world.settings, "rsvp", version)
    counts = described["counts"]
    untouched = counts["natural_negatives"] - counts["training_negatives"]  # calibration + test
    assert len(frame) == (
        counts["natural_positives"] + untouched + counts["kept_negatives"] + counts["injected_negatives"]
    )
    assert int(frame["label"].sum()) == counts["natural_positives"]
    # About 20% of training negatives are injected; the correction uses the exact counts.
    negatives = counts["kept_negatives"] + counts["injected_negatives"]
    assert counts["injected_negatives"] / negatives == pytest.approx(0.2, abs=0.01)
    assert world.rsvp["metrics"]["odds_factor"] == pytest.approx(
        1 + counts["injected_per_negative"], abs=1e-5
    )
    injected = frame[frame["is_injected"] == 1]
    assert (injected["label"] == 0).all() and (injected["rsvped"] == 0).all()
    # Injected (and downsampled) rows only ever train: calibration and test are natural impressions.
    split = split_training_set(world.settings, frame, described)
    assert (injected["event_timestamp"] < split.calibration_start).all()
    # Every silver and gold input is pinned to a Delta version.
    assert set(described["sources"]) >= {"silver.impressions", "silver.rsvps", "gold.event_dynamics"}
    assert all(v >= 0 for v in described["sources"].values())
    # Label instants lie in the window and before the day whose same-day labels are incomplete.
    t = frame["event_timestamp"]
    assert t.max() < AS_OF - timedelta(days=1) and t.min() >= AS_OF - timedelta(days=21)


def test_the_set_the_executors_write_equals_feasts_stock_frame_on_the_driver(spark, world: World) -> None:  # type: ignore[no-untyped-def]
    """The Spark path (the sorted store's join, the on-demand views in Spark's Python workers, the
    model columns as Spark expressions, written by the executors) gives, value for value, what
    Feast's stock store and ``to_model_frame`` give on the driver for the same label rows."""
    import pandas as pd

    from models.heads import SERVICE_OF_HEAD, to_model_frame
    from pipelines.feast_store import get_store
    from pipelines.training.examples import KEY_COLUMNS, META_COLUMNS, REQUEST_COLUMNS
    from pipelines.training.retrieval import historical_features
    from pipelines.training.sets import read_training_set
    from published.feature_store import service_feature_names

    frame, _ = read_training_set(world.settings, "rsvp", world.rsvp["training_set_version"])
    assert len(frame) > 1000
    frame = frame.iloc[:: max(1, len(frame) // 5000)]  # all kinds of rows, a size the stock join does fast
    stock = world.settings.model_copy(
        update={"feast": world.settings.feast.model_copy(update={"offline_store": "spark"})}
    )
    service = SERVICE_OF_HEAD["rsvp"]
    features = service_feature_names(get_store(stock).get_feature_service(service))
    joined = historical_features(stock, frame[[*KEY_COLUMNS, *REQUEST_COLUMNS, *META_COLUMNS]], service)
    expected = to_model_frame(joined, features, world.settings.index.embedding_dim)
    assert list(frame.columns[-len(expected.columns) :]) == list(expected.columns)
    assert expected.notna().to_numpy().mean() > 0.5  # a join that found nothing would agree too
    pd.testing.assert_frame_equal(frame[expected.columns], expected, check_exact=True)


def test_the_sampled_training_rows_do_not_depend_on_how_spark_partitions_them(spark, world: World) -> None:  # type: ignore[no-untyped-def]
    """Downsampling and injection pick the same rows however the data is split (local vs cluster).

    The scan's split size and the shuffle width decide which partition, and which position in it,
    a row lands in; a cluster's executors set both differently from ``local[2]``.
    """
    from pipelines.training.examples import rsvp_examples

    impressions = world.settings.lake.table_path("silver", "impressions")
    layouts = {
        "few": {"spark.sql.files.maxPartitionBytes": "128m", "spark.sql.shuffle.partitions": "2"},
        "many": {"spark.sql.files.maxPartitionBytes": "256k", "spark.sql.shuffle.partitions": "9"},
    }

    def sampled(layout: dict[str, str]) -> tuple[int, set[tuple[str, str, int]]]:
        spark.catalog.clearCache()  # else the second call reuses the first one's cached rows
        for k, v in layout.items():
            spark.conf.set(k, v)
        splits = spark.read.format("delta").load(impressions).rdd.getNumPartitions()
        rows, counts = rsvp_examples(
            spark,
            world.settings,
            AS_OF - timedelta(days=14),
            AS_OF,
            AS_OF - timedelta(days=4),
            0.5,
            0.2,
            seed=3,
        )
        assert counts.kept_negatives < counts.training_negatives and counts.injected_negatives > 0
        return splits, {
            (r.example_id, r.event_id, r.is_injected)
            for r in rows.select("example_id", "event_id", "is_injected").collect()
        }

    keys = {"spark.sql.adaptive.enabled", *layouts["few"]}
    saved = {k: spark.conf.get(k) for k in keys}
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # keep the two layouts apart
    try:
        (few_splits, few), (many_splits, many) = sampled(layouts["few"]), sampled(layouts["many"])
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)
    assert few_splits < many_splits  # the impressions really were split differently
    assert few == many
    assert sum(injected for *_, injected in few) > 0


def test_impressions_of_events_gold_did_not_know_are_counted_and_left_out(  # type: ignore[no-untyped-def]
    spark, world: World, tmp_path
) -> None:
    """An impression whose event gold did not hold by ``as_of`` has nothing to join features to:
    it is left out of the examples and counted as ``event_unknown_at_as_of``, and every impression
    of the window is then either a labelled example or that count."""
    import shutil

    from pyspark.sql import functions as F

    from pipelines.training.examples import RSVP_LABEL_WINDOW, rsvp_examples

    lake = tmp_path / "lake"
    shutil.copytree(world.settings.lake.root, lake)
    settings = world.settings.model_copy(
        update={"lake": world.settings.lake.model_copy(update={"root": str(lake)})}
    )
    start = AS_OF - timedelta(days=14)
    window = (
        spark.read.format("delta")
        .load(settings.lake.table_path("silver", "impressions"))
        .filter(
            (F.col("served_at") >= F.lit(start.replace(tzinfo=None)))
            & (F.col("served_at") < F.lit((AS_OF - RSVP_LABEL_WINDOW).replace(tzinfo=None)))
        )
    )
    forgotten = [
        r.event_id for r in window.select("event_id").distinct().orderBy("event_id").limit(5).collect()
    ]
    forgotten_shown = window.filter(F.col("event_id").isin(forgotten)).count()
    gold = settings.lake.table_path("gold", "event_features")
    kept = spark.read.format("delta").load(gold).filter(~F.col("event_id").isin(forgotten))
    kept.write.format("delta").mode("overwrite").save(gold)

    rows, counts = rsvp_examples(spark, settings, start, AS_OF, AS_OF - timedelta(days=4), 1.0, 0.0, seed=3)

    assert counts.dropped["event_unknown_at_as_of"] == forgotten_shown > 0
    assert counts.natural_positives + counts.natural_negatives + forgotten_shown == window.count()
    assert rows.filter(F.col("event_id").isin(forgotten)).count() == 0
    assert rows.count() == counts.natural_positives + counts.natural_negatives


def test_labels_match_a_brute_force_reading_of_silver(spark, world: World) -> None:  # type: ignore[no-untyped-def]
    from pipelines.training.sets import read_training_set

    frame, _ = read_training_set(world.settings, "rsvp", world.rsvp["training_set_version"])
    impressions = (
        spark.read.format("delta").load(world.settings.lake.table_path("silver", "impressions")).toPandas()
    )
    rsvps = spark.read.format("delta").load(world.settings.lake.table_path("silver", "rsvps")).toPandas()
    first = rsvps.groupby(["user_id", "event_id"])["rsvp_at"].min()
    natural = frame[frame["is_injected"] == 0].sample(500, random_state=1)
    served = impressions.set_index("impression_id").loc[natural["example_id"], "served_at"]
    for (_, row), at in zip(natural.iterrows(), served, strict=True):
        rsvp_at = first.get((row["user_id"], row["event_id"]))
        expected = rsvp_at is not None and at <= rsvp_at < at + timedelta(days=1)
        assert row["label"] == int(expected), row["example_id"]


def test_attend_head_learns_only_from_labels_nine_days_old(world: World) -> None:
    from pipelines.training.sets import read_training_set, training_set_description

    frame, version = read_training_set(world.settings, "attend", world.attend["training_set_version"])
    assert frame["event_timestamp"].max() < AS_OF - timedelta(days=9)
    # Its own window (longer than the hourly head's), ending where labels stop being mature.
    cfg = world.settings.training
    described = training_set_description(world.settings, "attend", version)
    assert described["start"] == (AS_OF - timedelta(days=cfg.attend_window_days + 9)).isoformat()
    assert described["label_end"] == (AS_OF - timedelta(days=9)).isoformat()
    assert frame["rsvped"].eq(1).all() and frame["label"].isin([0, 1]).all()
    assert 0.3 < frame["label"].mean() < 0.9  # follow-through, not an RSVP rate


def test_first_heads_become_champions_with_a_full_mlflow_record(world: World) -> None:
    from mlflow import MlflowClient

    from pipelines.training.registry import configure, model_name

    for report, head in ((world.rsvp, "rsvp"), (world.attend, "attend")):
        assert report["promoted"] and report["reason"] == "all gates passed"
        client: MlflowClient = configure(world.settings)
        run = client.get_run(report["run_id"])
        assert (
            run.data.tags["feature_schema_hash"] and run.data.tags["model_sha256"] == report["model_sha256"]
        )
        assert run.data.params["training_set_version"] == str(report["training_set_version"])
        assert "data.silver.impressions" in run.data.tags and "test_auc" in run.data.metrics
        artifacts = {a.path for a in client.list_artifacts(report["run_id"], "report")}
        assert {"report/reliability.png", "report/importance.png", "report/training_set.json"} <= artifacts
        champion = client.get_model_version_by_alias(model_name(world.settings, head), "champion")
        assert champion.run_id == report["run_id"]
    assert world.rsvp["metrics"]["test_auc"] > 0.6
    assert 0 < world.attend["metrics"]["test_auc"] <= 1  # a few hundred RSVPs: no more to claim


def test_calibrated_probabilities_are_close_and_the_leak_shows(world: World) -> None:
    m = world.rsvp["metrics"]
    assert m["test_ece"] < 0.02
    # A random split lets impressions of one event sit on both sides: it flatters the model.
    assert m["leak_auc_random"] > m["leak_auc_temporal"]


def test_downsampling_without_correction_is_off_by_the_predicted_factor(world: World) -> None:
    """Same rows, same split: all natural negatives vs half of them (no injection either way).

    Halving the negatives doubles the odds the booster learns; the exact correction halves them
    back, so the corrected predictions match the model trained on every row.
    """
    from pipelines.training.train import train_head

    def run(keep: float) -> dict[str, float]:
        settings = with_training(
            lenient(world.settings), negative_keep_rate=keep, injected_negative_share=0.0
        )
        return dict(train_head(settings, "rsvp", AS_OF)["metrics"])

    full, halved = run(1.0), run(0.5)
    assert full["odds_factor"] == 1.0 and halved["odds_factor"] == pytest.approx(0.5, abs=0.02)
    raw = "calibration_predicted_over_observed_uncorrected"
    corrected = "calibration_predicted_over_observed_odds_corrected"
    # Positives are rare (a few %), so doubling the odds nearly doubles the probability.
    assert halved[raw] / full[raw] == pytest.approx(1.9, rel=0.2)
    assert halved[corrected] / full[corrected] == pytest.approx(1.0, rel=0.15)


def test_a_failed_gate_leaves_the_champion_and_rollback_restores_previous(world: World) -> None:
    from conf.settings import GateSettings
    from pipelines.training.registry import configure, rollback
    from pipelines.training.train import train_head
    from published.registry import CHAMPION, PREVIOUS, alias_version, model_name

    client = configure(world.settings)
    name = model_name(world.settings, "rsvp")
    before = alias_version(client, name, CHAMPION).version
    strict = with_training(
        world.settings, gates={"rsvp": GateSettings(max_ece=1e-9), "attend": GateSettings(max_ece=1.0)}
    )
    rejected = train_head(strict, "rsvp", training_set_version=world.rsvp["training_set_version"])
    assert not rejected["promoted"] and "ECE" in rejected["reason"]
    assert alias_version(client, name, CHAMPION).version == before
    tags = client.get_model_version(name, rejected["version"]).tags
    assert tags["promotion.decision"] == "rejected" and "ECE" in tags["promotion.reason"]

    promoted = train_head(
        lenient(world.settings), "rsvp", training_set_version=world.rsvp["training_set_version"]
    )
    assert promoted["promoted"]
    assert alias_version(client, name, PREVIOUS).version == before
    back = rollback(world.settings, "rsvp")
    assert back["champion"] == before and alias_version(client, name, CHAMPION).version == before


def test_retraining_from_the_recorded_training_set_gives_the_same_model(world: World) -> None:
    from pipelines.training.train import train_head

    again = train_head(
        lenient(world.settings), "rsvp", training_set_version=world.rsvp["training_set_version"]
    )
    assert again["model_sha256"] == world.rsvp["model_sha256"]
    assert again["metrics"]["test_auc"] == world.rsvp["metrics"]["test_auc"]


def test_the_attend_head_is_gated_on_its_own_mature_labels(world: World) -> None:
    """Not on the rsvp test slice, whose attendance has not landed yet: the gate is AUC on the
    attend head's test RSVPs, and a champion is scored on the same rows."""
    from pipelines.training.train import gate_metric, load_training_data, train_head
    from published.registry import load_head

    again = train_head(
        lenient(world.settings), "attend", training_set_version=world.attend["training_set_version"]
    )
    m = again["metrics"]
    assert "gate_ndcg_at_25" not in m
    assert m["gate_auc"] == m["test_auc"]
    # The registered champion is the same recorded model, scored by its compiled trees (equal to
    # ~1e-6), so on the same rows it scores the same AUC.
    data = load_training_data(world.settings, "attend", None, world.attend["training_set_version"])
    champion = load_head(world.settings, "attend")
    assert champion is not None
    assert gate_metric(data, champion[0], None) == pytest.approx(m["gate_auc"], abs=1e-4)
    assert world.rsvp["metrics"]["gate_ndcg_at_25"] > 0  # the rsvp head keeps the product's NDCG


def test_the_quality_gate_pairs_both_heads_on_the_same_test_requests(world: World) -> None:
    """The champion against itself: the same per-request NDCG@25, so a difference of exactly 0
    with a zero-width interval, over the test requests with a positive grade; the challenger's
    side is the gate metric itself."""
    from pipelines.training.train import gate_comparison, gate_metric, load_training_data
    from published.registry import load_head

    data = load_training_data(world.settings, "rsvp", None, world.rsvp["training_set_version"])
    rsvp, attend = load_head(world.settings, "rsvp"), load_head(world.settings, "attend")
    assert rsvp is not None and attend is not None
    same = gate_comparison(data, rsvp[0], rsvp[0], attend[0], 0.95, seed=7)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    assert same.challenger == pytest.approx(gate_metric(data, rsvp[0], attend[0]))
    test_requests = data.frame[data.split.test]["request_id"].nunique()
    assert 10 < same.units <= test_requests


def test_the_registered_champion_loads_without_pickle_and_scores_like_training(world: World) -> None:
    from pipelines.training.sets import read_training_set
    from published.registry import load_head

    loaded = load_head(world.settings, "attend")
    assert loaded is not None
    head, version = loaded
    assert head.model_sha256() == world.attend["model_sha256"]
    frame, _ = read_training_set(world.settings, "attend")
    p = head.predict(frame)
    assert np.isfinite(p).all() and p.min() >= 0 and p.max() <= 1


def test_the_p_rsvp_champion_carries_its_first_stage_through_the_registry(world: World) -> None:
    """The first stage distilled at training travels with the registered model, compiled, and
    scores in serving exactly as the trained one; its agreement with the head is in the run."""
    from models.heads import FIRST_STAGE_COLUMNS
    from pipelines.training.sets import read_training_set
    from published.registry import load_head

    loaded = load_head(world.settings, "rsvp")
    assert loaded is not None
    head = loaded[0]
    assert head.model_sha256() == world.rsvp["model_sha256"]  # the hash covers the first stage
    assert head.first_stage is not None and len(head.first_stage_columns()) == FIRST_STAGE_COLUMNS
    assert set(head.first_stage_columns()) < set(head.columns)
    frame, _ = read_training_set(world.settings, "rsvp")
    served = head.first_stage_raw(frame)  # compiled, if this host compiled it at registration
    plain = head.first_stage.booster.predict(frame[head.first_stage_columns()], raw_score=True)
    np.testing.assert_allclose(served, plain, rtol=0, atol=1e-9)
    assert world.rsvp["metrics"]["test_first_stage_top_tenth_recall"] > 0.5
    assert world.rsvp["metrics"]["test_first_stage_spearman"] > 0.5


def test_evaluate_sets_the_champion_beside_the_baselines(world: World) -> None:
    from pipelines.training.evaluate import MODELS, evaluate
    from simulator.truth import GroundTruth

    report = evaluate(world.settings, GroundTruth.load(world.settings.home / "simulator"), requests=60)
    models = report["models"]
    assert set(models) == set(MODELS)
    for row in models.values():
        assert {"ndcg_at_25", "expected_attendance_at_25", "expected_rsvps_at_25", "ece"} <= set(row)
    att = {name: row["expected_attendance_at_25"] for name, row in models.items()}
    assert att["oracle"] >= max(att.values()) - 1e-12  # the ceiling
    assert att["champion"] > att["random"]
    # Serving's first stage (best max(50, 10%) per request by the distilled forest) keeps the
    # champion's picks: a cut that ranked by anything else would drop attendance well below.
    assert att["champion_first_stage"] >= 0.95 * att["champion"]
    assert report["candidates_per_request"] > 25
    assert models["oracle"]["ndcg_at_25"] > models["random"]["ndcg_at_25"]
    # ECE against the ground truth's probabilities (the test slice's attendance is not observed
    # yet): small for calibrated heads; none for scores that are not probabilities, or the truth.
    for name in ("champion", "rsvp_only"):
        assert 0 <= models[name]["ece"] < 0.05
    assert models["oracle"]["ece"] is None and models["random"]["ece"] is None
