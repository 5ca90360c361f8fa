"""A head's trees compiled to native code (lleaves, via LLVM) when the model is registered.

Tree scoring is the feed's hot spot: LightGBM's own predictor walks its trees generically, while
lleaves emits one branch-per-node function per forest, two to five times faster on this machine,
with the same predictions (a parity test holds them equal). Compiling a 300-tree head takes
seconds to minutes, so it happens once, beside registration, and the object code travels with the
model as an artifact; serving only loads it, never compiles.

Two forests per head: ``full`` (every tree, LightGBM's probability) and, for the p_rsvp head,
``first`` (raw score), the funnel's cheap first stage: the small forest distilled from the head
(``models.heads.FirstStage``), or for a head trained before there was one, its first
``FIRST_STAGE_TREES`` trees.
Object code is specific to the CPU it was compiled for: the manifest records the target, and a
host that differs loads nothing and keeps LightGBM's predictor (logged, and shown by /healthz).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np

log = logging.getLogger(__name__)

# The funnel's first stage (design/large-scale-recsys.md): a forest of this many trees ranks every
# candidate and the best FIRST_STAGE_KEEP of up to 15,000 go on to both full heads. Serving runs
# it; the evaluation prices what it cuts.
FIRST_STAGE_TREES = 30
FIRST_STAGE_KEEP = 1500
MANIFEST_FILE = "compiled.json"


def host_target() -> str:
    """The LLVM triple, CPU and feature set object code is compiled for on this host."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    digest = hashlib.sha256(features.encode()).hexdigest()[:12]
    return f"{llvm.get_process_triple()}/{llvm.get_host_cpu_name()}/{digest}"


@dataclass
class CompiledForest:
    """Leading ``trees`` trees of a booster as native code; ``raw`` scores or probabilities."""

    model: Any  # lleaves.Model, compiled
    trees: int
    raw: bool
    n_features: int

    def predict(self, matrix: np.ndarray, num_threads: int = 0) -> np.ndarray:
        """Like ``Booster.predict``: ``num_threads`` 0 uses every core."""
        return np.asarray(self.model.predict(matrix, n_jobs=num_threads or None), dtype=float)


def compile_forests(
    forests: dict[str, tuple[lgb.Booster, int | None, bool]], directory: Path, model_sha256: str
) -> Path:
    """Compile each named ``(booster, leading trees or None for all, raw score)`` into
    ``directory``; returns the manifest path. ``model_sha256`` names the model they belong to."""
    import lleaves

    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"target": host_target(), "model_sha256": model_sha256, "forests": {}}
    for name, (booster, trees, raw) in forests.items():
        started = time.perf_counter()
        text = directory / f"{name}.txt"
        booster.save_model(str(text), num_iteration=trees)
        model = lleaves.Model(model_file=str(text))
        model.compile(cache=str(directory / f"{name}.o"), raw_score=raw)
        manifest["forests"][name] = {
            "trees": model.num_trees(),
            "raw_score": raw,
            "compile_s": round(time.perf_counter() - started, 2),
        }
        log.info(
            "compiled %s forest (%d trees) in %.1f s", name, model.num_trees(), time.perf_counter() - started
        )
    path = directory / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=1))
    return path


def load_compiled(manifest_path: Path, model_sha256: str) -> tuple[dict[str, CompiledForest], str | None]:
    """The forests a manifest names, or none and why (another model's code, or another CPU's)."""
    import lleaves

    manifest = json.loads(manifest_path.read_text())
    if manifest.get("model_sha256") != model_sha256:
        return {}, f"{manifest_path}: compiled from another model than the one loaded"
    target = host_target()
    if manifest.get("target") != target:
        return {}, f"compiled for {manifest.get('target')}, this host is {target}: scoring with LightGBM"
    forests: dict[str, CompiledForest] = {}
    for name, spec in manifest["forests"].items():
        model = lleaves.Model(model_file=str(manifest_path.parent / f"{name}.txt"))
        model.compile(cache=str(manifest_path.parent / f"{name}.o"), raw_score=bool(spec["raw_score"]))
        forests[name] = CompiledForest(
            model, int(spec["trees"]), bool(spec["raw_score"]), model.num_feature()
        )
    return forests, None
