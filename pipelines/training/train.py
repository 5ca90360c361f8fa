"""Train one head end to end: training set -> split -> LightGBM -> calibration -> gates -> MLflow.

``train_head(settings, head, as_of)`` builds a new training-set version (or reuses a recorded
one), fits the head on the temporal training slice, corrects its odds for negative sampling,
fits per-segment isotonic maps on the calibration slice, measures it on the test slice, runs
the random-split leak diagnostic, logs everything to the head's MLflow experiment, registers
the run's model as ``challenger`` and moves ``champion`` only if every gate passes.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from conf import Settings
from models.calibration import SamplingCorrection, fit_segment_calibrators
from models.heads import (
    DEFAULT_PARAMS,
    SERVICE_OF_HEAD,
    Head,
    Scorer,
    fit_booster,
    model_columns,
    segments,
)
from models.promotion import CandidateReport, Gates, should_promote
from pipelines.training import registry
from pipelines.training.report import (
    importance_plot,
    ndcg_on_logged,
    probability_metrics,
    reliability_plot,
)
from pipelines.training.sets import (
    build_training_set,
    read_training_set,
    split_training_set,
    training_set_description,
)
from pipelines.training.split import Split, random_split

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
OTHER = {"rsvp": "attend", "attend": "rsvp"}
_STEPS = ("training set", "fit", "calibrate", "test", "leak diagnostic", "gates", "mlflow")


FRESHNESS_TABLES = ("event_dynamics", "user_features")
MAX_FEATURE_AGE = timedelta(hours=48)


def features_fresh(settings: Settings, as_of: datetime) -> dict[str, Any]:
    """Whether gold reaches ``as_of``: each table's newest row within 48 h of it (as validation)."""
    from pyspark.sql import functions as F

    from pipelines.spark import get_spark

    spark = get_spark(settings)
    newest: dict[str, str | None] = {}
    fresh = True
    for table in FRESHNESS_TABLES:
        row = (
            spark.read.format("delta")
            .load(settings.lake.table_path("gold", table))
            .filter(F.col("event_timestamp") <= F.lit(as_of.astimezone(UTC).replace(tzinfo=None)))
            .agg(F.max("event_timestamp"))
            .first()
        )
        latest = row[0] if row is not None else None
        newest[table] = latest.isoformat() if latest is not None else None
        if latest is None or latest.replace(tzinfo=UTC) < as_of - MAX_FEATURE_AGE:
            fresh = False
    return {"fresh": fresh, "as_of": as_of.isoformat(), "newest": newest}


def validate_inputs(frame: pd.DataFrame, columns: list[str], as_of: datetime | None) -> list[str]:
    """Cheap checks that the rows a model is about to learn from are usable; each problem named."""
    problems = []
    labels = frame["label"]
    if labels.isna().any() or not labels.isin([0, 1]).all():
        problems.append("labels outside {0, 1}")
    if not 0 < labels.mean() < 1:
        problems.append(f"one class only (positive rate {labels.mean():.4f})")
    if as_of is not None and (frame["event_timestamp"] >= pd.Timestamp(as_of)).any():
        problems.append("label instants at or after as_of")
    empty = [c for c in columns if frame[c].isna().all()]
    if empty:
        problems.append(f"{len(empty)} feature columns entirely missing, e.g. {empty[:3]}")
    return problems


def _fit(frame: pd.DataFrame, split: Split, columns: list[str], settings: Settings) -> Any:
    cfg = settings.training
    x, y = frame[columns], frame["label"].to_numpy()
    return fit_booster(
        x[split.train],
        y[split.train],
        x[split.calibration],
        y[split.calibration],
        dict(cfg.lightgbm),
        cfg.seed,
        cfg.num_threads,
    )


def gate_frame(settings: Settings, head: str, frame: pd.DataFrame, split: Split) -> pd.DataFrame:
    """The logged requests a head is gated on: the newest p_rsvp training set's test slice.

    The feed ranks by the product of both heads, so each head is judged by the product's NDCG@25
    on logged impressions (with the other head's champion); for ``rsvp`` that is its own test slice.
    """
    if head == "rsvp":
        return frame[split.test]
    try:
        rsvp, version = read_training_set(settings, "rsvp")
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{err}; the attend head is gated on the rsvp head's test requests") from err
    described = training_set_description(settings, "rsvp", version)
    return rsvp[split_training_set(settings, rsvp, described).test]


def _ndcg_with(scorer: Scorer, frame: pd.DataFrame) -> float:
    missing = [c for c in scorer.columns() if c not in frame.columns]
    if missing:
        raise KeyError(f"gate frame lacks model inputs {missing[:5]}")
    return ndcg_on_logged(frame, scorer.score(frame)["score"])


def _compile(head: Head, directory: Path) -> list[Path]:
    """The head's trees as native code, shipped beside the model so serving never compiles;
    nothing (LightGBM's predictor serves) if this host cannot compile."""
    try:
        manifest = head.compile_to(directory)
    except Exception as e:  # a missing or broken LLVM must not lose the trained model
        log.warning(
            "p_%s: compiling the trees failed, serving will use LightGBM's predictor: %s", head.name, e
        )
        return []
    return sorted(p for p in manifest.parent.iterdir() if p.is_file())


def train_head(
    settings: Settings,
    head: str,
    as_of: datetime | None = None,
    training_set_version: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train, evaluate, log, register and (if the gates pass) promote one head.

    With ``training_set_version`` the recorded training set is reused as is (retraining from
    recorded inputs gives the same model); otherwise a new version is built as of ``as_of``.
    Returns ``{"run_id", "version", "metrics", "promoted", "reason", ...}``.
    """
    import mlflow
    from lightgbm import __version__ as lgb_version

    from features.repo import FEATURE_SERVICES
    from pipelines.features.store import get_store, schema_hash, service_feature_names, service_schema_hash
    from pipelines.index.tower import current_tower_version

    def step(i: int) -> None:
        if progress:
            progress(_STEPS[i], i, len(_STEPS))

    if head not in SERVICE_OF_HEAD:
        raise ValueError(f"unknown head {head!r}; choose one of {sorted(SERVICE_OF_HEAD)}")
    cfg = settings.training
    step(0)
    if training_set_version is None:
        if as_of is None:
            raise ValueError("pass as_of (build a new training set) or training_set_version (reuse one)")
        training_set_version = build_training_set(settings, head, as_of).version
    frame, version = read_training_set(settings, head, training_set_version)
    described = training_set_description(settings, head, version)
    counts = described["counts"]
    correction = SamplingCorrection(
        keep_rate=float(counts["keep_rate"]), injected_per_negative=float(counts["injected_per_negative"])
    )
    service = SERVICE_OF_HEAD[head]
    # The declared service (features/), not the registry's: the model carries what it was built on.
    declared = {s.name: s for s in FEATURE_SERVICES}[service]
    features = service_feature_names(declared)
    columns = model_columns(features, settings.index.embedding_dim)
    problems = validate_inputs(frame, columns, datetime.fromisoformat(described["as_of"]))
    split = split_training_set(settings, frame, described)
    x, y = frame[columns], frame["label"].to_numpy()

    step(1)
    booster = _fit(frame, split, columns, settings)
    step(2)
    corrected_cal = correction.apply(booster.predict(x[split.calibration]))
    calibrators = fit_segment_calibrators(corrected_cal, y[split.calibration], segments(x[split.calibration]))
    trained = Head(
        name=head,
        booster=booster,
        features=features,
        columns=columns,
        embedding_dim=settings.index.embedding_dim,
        schema_hash=service_schema_hash(declared),
        correction=correction,
        calibrators=calibrators,
        tower_version=described.get("tower_version"),
    )

    step(3)
    xt, yt = x[split.test], y[split.test]
    seg_t = segments(xt)
    p_raw = trained.raw(xt)
    p_corr = correction.apply(p_raw)
    p_cal = trained.predict(xt)
    metrics = {f"test_{k}": v for k, v in probability_metrics(yt, p_cal, seg_t).items()}
    # The odds correction, measured where the population matches training (the calibration
    # slice: same events, later instants): predicted / observed without and with it.
    y_cal = y[split.calibration]
    raw_cal = booster.predict(x[split.calibration])
    metrics.update(
        {
            "calibration_predicted_over_observed_uncorrected": float(
                raw_cal.mean() / max(y_cal.mean(), 1e-12)
            ),
            "calibration_predicted_over_observed_odds_corrected": float(
                corrected_cal.mean() / max(y_cal.mean(), 1e-12)
            ),
            "test_ece_uncorrected": probability_metrics(yt, p_raw, seg_t)["ece"],
            "test_ece_odds_corrected": probability_metrics(yt, p_corr, seg_t)["ece"],
            "test_predicted_over_observed_uncorrected": float(p_raw.mean() / max(yt.mean(), 1e-12)),
            "test_predicted_over_observed_odds_corrected": float(p_corr.mean() / max(yt.mean(), 1e-12)),
            "odds_factor": correction.odds_factor,
            "best_iteration": float(booster.best_iteration or booster.current_iteration()),
            **{f"rows_{k}": float(v) for k, v in split.sizes().items()},
        }
    )

    step(4)
    leaky = random_split(frame, split.train | split.test, cfg.seed)
    leaky_booster = _fit(frame, leaky, columns, settings)
    metrics["leak_auc_temporal"] = metrics["test_auc"]
    metrics["leak_auc_random"] = probability_metrics(
        y[leaky.test], leaky_booster.predict(x[leaky.test]), segments(x[leaky.test])
    )["auc"]
    if head == "rsvp":
        metrics["leak_ndcg_at_25_temporal"] = ndcg_on_logged(frame[split.test], p_raw)
        metrics["leak_ndcg_at_25_random"] = ndcg_on_logged(
            frame[leaky.test], leaky_booster.predict(x[leaky.test])
        )

    step(5)
    other = registry.load_head(settings, OTHER[head])
    other_head = other[0] if other else None
    pair = (trained, other_head) if head == "rsvp" else (other_head, trained)
    gated_on = gate_frame(settings, head, frame, split)
    metrics["gate_ndcg_at_25"] = _ndcg_with(Scorer(*pair), gated_on)
    champion = registry.load_head(settings, head)
    champion_report = None
    if champion is not None:
        champ_pair = (champion[0], other_head) if head == "rsvp" else (other_head, champion[0])
        champ_ndcg = _ndcg_with(Scorer(*champ_pair), gated_on)
        metrics["champion_gate_ndcg_at_25"] = champ_ndcg
        champion_report = CandidateReport(champ_ndcg, 0.0, 1.0, champion[0].schema_hash, True)
    report = CandidateReport(
        ndcg_at_25=metrics["gate_ndcg_at_25"],
        ece=metrics["test_ece"],
        score_std=metrics["test_score_std"],
        schema_hash=trained.schema_hash,
        inputs_validated=not problems,
    )
    gate_cfg = cfg.gates[head]
    gates = Gates(gate_cfg.ndcg_tolerance, gate_cfg.max_ece, gate_cfg.min_score_std)
    serving_hash = schema_hash(service, store=get_store(settings))
    decision = should_promote(report, champion_report, gates, serving_hash)
    reasons = [*decision.reasons, *(f"input validation: {p}" for p in problems)]
    published_tower = current_tower_version(settings)
    if trained.uses_embeddings() and trained.tower_version != published_tower:
        reasons.append(
            f"trained on tower {trained.tower_version}'s embeddings, serving has tower {published_tower}'s"
        )
    reason = "; ".join(dict.fromkeys(reasons)) or "all gates passed"

    step(6)
    registry.configure(settings)
    experiment = registry.ensure_experiment(settings, registry.experiment_name(settings, head))
    params = {**DEFAULT_PARAMS, **cfg.lightgbm}
    with mlflow.start_run(experiment_id=experiment, run_name=f"p_{head} as of {described['as_of']}") as run:
        mlflow.log_params(
            {
                "head": head,
                "feature_service": service,
                "as_of": described["as_of"],
                "training_set_path": described.get("path", ""),
                "training_set_version": version,
                "seed": cfg.seed,
                "calibration_start": split.calibration_start.isoformat(),
                "test_start": split.test_start.isoformat(),
                "keep_rate": correction.keep_rate,
                "injected_per_negative": round(correction.injected_per_negative, 6),
                **{f"lgb_{k}": v for k, v in params.items()},
            }
        )
        mlflow.set_tags(
            {
                "feature_schema_hash": trained.schema_hash,
                "tower_version": str(trained.tower_version),
                "model_sha256": trained.model_sha256(),
                "training_set_version": str(version),
                "promotion.reason": reason,
                **{f"data.{k}": str(v) for k, v in described["sources"].items()},
            }
        )
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)})
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            reliability = reliability_plot(
                yt, p_cal, seg_t, f"p_{head}: calibrated, test slice", d / "reliability.png"
            )
            reliability.to_csv(d / "reliability.csv", index=False)
            reliability_plot(
                yt, p_raw, seg_t, f"p_{head}: raw (no odds correction)", d / "reliability_raw.png"
            )
            importance_plot(booster, f"p_{head}: feature importance", d / "importance.png").to_csv(
                d / "importance.csv", index=False
            )
            (d / "training_set.json").write_text(json.dumps(described, indent=1, sort_keys=True))
            (d / "decision.json").write_text(
                json.dumps({"promote": not reasons, "reasons": reasons}, indent=1)
            )
            mlflow.log_artifacts(str(d), artifact_path="report")
            trained.save(d / "head")
            compiled = _compile(trained, d / "head" / "compiled")
            mlflow.set_tag("compiled", "yes" if compiled else "no")
            mlflow.lightgbm.log_model(
                booster,
                name="model",
                extra_files=[str(d / "head" / "head.json"), *map(str, compiled)],
                pip_requirements=[f"lightgbm=={lgb_version}"],
            )
        run_id = run.info.run_id
    model_version = registry.register(settings, run_id, head)
    moved = registry.promote(settings, head, str(model_version.version), not reasons, reason)
    log.info("p_%s run %s v%s: %s", head, run_id, model_version.version, reason)
    return {
        "run_id": run_id,
        "version": str(model_version.version),
        "head": head,
        "training_set_version": version,
        "metrics": {
            k: (None if v is None or not np.isfinite(v) else round(float(v), 6)) for k, v in metrics.items()
        },
        "promoted": moved["promoted"],
        "champion": moved["champion"],
        "reason": reason,
        "model_sha256": trained.model_sha256(),
    }
