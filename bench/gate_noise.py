"""How much of a p_rsvp promotion decision is the test slice's noise.

    python bench/gate_noise.py --training-set-version 7 [--resamples 2000]

Reads a recorded p_rsvp training set of ``$TURNOUT_HOME``, the challenger the run trained on it
and the champions the gate compared it with (``champion_at`` its ``as_of``), and scores the gate's
test rows with both, as ``train.gate_metric`` does. Then NDCG@25 per logged request
(``models.metrics.ndcg_per_group``, whose mean is the gate's metric) and a bootstrap over
requests of the paired difference (``models.metrics.bootstrap_interval``, as the gate now does),
overall and by the model that served the request (read from the landing zone's impressions: the
history's simulated policy, or a champion in the loop).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from conf import Settings, load_settings


def served_by(landing: Path) -> dict[str, str]:
    """request_id -> the model version its impressions name (unparseable lines are skipped)."""
    out: dict[str, str] = {}
    for path in landing.glob("impressions/*/*.jsonl"):
        for line in path.open():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "model_version" in row and "request_id" in row:
                version = str(row["model_version"])
                out[str(row["request_id"])] = "history policy" if version.startswith("policy") else version
    return out


def gate_noise(settings: Settings, training_set_version: int, resamples: int, seed: int = 0) -> pd.DataFrame:
    """One row per group of requests: both heads' mean NDCG@25, the difference, its 95% interval."""
    import mlflow

    from models import metrics
    from models.heads import Scorer
    from pipelines.training import registry as training_registry
    from pipelines.training.report import logged_grades
    from pipelines.training.train import load_training_data
    from published.registry import champion_at, load_version, model_name

    training_registry.configure(settings)
    data = load_training_data(settings, "rsvp", None, training_set_version)
    test = data.frame[data.split.test]
    attend = champion_at(settings, "attend", data.as_of)
    champion = champion_at(settings, "rsvp", data.as_of)
    if champion is None:
        raise SystemExit(f"no p_rsvp champion before {data.as_of}: nothing was compared")
    client = mlflow.MlflowClient()
    name = model_name(settings, "rsvp")
    versions = [
        v
        for v in client.search_model_versions(f"name='{name}'")
        if v.run_id
        and client.get_run(v.run_id).data.params.get("training_set_version") == str(training_set_version)
    ]
    if not versions:
        raise SystemExit(f"no registered p_rsvp version was trained on training set {training_set_version}")
    challenger, _ = load_version(settings, "rsvp", versions[0].version)
    other = attend[0] if attend else None
    scored = pd.DataFrame(
        {
            "request_id": test["request_id"].to_numpy(),
            "grade": logged_grades(test),
            "champion": Scorer(champion[0], other).score(test)["score"],
            "challenger": Scorer(challenger, other).score(test)["score"],
        }
    )
    both = pd.DataFrame({h: metrics.ndcg_per_group(scored, h) for h in ("champion", "challenger")})
    source = served_by(settings.home / "landing")
    both["served_by"] = [source.get(r, "unknown") for r in both.index]
    rows = []
    for group, part in [("all", both), *both.groupby("served_by")]:
        diff = (part["challenger"] - part["champion"]).to_numpy()

        def mean_difference(i: np.ndarray, d: np.ndarray = diff) -> float:
            return float(d[i].mean())

        low, high = metrics.bootstrap_interval(mean_difference, len(diff), resamples=resamples, seed=seed)
        rows.append(
            {
                "as_of": data.as_of.isoformat(),
                "champion": f"v{champion[1].version}",
                "challenger": f"v{versions[0].version}",
                "served_by": group,
                "requests": len(part),
                "champion_ndcg": part["champion"].mean(),
                "challenger_ndcg": part["challenger"].mean(),
                "difference": diff.mean(),
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--training-set-version", type=int, required=True)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    table = gate_noise(load_settings(), args.training_set_version, args.resamples)
    print(table.to_markdown(index=False, floatfmt=".4f"))


if __name__ == "__main__":
    main()
