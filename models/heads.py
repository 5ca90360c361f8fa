"""The two LightGBM heads and the scorer that serves them (design: "The fix: two heads").

score = p_rsvp(u, e) * p_attend_given_rsvp(u, e), each head a pointwise logistic GBDT whose raw
output goes through the exact odds correction for how its negatives were sampled, then through a
per-segment isotonic map fit on a held-out temporal slice.

A head is saved as plain files: LightGBM's native text model and a JSON sidecar (feature list,
schema hash, odds correction, calibrators). Loading one never unpickles anything. A head may also
carry its trees compiled to native code (``models.compiled``), which then score in LightGBM's place.

The p_rsvp head also carries the funnel's first stage (``FirstStage``): a small forest on a few of
its columns, distilled from its raw score, that ranks every candidate so both full heads score only
the best tenth.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
import pandas as pd

from models.calibration import SamplingCorrection, SegmentCalibrators
from models.compiled import FIRST_STAGE_TREES, CompiledForest, compile_forests, load_compiled

HEADS: tuple[str, ...] = ("rsvp", "attend")
SERVICE_OF_HEAD = {"rsvp": "p_rsvp_v1", "attend": "p_attend_v1"}
EMBEDDING_COLUMN = "embedding"
MODEL_FILE = "model.lgb"
SIDECAR_FILE = "head.json"
FIRST_STAGE_FILE = "first_stage.lgb"

# Pointwise logistic; shallow-ish trees with strong leaves, because the median user has 3 RSVPs.
DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "binary",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 50,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "num_boost_round": 300,
    "early_stopping_round": 30,
    "verbose": -1,
    # Same inputs, same model: retraining from a recorded training set reproduces it exactly.
    "deterministic": True,
    "force_row_wise": True,
}

# History depth buckets for calibration segments: cold (no RSVP yet), light (1-3), regular (4+).
_DEPTH_EDGES = (1, 4)
_DEPTH_NAMES = ("cold", "light", "regular")
_SEGMENT_NAMES = np.array([f"{price}|{depth}" for price in ("free", "paid") for depth in _DEPTH_NAMES])


def segment_of(is_free: npt.ArrayLike, history_depth: npt.ArrayLike) -> np.ndarray:
    """Calibration segment per row: ``free|cold``, ``paid|regular``, ..."""
    free = np.asarray(pd.to_numeric(pd.Series(np.asarray(is_free)), errors="coerce").fillna(0), dtype=float)
    depth = np.nan_to_num(
        np.asarray(pd.to_numeric(pd.Series(np.asarray(history_depth)), errors="coerce"), float)
    )
    # One pick from the six names (numpy's string concatenation cost ~0.5 ms per 1,500 rows).
    depth_code = np.searchsorted(_DEPTH_EDGES, depth, side="right")
    return _SEGMENT_NAMES[np.where(free > 0, 0, len(_DEPTH_NAMES)) + depth_code]


def segments(x: pd.DataFrame) -> np.ndarray:
    """The calibration segment of each model row (both services carry both inputs)."""
    return segment_of(x["is_free"], x["history_depth"])


def model_columns(service_features: list[str], embedding_dim: int) -> list[str]:
    """The model's input columns: the service's features with the embedding spread into numbers."""
    out: list[str] = []
    for name in service_features:
        if name == EMBEDDING_COLUMN:
            out.extend(f"{EMBEDDING_COLUMN}_{i}" for i in range(embedding_dim))
        else:
            out.append(name)
    return out


def to_model_frame(frame: pd.DataFrame, service_features: list[str], embedding_dim: int) -> pd.DataFrame:
    """Feast's frame (ints with None, the embedding as a list) -> float64 columns in model order."""
    columns: dict[str, np.ndarray] = {}
    for name in service_features:
        if name == EMBEDDING_COLUMN:
            matrix = np.full((len(frame), embedding_dim), np.nan)
            for i, vec in enumerate(frame[name].to_numpy()):
                if vec is not None and len(vec) == embedding_dim:
                    matrix[i] = np.asarray(vec, dtype=float)
            for j in range(embedding_dim):
                columns[f"{EMBEDDING_COLUMN}_{j}"] = matrix[:, j]
        else:
            columns[name] = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
    return pd.DataFrame(columns, index=frame.index)


def fit_booster(
    x_train: pd.DataFrame,
    y_train: npt.ArrayLike,
    x_valid: pd.DataFrame,
    y_valid: npt.ArrayLike,
    params: dict[str, Any],
    seed: int,
    num_threads: int,
) -> lgb.Booster:
    """Train one head, early-stopped on the validation (calibration) slice."""
    p = {**DEFAULT_PARAMS, **params, "seed": seed, "num_threads": num_threads}
    rounds = int(p.pop("num_boost_round"))
    train = lgb.Dataset(x_train, label=np.asarray(y_train, dtype=float), free_raw_data=False)
    valid = lgb.Dataset(x_valid, label=np.asarray(y_valid, dtype=float), reference=train)
    return lgb.train(p, train, num_boost_round=rounds, valid_sets=[valid], valid_names=["calibration"])


# The first stage: FIRST_STAGE_TREES trees of a few leaves on the head's FIRST_STAGE_COLUMNS
# columns of highest total gain, fit (least squares) to the head's raw score. Serving assembles
# only those columns for every candidate, and a 15-leaf tree is half as deep as a 255-leaf one.
FIRST_STAGE_COLUMNS = 16
FIRST_STAGE_PARAMS: dict[str, Any] = {
    "objective": "regression",
    "learning_rate": 0.2,
    "num_leaves": 15,
    "min_data_in_leaf": 50,
    "verbose": -1,
    "deterministic": True,
    "force_row_wise": True,
}
FIRST_STAGE_MAX_ROWS = 200_000  # distilled on an evenly spaced sample of the training slice


@dataclass(frozen=True)
class FirstStage:
    """The funnel's first stage: ``booster`` scores a matrix of ``columns`` (a subset of its
    head's, in this order) with a raw score that orders candidates roughly as the head does."""

    booster: lgb.Booster
    columns: list[str]


def distill_first_stage(
    booster: lgb.Booster, columns: list[str], x: pd.DataFrame, seed: int, num_threads: int
) -> FirstStage:
    """A first stage for the head ``booster`` (reading ``columns``), fit on rows ``x``.

    Its target is the head's own raw score, not the labels: the first stage's only job is to keep
    what the head would rank high. It reads the head's ``FIRST_STAGE_COLUMNS`` columns of highest
    total split gain (ties: the head's column order)."""
    gain = booster.feature_importance(importance_type="gain")
    best = sorted(np.argsort(-gain, kind="stable")[:FIRST_STAGE_COLUMNS])
    picked = [columns[i] for i in best]
    if len(x) > FIRST_STAGE_MAX_ROWS:
        x = x.iloc[np.linspace(0, len(x) - 1, FIRST_STAGE_MAX_ROWS).astype(np.int64)]
    target = np.asarray(booster.predict(x[columns], raw_score=True, num_threads=num_threads), dtype=float)
    params = {**FIRST_STAGE_PARAMS, "seed": seed, "num_threads": num_threads}
    data = lgb.Dataset(x[picked], label=target, free_raw_data=False)
    return FirstStage(lgb.train(params, data, num_boost_round=FIRST_STAGE_TREES), picked)


@dataclass(frozen=True)
class Head:
    """One trained head: the booster plus everything needed to turn its output into a probability."""

    name: str  # "rsvp" | "attend"
    booster: lgb.Booster
    features: list[str]  # Feast feature names of the service, in order
    columns: list[str]  # model input columns (embedding spread)
    embedding_dim: int
    schema_hash: str
    correction: SamplingCorrection
    calibrators: SegmentCalibrators | None
    # The content tower whose vectors the embedding columns held in training (None: no embedding
    # input). Serving refuses the head beside another tower's vectors: same shape, other meaning.
    tower_version: str | None = None
    # The funnel's first stage (p_rsvp only; None for a head trained before it existed, whose
    # first FIRST_STAGE_TREES trees then stand in).
    first_stage: FirstStage | None = None
    # Native code for "full" (every tree) and "first" (the first stage, raw score).
    compiled: dict[str, CompiledForest] = field(default_factory=dict, compare=False, repr=False)

    def uses_embeddings(self) -> bool:
        return any(c.startswith(f"{EMBEDDING_COLUMN}_") for c in self.columns)

    def _matrix(self, x: pd.DataFrame | np.ndarray) -> np.ndarray:
        """The model's input matrix; an array is taken to hold ``columns`` already, in order."""
        if isinstance(x, np.ndarray):
            if x.ndim != 2 or x.shape[1] != len(self.columns):
                raise ValueError(f"{self.name} head reads {len(self.columns)} columns, got shape {x.shape}")
            return x
        return x[self.columns].to_numpy(dtype=np.float64)

    def raw(self, x: pd.DataFrame, num_threads: int = 0) -> np.ndarray:
        """The booster's probability in the training population (before any correction)."""
        if "full" in self.compiled:
            return self.compiled["full"].predict(self._matrix(x), num_threads)
        return np.asarray(self.booster.predict(x[self.columns], num_threads=num_threads), dtype=float)

    def first_stage_columns(self) -> list[str]:
        """The columns the first stage reads, in the order its matrix holds them."""
        return self.first_stage.columns if self.first_stage is not None else self.columns

    def first_stage_raw(self, x: pd.DataFrame | np.ndarray, num_threads: int = 0) -> np.ndarray:
        """The first stage's raw score; ``x`` a frame, or a matrix of ``first_stage_columns()``."""
        columns = self.first_stage_columns()
        if isinstance(x, pd.DataFrame):
            x = x[columns].to_numpy(dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(columns):
            raise ValueError(f"{self.name}'s first stage reads {len(columns)} columns, got shape {x.shape}")
        if "first" in self.compiled:
            return self.compiled["first"].predict(x, num_threads)
        if self.first_stage is not None:
            raw = self.first_stage.booster.predict(x, raw_score=True, num_threads=num_threads)
        else:
            raw = self.booster.predict(
                x, num_iteration=FIRST_STAGE_TREES, raw_score=True, num_threads=num_threads
            )
        return np.asarray(raw, dtype=float)

    def compile_to(self, directory: Path) -> Path:
        """Compile this head's trees into ``directory`` (at registration); returns the manifest."""
        forests: dict[str, tuple[lgb.Booster, int | None, bool]] = {"full": (self.booster, None, False)}
        if self.first_stage is not None:
            forests["first"] = (self.first_stage.booster, None, True)
        elif self.name == "rsvp" and self.booster.num_trees() > FIRST_STAGE_TREES:
            forests["first"] = (self.booster, FIRST_STAGE_TREES, True)
        return compile_forests(forests, directory, self.model_sha256())

    def with_compiled(self, manifest: Path) -> tuple[Head, str | None]:
        """This head scoring with the compiled forests of ``manifest``, or unchanged and why not."""
        forests, why = load_compiled(manifest, self.model_sha256())
        return (replace(self, compiled=forests), None) if forests else (self, why)

    def corrected(self, x: pd.DataFrame, num_threads: int = 0) -> np.ndarray:
        return self.correction.apply(self.raw(x, num_threads))

    def predict(self, x: pd.DataFrame, num_threads: int = 0) -> np.ndarray:
        """Calibrated probability in the natural population (segments read from ``x``)."""
        p = self.corrected(x, num_threads)
        return self.calibrators(p, segments(x)) if self.calibrators is not None else p

    def model_sha256(self) -> str:
        """The booster's text, and the first stage's after it when there is one."""
        text = self.booster.model_to_string()
        if self.first_stage is not None:
            text += self.first_stage.booster.model_to_string()
        return hashlib.sha256(text.encode()).hexdigest()

    def sidecar(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "features": self.features,
            "columns": self.columns,
            "embedding_dim": self.embedding_dim,
            "schema_hash": self.schema_hash,
            "tower_version": self.tower_version,
            "correction": {
                "keep_rate": self.correction.keep_rate,
                "injected_per_negative": self.correction.injected_per_negative,
            },
            "calibrators": self.calibrators.to_dict() if self.calibrators is not None else None,
            "first_stage": None if self.first_stage is None else {"columns": self.first_stage.columns},
            "model_sha256": self.model_sha256(),
        }

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(directory / MODEL_FILE))
        if self.first_stage is not None:
            self.first_stage.booster.save_model(str(directory / FIRST_STAGE_FILE))
        (directory / SIDECAR_FILE).write_text(json.dumps(self.sidecar(), indent=1))
        return directory

    @classmethod
    def load(cls, directory: Path, sidecar: Path | None = None) -> Head:
        """From LightGBM's text format and JSON only; refuses a model whose bytes changed.
        The first stage's model is read from beside the sidecar."""
        sidecar = sidecar or Path(directory) / SIDECAR_FILE
        meta = json.loads(sidecar.read_text())
        booster = lgb.Booster(model_file=str(Path(directory) / MODEL_FILE))
        first = meta.get("first_stage")
        first_stage = None
        if first is not None:
            first_stage = FirstStage(
                lgb.Booster(model_file=str(sidecar.parent / FIRST_STAGE_FILE)), list(first["columns"])
            )
        cal = meta["calibrators"]
        head = cls(
            name=meta["name"],
            booster=booster,
            features=list(meta["features"]),
            columns=list(meta["columns"]),
            embedding_dim=int(meta["embedding_dim"]),
            schema_hash=meta["schema_hash"],
            correction=SamplingCorrection(**meta["correction"]),
            calibrators=SegmentCalibrators.from_dict(cal) if cal is not None else None,
            tower_version=meta.get("tower_version"),
            first_stage=first_stage,
        )
        if head.model_sha256() != meta["model_sha256"]:
            raise ValueError(f"{directory}: the model files do not match the hash their sidecar recorded")
        return head


@dataclass(frozen=True)
class Scorer:
    """What the feed ranks by: p_rsvp x p_attend_given_rsvp, either head optional for baselines."""

    rsvp: Head | None
    attend: Head | None

    def heads(self) -> list[Head]:
        return [h for h in (self.rsvp, self.attend) if h is not None]

    def columns(self) -> list[str]:
        return sorted({c for h in self.heads() for c in h.columns})

    def backend(self) -> str:
        """``compiled`` when every head scores with native code, else ``lightgbm``."""
        heads = [h for h in (self.rsvp, self.attend) if h is not None]
        return "compiled" if heads and all("full" in h.compiled for h in heads) else "lightgbm"

    def score(self, x: pd.DataFrame, num_threads: int = 0) -> dict[str, np.ndarray]:
        """``p_rsvp``, ``p_attend`` (1 where a head is absent) and their product ``score``."""
        ones = np.ones(len(x))
        p_rsvp = self.rsvp.predict(x, num_threads) if self.rsvp is not None else ones
        p_attend = self.attend.predict(x, num_threads) if self.attend is not None else ones
        return {"p_rsvp": p_rsvp, "p_attend": p_attend, "score": p_rsvp * p_attend}
