"""Train one head end to end, as a short sequence of named steps.

``train_head(settings, head, as_of)``:

1. ``load_training_data``: a new training-set version as of ``as_of`` (or a recorded one), its
   temporal split, the odds correction its counts imply and the input checks;
2. ``fit``: LightGBM on the training slice, early-stopped on the calibration slice;
3. ``calibrate``: the odds correction, then per-segment isotonic maps on the calibration slice;
4. ``measure``: the test slice's metrics and the odds correction measured;
5. ``leak_diagnostic``: what a random split would have reported (logged, never used to select);
6. ``gate_inputs`` + ``decide``: the challenger's gate metric beside the champion's as recorded
   at ``as_of`` on the same test rows, with a paired bootstrap interval of the difference (seeded,
   so training the same instant again decides the same way), then a pure decision;
7. ``log_run``: params, metrics, plots, the head's files and compiled trees to MLflow;
8. ``register_and_promote``: a registry version as ``challenger``, ``champion`` only if the
   decision says so and the champion would not move backwards in data time.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from conf import Settings
from models.calibration import SamplingCorrection, fit_segment_calibrators
from models.heads import (
    DEFAULT_PARAMS,
    FIRST_STAGE_FILE,
    SERVICE_OF_HEAD,
    SIDECAR_FILE,
    Head,
    Scorer,
    distill_first_stage,
    fit_booster,
    model_columns,
    segments,
)
from models.metrics import auc, bootstrap_interval
from models.promotion import CandidateReport, Comparison, Decision, Gates, should_promote
from pipelines.training import registry
from pipelines.training.report import (
    importance_plot,
    ndcg_on_logged,
    ndcg_per_request_on_logged,
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
_STEPS = ("training set", "fit", "calibrate", "test", "leak diagnostic", "gates", "mlflow", "registry")


FRESHNESS_TABLES = ("event_dynamics", "user_features")
MAX_FEATURE_AGE = timedelta(hours=48)


def features_fresh(settings: Settings, as_of: datetime) -> dict[str, Any]:
    """Whether gold reaches ``as_of``: each table's newest row within 48 h of it (as validation)."""
    from pyspark.sql import functions as F

    from contracts.instants import naive_utc
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    newest: dict[str, str | None] = {}
    fresh = True
    for table in FRESHNESS_TABLES:
        row = (
            spark.read.format("delta")
            .load(settings.lake.table_path("gold", table))
            .filter(F.col("event_timestamp") <= F.lit(naive_utc(as_of)))
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


@dataclass(frozen=True)
class TrainingData:
    """One recorded training set, split, with what the steps after it need to know about it."""

    head: str
    frame: pd.DataFrame
    version: int
    described: dict[str, Any]  # what the build recorded: as_of, window, counts, source versions
    split: Split
    features: list[str]  # the feature service's features, as declared in features/
    columns: list[str]  # model inputs (the embedding spread into numbers)
    correction: SamplingCorrection
    problems: list[str]  # input checks that failed

    @property
    def as_of(self) -> datetime:
        return datetime.fromisoformat(self.described["as_of"])

    @property
    def x(self) -> pd.DataFrame:
        return self.frame[self.columns]

    @property
    def y(self) -> np.ndarray:
        return self.frame["label"].to_numpy()


def load_training_data(
    settings: Settings, head: str, as_of: datetime | None, training_set_version: int | None
) -> TrainingData:
    """Build a new training-set version as of ``as_of``, or read recorded ``training_set_version``."""
    from published.feature_store import declared_service, service_feature_names

    if head not in SERVICE_OF_HEAD:
        raise ValueError(f"unknown head {head!r}; choose one of {sorted(SERVICE_OF_HEAD)}")
    if training_set_version is None:
        if as_of is None:
            raise ValueError("pass as_of (build a new training set) or training_set_version (reuse one)")
        training_set_version = build_training_set(settings, head, as_of).version
    frame, version = read_training_set(settings, head, training_set_version)
    described = training_set_description(settings, head, version)
    counts = described["counts"]
    # The declared service (features/), not the registry's: the model carries what it was built on.
    features = service_feature_names(declared_service(SERVICE_OF_HEAD[head]))
    columns = model_columns(features, settings.index.embedding_dim)
    return TrainingData(
        head=head,
        frame=frame,
        version=version,
        described=described,
        split=split_training_set(settings, frame, described),
        features=features,
        columns=columns,
        correction=SamplingCorrection(
            keep_rate=float(counts["keep_rate"]), injected_per_negative=float(counts["injected_per_negative"])
        ),
        problems=validate_inputs(frame, columns, datetime.fromisoformat(described["as_of"])),
    )


def _fit(data: TrainingData, split: Split, settings: Settings) -> Any:
    cfg = settings.training
    x, y = data.x, data.y
    return fit_booster(
        x[split.train], y[split.train], x[split.calibration], y[split.calibration], dict(cfg.lightgbm),
        cfg.seed, cfg.num_threads,
    )  # fmt: skip


def fit(settings: Settings, data: TrainingData) -> Any:
    """The head's booster on the temporal training slice, early-stopped on the calibration slice."""
    return _fit(data, data.split, settings)


def calibrate(settings: Settings, data: TrainingData, booster: Any) -> Head:
    """The odds correction for how negatives were sampled, then per-segment isotonic maps fit on
    the calibration slice (natural impressions: the population the probability must describe).
    The p_rsvp head also gets serving's first stage, distilled from it on the training slice."""
    from published.feature_store import declared_service, service_schema_hash

    cal = data.split.calibration
    x_cal = data.x[cal]
    corrected = data.correction.apply(booster.predict(x_cal))
    cfg = settings.training
    first_stage = None
    if data.head == "rsvp":
        first_stage = distill_first_stage(
            booster, data.columns, data.x[data.split.train], cfg.seed, cfg.num_threads
        )
    return Head(
        name=data.head,
        booster=booster,
        features=data.features,
        columns=data.columns,
        embedding_dim=settings.index.embedding_dim,
        schema_hash=service_schema_hash(declared_service(SERVICE_OF_HEAD[data.head])),
        correction=data.correction,
        calibrators=fit_segment_calibrators(corrected, data.y[cal], segments(x_cal)),
        tower_version=data.described.get("tower_version"),
        first_stage=first_stage,
    )


def measure(data: TrainingData, trained: Head) -> dict[str, float]:
    """Test-slice metrics of the calibrated head, and the odds correction measured where the
    population matches training (the calibration slice: same events, later instants)."""
    split, correction, booster = data.split, trained.correction, trained.booster
    xt, yt = data.x[split.test], data.y[split.test]
    seg_t = segments(xt)
    p_raw = trained.raw(xt)
    p_corr = correction.apply(p_raw)
    metrics = {f"test_{k}": v for k, v in probability_metrics(yt, trained.predict(xt), seg_t).items()}
    y_cal = data.y[split.calibration]
    raw_cal = np.asarray(booster.predict(data.x[split.calibration]), dtype=float)
    corrected_cal = correction.apply(raw_cal)

    def ratio(p: np.ndarray, y: np.ndarray) -> float:
        return float(p.mean() / max(y.mean(), 1e-12))

    metrics.update(
        {
            "calibration_predicted_over_observed_uncorrected": ratio(raw_cal, y_cal),
            "calibration_predicted_over_observed_odds_corrected": ratio(corrected_cal, y_cal),
            "test_ece_uncorrected": probability_metrics(yt, p_raw, seg_t)["ece"],
            "test_ece_odds_corrected": probability_metrics(yt, p_corr, seg_t)["ece"],
            "test_predicted_over_observed_uncorrected": ratio(p_raw, yt),
            "test_predicted_over_observed_odds_corrected": ratio(p_corr, yt),
            "odds_factor": correction.odds_factor,
            "best_iteration": float(booster.best_iteration or booster.current_iteration()),
            **{f"rows_{k}": float(v) for k, v in split.sizes().items()},
        }
    )
    if trained.first_stage is not None:
        metrics.update(first_stage_agreement(trained.raw(xt), trained.first_stage_raw(xt)))
    return metrics


def first_stage_params(trained: Head) -> dict[str, str]:
    """What an analyst needs to see of the first stage in the run's parameters."""
    if trained.first_stage is None:
        return {}
    booster = trained.first_stage.booster
    return {
        "first_stage_trees": str(booster.num_trees()),
        "first_stage_columns": ",".join(trained.first_stage.columns),
    }


def first_stage_agreement(head_raw: np.ndarray, first_raw: np.ndarray) -> dict[str, float]:
    """How well the first stage orders rows as its head does: rank correlation, and the share of
    the head's top tenth that the first stage's top tenth holds (serving keeps a tenth)."""
    tenth = max(1, len(head_raw) // 10)
    top_head = np.argsort(-head_raw, kind="stable")[:tenth]
    top_first = np.argsort(-first_raw, kind="stable")[:tenth]
    return {
        "test_first_stage_spearman": float(pd.Series(head_raw).corr(pd.Series(first_raw), method="spearman")),
        "test_first_stage_top_tenth_recall": len(np.intersect1d(top_head, top_first)) / tenth,
    }


def leak_diagnostic(
    settings: Settings, data: TrainingData, trained: Head, temporal_auc: float
) -> dict[str, float]:
    """What a random 80/20 split over the same rows would report: how much it would flatter."""
    split = data.split
    leaky = random_split(data.frame, split.train | split.test, settings.training.seed)
    booster = _fit(data, leaky, settings)
    x, y = data.x, data.y
    out = {
        "leak_auc_temporal": temporal_auc,
        "leak_auc_random": probability_metrics(
            y[leaky.test], booster.predict(x[leaky.test]), segments(x[leaky.test])
        )["auc"],
    }
    if data.head == "rsvp":
        out["leak_ndcg_at_25_temporal"] = ndcg_on_logged(data.frame[split.test], trained.raw(x[split.test]))
        out["leak_ndcg_at_25_random"] = ndcg_on_logged(data.frame[leaky.test], booster.predict(x[leaky.test]))
    return out


@dataclass(frozen=True)
class GateInputs:
    """What the decision compares, each pinned to the run's ``as_of`` where it can be."""

    metric: str  # the head's gate metric (see ``gate_metric``), higher is better
    value: float  # the challenger's
    versus_champion: Comparison | None  # the champion as it was at as_of, on the same rows
    serving_schema_hash: str  # what the online store serves for this head's feature service
    published_tower: str | None  # the tower serving's embeddings come from, now


GATE_METRIC = {"rsvp": "ndcg_at_25", "attend": "auc"}


def _gate_scores(data: TrainingData, head: Head, other: Head | None) -> np.ndarray:
    """What the gate ranks the test slice by: the product with the other head's champion (rsvp),
    the head's own probability (attend)."""
    test = data.frame[data.split.test]
    if data.head == "attend":
        return np.asarray(head.predict(test), dtype=float)
    scorer = Scorer(head, other)
    missing = [c for c in scorer.columns() if c not in test.columns]
    if missing:
        raise KeyError(f"gate frame lacks model inputs {missing[:5]}")
    return np.asarray(scorer.score(test)["score"], dtype=float)


def gate_metric(data: TrainingData, head: Head, other: Head | None) -> float:
    """One head's gate metric on its own temporal test slice, rows no model has trained on.

    ``rsvp``: NDCG@25 of the product with the other head's champion (``other``), on the logged
    test requests: what the feed ranks by. ``attend``: AUC on the attendance labels of its test
    RSVPs. Those labels are mature; the rsvp test slice's are not (attendance lands days after
    the event, so its grades hold RSVPs only and could never reward a better attendance head).
    """
    scores = _gate_scores(data, head, other)
    if data.head == "attend":
        return auc(data.y[data.split.test], scores)
    return ndcg_on_logged(data.frame[data.split.test], scores)


def gate_comparison(
    data: TrainingData, challenger: Head, champion: Head, other: Head | None, level: float, seed: int
) -> Comparison:
    """Both heads' gate metric on the same test slice and a paired bootstrap interval of the
    difference: resampling logged requests (rsvp: NDCG@25 per request) or test RSVPs (attend: AUC)."""
    test = data.frame[data.split.test]
    a, b = (_gate_scores(data, h, other) for h in (challenger, champion))
    if data.head == "attend":
        y = data.y[data.split.test]

        def statistic(i: np.ndarray) -> float:
            return auc(y[i], a[i]) - auc(y[i], b[i])

        values, units = (auc(y, a), auc(y, b)), len(y)
    else:
        per = [ndcg_per_request_on_logged(test, scores) for scores in (a, b)]
        diff = (per[0] - per[1]).to_numpy()

        def statistic(i: np.ndarray) -> float:
            return float(diff[i].mean())

        values, units = (float(per[0].mean()), float(per[1].mean())), len(diff)
    low, high = bootstrap_interval(statistic, units, level, seed=seed)
    return Comparison(*values, low=low, high=high, units=units, level=level)


def gate_inputs(settings: Settings, data: TrainingData, trained: Head) -> GateInputs:
    """The challenger's gate metric beside the champion's on the same rows, the champions as they
    were for data before ``as_of`` (``published.registry.champion_at``), not whatever is live today."""
    from pipelines.feast_store import get_store
    from published.feature_store import schema_hash
    from published.registry import champion_at
    from published.tower import current_tower_version

    registry.configure(settings)  # this writer creates the tracking store on a first run
    other = champion_at(settings, OTHER[data.head], data.as_of) if data.head == "rsvp" else None
    other_head = other[0] if other else None
    champion = champion_at(settings, data.head, data.as_of)
    level = settings.training.gates[data.head].level
    return GateInputs(
        metric=GATE_METRIC[data.head],
        value=gate_metric(data, trained, other_head),
        versus_champion=(
            gate_comparison(data, trained, champion[0], other_head, level, settings.training.seed)
            if champion
            else None
        ),
        serving_schema_hash=schema_hash(SERVICE_OF_HEAD[data.head], store=get_store(settings)),
        published_tower=current_tower_version(settings),
    )


def decide(
    trained: Head, metrics: dict[str, float], inputs: GateInputs, problems: list[str], gates: Gates
) -> Decision:
    """Every reason the challenger may not become champion (none: promote). Pure."""
    report = CandidateReport(
        ece=metrics["test_ece"],
        score_std=metrics["test_score_std"],
        schema_hash=trained.schema_hash,
        inputs_validated=not problems,
        quality_name={"ndcg_at_25": "NDCG@25", "auc": "AUC"}[inputs.metric],
    )
    decision = should_promote(report, inputs.versus_champion, gates, inputs.serving_schema_hash)
    reasons = [*decision.reasons, *(f"input validation: {p}" for p in problems)]
    if trained.uses_embeddings() and trained.tower_version != inputs.published_tower:
        reasons.append(
            f"trained on tower {trained.tower_version}'s embeddings, serving has tower {inputs.published_tower}'s"
        )
    reasons = list(dict.fromkeys(reasons))
    return Decision(promote=not reasons, reasons=reasons)


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


def log_run(
    settings: Settings,
    data: TrainingData,
    trained: Head,
    metrics: dict[str, float],
    decision: Decision,
    started: datetime | None = None,
) -> str:
    """One MLflow run: params, tags (schema hash, tower, data versions, decision), metrics,
    reliability and importance plots, and the model with its signature, sidecar and compiled trees.

    ``started`` (when ``train_head`` began) becomes the run's start time, so the duration the
    MLflow UI shows is the whole training run, not only the logging at its end.
    """
    import mlflow
    from lightgbm import __version__ as lgb_version
    from mlflow.models import infer_signature

    head, split, described = data.head, data.split, data.described
    registry.configure(settings)
    experiment = registry.ensure_experiment(settings, registry.experiment_name(settings, head))
    params = {**DEFAULT_PARAMS, **settings.training.lightgbm}
    xt, yt = data.x[split.test], data.y[split.test]
    seg_t = segments(xt)
    run_name = f"p_{head} as of {described['as_of']}"
    start_ms = None if started is None else int(started.timestamp() * 1000)
    created = registry.configure(settings).create_run(experiment, start_time=start_ms, run_name=run_name)
    with mlflow.start_run(run_id=created.info.run_id) as run:
        mlflow.log_params(
            {
                "head": head,
                "feature_service": SERVICE_OF_HEAD[head],
                "as_of": described["as_of"],
                "training_set_path": described.get("path", ""),
                "training_set_version": data.version,
                "seed": settings.training.seed,
                "calibration_start": split.calibration_start.isoformat(),
                "test_start": split.test_start.isoformat(),
                "keep_rate": data.correction.keep_rate,
                "injected_per_negative": round(data.correction.injected_per_negative, 6),
                **{f"lgb_{k}": v for k, v in params.items()},
                **first_stage_params(trained),
            }
        )
        mlflow.set_tags(
            {
                "feature_schema_hash": trained.schema_hash,
                "tower_version": str(trained.tower_version),
                "model_sha256": trained.model_sha256(),
                "training_set_version": str(data.version),
                "promotion.reason": decision.reason,
                **{f"data.{k}": str(v) for k, v in described["sources"].items()},
            }
        )
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)})
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            reliability = reliability_plot(
                yt, trained.predict(xt), seg_t, f"p_{head}: calibrated, test slice", d / "reliability.png"
            )
            reliability.to_csv(d / "reliability.csv", index=False)
            reliability_plot(
                yt, trained.raw(xt), seg_t, f"p_{head}: raw (no odds correction)", d / "reliability_raw.png"
            )
            importance_plot(trained.booster, f"p_{head}: feature importance", d / "importance.png").to_csv(
                d / "importance.csv", index=False
            )
            (d / "training_set.json").write_text(json.dumps(described, indent=1, sort_keys=True))
            (d / "decision.json").write_text(
                json.dumps({"promote": decision.promote, "reasons": decision.reasons}, indent=1)
            )
            mlflow.log_artifacts(str(d), artifact_path="report")
            trained.save(d / "head")
            compiled = _compile(trained, d / "head" / "compiled")
            head_files = [d / "head" / SIDECAR_FILE]
            if trained.first_stage is not None:
                head_files.append(d / "head" / FIRST_STAGE_FILE)
            mlflow.set_tag("compiled", "yes" if compiled else "no")
            example = xt.head(50)
            mlflow.lightgbm.log_model(
                trained.booster,
                name="model",
                # The raw booster's columns and output; the served probability is the head's
                # calibrated map of it (head.json).
                signature=infer_signature(example, np.asarray(trained.booster.predict(example))),
                extra_files=[*map(str, head_files), *map(str, compiled)],
                pip_requirements=[f"lightgbm=={lgb_version}"],
            )
        return str(run.info.run_id)


def register_and_promote(
    settings: Settings, data: TrainingData, run_id: str, decision: Decision
) -> tuple[str, dict[str, Any]]:
    """The run's model as a new registry version (``challenger``), promoted if the decision says."""
    version = registry.register(settings, run_id, data.head, data.as_of)
    moved = registry.promote(settings, data.head, str(version.version), decision.promote, decision.reason)
    return str(version.version), moved


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

    def step(i: int) -> None:
        if progress:
            progress(_STEPS[i], i, len(_STEPS))

    started = datetime.now(UTC)
    step(0)
    data = load_training_data(settings, head, as_of, training_set_version)
    step(1)
    booster = fit(settings, data)
    step(2)
    trained = calibrate(settings, data, booster)
    step(3)
    metrics = measure(data, trained)
    step(4)
    metrics.update(leak_diagnostic(settings, data, trained, metrics["test_auc"]))
    step(5)
    inputs = gate_inputs(settings, data, trained)
    metrics[f"gate_{inputs.metric}"] = inputs.value
    if inputs.versus_champion is not None:
        versus = inputs.versus_champion
        metrics[f"champion_gate_{inputs.metric}"] = versus.champion
        metrics[f"gate_{inputs.metric}_difference"] = versus.difference
        metrics[f"gate_{inputs.metric}_difference_low"] = versus.low
        metrics[f"gate_{inputs.metric}_difference_high"] = versus.high
        metrics["gate_units"] = float(versus.units)
    g = settings.training.gates[head]
    decision = decide(
        trained, metrics, inputs, data.problems, Gates(g.tolerance, g.max_ece, g.min_score_std, g.level)
    )
    step(6)
    run_id = log_run(settings, data, trained, metrics, decision, started)
    step(7)
    version, moved = register_and_promote(settings, data, run_id, decision)
    log.info("p_%s run %s v%s: %s", head, run_id, version, moved["reason"])
    return {
        "run_id": run_id,
        "version": version,
        "head": head,
        "as_of": data.described["as_of"],
        "training_set_version": data.version,
        "metrics": {
            k: (None if v is None or not np.isfinite(v) else round(float(v), 6)) for k, v in metrics.items()
        },
        "promoted": moved["promoted"],
        "champion": moved["champion"],
        "reason": moved["reason"],
        "model_sha256": trained.model_sha256(),
    }
