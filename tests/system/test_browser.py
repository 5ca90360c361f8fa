"""The MLflow UI an analyst opens, rendered by a real headless browser (Debian's chromium).

``turnout mlflow-ui`` serves the shared trained world's tracking store (the one ``make up`` serves
for a home); the browser opens the promoted p_rsvp run and checks that what an analyst comes for
is on the page: its metrics with their values, why it was promoted, and the reliability plot drawn
from its artifacts. (The Airflow UI's DAG list is checked in ``test_scheduler.py``, on the
deployment that test starts.) Select it with ``pytest -k browser``.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.training_world import TrainedWorld
from tests.system.browser import browser_page, needs_chromium, screenshot
from tests.system.processes import free_port, running

pytestmark = [pytest.mark.integration, needs_chromium, pytest.mark.timeout(900)]

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


@pytest.fixture
def mlflow_ui(trained_world: TrainedWorld, tmp_path: Path) -> Iterator[str]:
    base = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNOUT_")}
    env["TURNOUT_HOME"] = str(trained_world.settings.home)
    args: list[str | Path] = [BIN / "turnout", "mlflow-ui", "--port", base.rsplit(":", 1)[1]]
    with running(args, env, tmp_path / "mlflow-ui.log", lambda: _answers(f"{base}/health"), 180):
        yield base


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5):
        return True


def test_browser_shows_the_promoted_run_with_its_metrics_and_reliability_plot(
    trained_world: TrainedWorld, mlflow_ui: str, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=trained_world.settings.mlflow.tracking_uri)
    run = client.get_run(trained_world.rsvp["run_id"])
    auc = run.data.metrics["test_auc"]

    with browser_page() as page:
        page.goto(f"{mlflow_ui}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}")
        page.get_by_text("test_auc", exact=True).wait_for()
        close = page.get_by_role("button", name="Close")  # MLflow 3.17's assistant panel
        if close.count():
            close.first.click()
        body = page.inner_text("body")
        assert run.info.run_name in body
        assert f"{auc}"[:6] in body, f"test_auc {auc} not on the page"
        assert "promotion.reason" in body and run.data.tags["promotion.reason"] in body
        screenshot(page, "mlflow-run.png", tmp_path)

        page.get_by_role("tab", name="Artifacts").click()
        page.get_by_text("report", exact=True).first.click()
        page.get_by_text("reliability.png", exact=True).first.click()
        # The preview is an <img> of the fetched artifact, drawn once it has decoded.
        page.wait_for_function(
            "() => [...document.images].some(i => i.src.startsWith('blob:') && i.naturalWidth > 300)"
        )
        assert page.get_by_text("report/reliability.png").count() > 0
        page.get_by_text("importance.png", exact=True).wait_for()  # the rest of the report listed
        screenshot(page, "mlflow-reliability.png", tmp_path)
