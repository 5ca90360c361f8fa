"""A moved ``$TURNOUT_HOME`` works after ``turnout relocate``, and training refuses it before.

A home with a real MLflow SQLite store (an experiment, a run with an artifact, a logged model
registered as version 1) and a real Feast registry is copied elsewhere and the original deleted,
so anything still reading or writing the old paths fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_settings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning"),
]

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


class _Constant:  # a tiny pyfunc model: what is registered matters here, not what it predicts
    def predict(self, context: Any, model_input: list[Any]) -> list[Any]:
        return model_input


def _relocate(home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNOUT_")}
    env["TURNOUT_HOME"] = str(home)
    done = subprocess.run(
        [BIN / "turnout", "relocate", "--json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_a_moved_home_is_refused_by_training_then_relocated_and_works(tmp_path: Path) -> None:
    import mlflow
    from mlflow.pyfunc import PythonModel

    from pipelines.features.definitions import apply_definitions
    from pipelines.training.registry import configure, ensure_experiment, experiment_name, model_name
    from pipelines.training.relocate import HomeMoved
    from published.feature_store import open_online_store

    old_home, new_home = tmp_path / "old" / "home", tmp_path / "new" / "home"
    old = make_settings(old_home)
    name = experiment_name(old, "rsvp")
    configure(old)
    with mlflow.start_run(experiment_id=ensure_experiment(old, name)) as run:
        mlflow.log_text("why it was promoted", "report/decision.txt")
        model = mlflow.pyfunc.log_model(name="model", python_model=type("M", (_Constant, PythonModel), {})())
    mlflow.register_model(model.model_uri, model_name(old, "rsvp"))
    apply_definitions(old)

    shutil.copytree(old_home, new_home)
    shutil.rmtree(old_home)
    new = make_settings(new_home)
    with pytest.raises(HomeMoved, match="turnout relocate"):
        ensure_experiment(new, name)

    report = _relocate(new_home)
    assert report["mlflow"]["from"] == old.mlflow.artifact_root
    assert report["mlflow"]["to"] == new.mlflow.artifact_root
    assert all(n >= 1 for n in report["mlflow"]["rows"].values()), report
    assert report["feast"]["applied"] and report["feast"]["changed"], report

    client = configure(new)
    assert client.get_run(run.info.run_id).info.artifact_uri.startswith(new.mlflow.artifact_root)
    # The registered version and the run's report load from the new home (the old one is gone).
    version = mlflow.artifacts.download_artifacts(
        f"models:/{model_name(new, 'rsvp')}/1", dst_path=str(tmp_path / "v1")
    )
    assert (Path(version) / "MLmodel").is_file()
    note = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="report/decision.txt")
    assert Path(note).read_text() == "why it was promoted"
    # New runs write under the new home.
    with mlflow.start_run(experiment_id=ensure_experiment(new, name)) as second:
        mlflow.log_text("x", "x.txt")
    assert (Path(new.mlflow.artifact_root) / name / second.info.run_id / "artifacts" / "x.txt").is_file()
    # Feast's sources read the new home's lake.
    paths = [s.path for s in open_online_store(new).list_data_sources() if getattr(s, "path", None)]
    assert paths and all(p.startswith(str(new_home)) for p in paths), paths

    again = _relocate(new_home)
    assert again["mlflow"]["from"] is None and not again["feast"]["applied"]
