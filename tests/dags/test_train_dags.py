"""The ``train_rsvp`` and ``train_attend`` DAGs: wiring, the as-of rules, and real runs.

The runs use their own ``TURNOUT_HOME`` (a small simulated world built for training), so they
never share a lake with the other DAG tests.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from tests.dags.conftest import AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

pytestmark = pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning")


def test_train_dags_are_wired_as_documented(dagbag: DagBag) -> None:
    from _common import GOLD_FEATURES

    rsvp, attend = dagbag.get_dag("train_rsvp"), dagbag.get_dag("train_attend")
    assert rsvp is not None and attend is not None
    # train_rsvp waits on the asset the features DAG updates after materializing.
    assert [a.name for a in rsvp.timetable.asset_condition.objects] == [GOLD_FEATURES.name]
    features = dagbag.get_dag("features")
    assert features is not None and GOLD_FEATURES in features.task_dict["update_features"].outlets
    assert attend.task_dict["train"].upstream_task_ids == {"as_of", "wait_for_features"}
    assert attend.task_dict["wait_for_features"].mode == "reschedule"
    for dag in (rsvp, attend):
        assert dag.max_active_runs == 1 and not dag.catchup and dag.doc_md


def test_as_of_comes_from_the_asset_then_the_conf_then_the_interval() -> None:
    import train_heads
    from airflow.sdk.exceptions import AirflowFailException

    events = {
        "gold.features": [
            SimpleNamespace(extra={"end": "2026-11-08T23:00:00+00:00"}),
            SimpleNamespace(extra={"end": "2026-11-09T00:00:00+00:00"}),
        ]
    }
    assert train_heads.resolve_as_of({"triggering_asset_events": events}) == "2026-11-09T00:00:00+00:00"
    by_hand = {"dag_run": SimpleNamespace(conf={"as_of": "2026-11-09T00:00Z"})}
    assert train_heads.resolve_as_of(by_hand) == "2026-11-09T00:00:00+00:00"
    for bad in ("yesterday", "2026-11-09T00:00"):
        with pytest.raises(AirflowFailException):
            train_heads.resolve_as_of({"dag_run": SimpleNamespace(conf={"as_of": bad})})


@pytest.mark.integration
@pytest.mark.timeout(2400)  # builds its own small world first
def test_hourly_rsvp_then_weekly_attend_train_and_promote(  # type: ignore[no-untyped-def]
    airflow_env: AirflowTestEnv, dagbag: DagBag, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    from conf import load_settings
    from pipelines.training.registry import alias_version, configure, model_name
    from simulator import SimulationConfig
    from tests.dags.test_index_dag import without_retries
    from tests.integration.training_world import build_training_world

    monkeypatch.setenv("TURNOUT_HOME", str(tmp_path))
    settings = load_settings("local")
    as_of = build_training_world(settings, SimulationConfig(users=400, days=18, seed=31))
    client: MlflowClient = configure(settings)

    with without_retries(dagbag, "train_rsvp") as dag:
        run = dag.test(run_conf={"as_of": as_of.isoformat()})
        assert run.state == "success"
    rsvp = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert rsvp["head"] == "rsvp" and rsvp["version"] == "1"
    # The first version faces no champion; whether it is promoted depends on its ECE gate,
    # and the registry must agree with what the run reported either way.
    champion = alias_version(client, model_name(settings, "rsvp"), "champion")
    assert (champion is not None and champion.run_id == rsvp["run_id"]) == rsvp["promoted"]

    # Triggered by hand for a past week: the conf's as_of wins over the interval.
    with without_retries(dagbag, "train_attend") as dag:
        run = dag.test(logical_date=as_of, run_conf={"as_of": as_of.isoformat()})
        assert run.state == "success"
    attend = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert attend["head"] == "attend" and attend["metrics"]["test_auc"] is not None
    fresh = run.get_task_instance("wait_for_features").xcom_pull(task_ids="wait_for_features")
    assert fresh["fresh"] and set(fresh["newest"]) == {"event_dynamics", "user_features"}
