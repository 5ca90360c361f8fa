"""The Feast repository as declarations: names, contracts, crosses and hashes, without engines."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from conf import load_settings
from tests.conftest import make_settings

pytestmark = pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning")


def _udf(view: Any) -> Any:
    return view.feature_transformation.udf


def test_one_affinity_feature_per_landing_category() -> None:
    from contracts.landing import CATEGORIES
    from features.views import AFFINITY_FEATURES, user_features

    assert len(CATEGORIES) == 16 and tuple(f"aff_{c}" for c in CATEGORIES) == AFFINITY_FEATURES
    assert set(AFFINITY_FEATURES) <= {f.name for f in user_features.features}


def test_every_gold_source_is_a_delta_lake_template_with_both_stamps() -> None:
    from features import repo
    from features.sources import LAKE_ROOT_PLACEHOLDER

    assert len(repo.GOLD_SOURCES) == len(repo.FEATURE_VIEWS) == 9
    for source in repo.GOLD_SOURCES:
        assert source.timestamp_field == "event_timestamp"
        assert source.created_timestamp_column == "created"
        assert source.table_format is not None and source.table_format.format_type.value == "delta"
        assert source.path == f"{LAKE_ROOT_PLACEHOLDER}/gold/{source.tags['table']}"
    for view in repo.FEATURE_VIEWS:
        assert view.ttl is not None and view.ttl > timedelta(0), view.name
        assert view.entity_columns, f"{view.name}: join keys should be declared, not inferred"


def test_services_are_versioned_per_head_and_collision_free() -> None:
    from features import repo
    from published.feature_store import service_feature_names

    assert {s.name for s in repo.FEATURE_SERVICES} == {"p_rsvp_v1", "p_attend_v1"}
    for service in repo.FEATURE_SERVICES:
        assert re.fullmatch(r"[a-z_]+_v[0-9]+", service.name)
        names = service_feature_names(service)
        # Feast returns short names: two features with one name would silently shadow each other.
        assert len(names) == len(set(names)), service.name
        # Model inputs are numbers: no ids, cells, raw positions or instants.
        assert not {n for n in names if n.endswith(("_id", "_key", "cell5", "cell7", "_lat", "_lng"))}
    rsvp = service_feature_names(repo.services.p_rsvp_v1)
    assert "embedding" in rsvp and "distance_km" in rsvp and "category_affinity" in rsvp
    assert "friends_going_bucket" in service_feature_names(repo.services.p_attend_v1)


def test_schema_hash_is_stable_per_service_and_moves_with_a_name_or_a_type() -> None:
    from feast import FeatureService, FeatureView, Field
    from feast.types import Float32

    from features import entities, views
    from published.feature_store import schema_hash, service_schema_hash

    rsvp, attend = schema_hash("p_rsvp_v1"), schema_hash("p_attend_v1")
    assert rsvp == schema_hash("p_rsvp_v1") and len(rsvp) == 64
    assert rsvp != attend
    original = views.event_dynamics
    retyped = FeatureView(
        name=original.name,
        entities=[entities.event],
        ttl=original.ttl,
        schema=[Field(name=f.name, dtype=Float32) if f.name == "fill_rate" else f for f in original.schema],
        source=original.batch_source,
    )
    base = service_schema_hash(FeatureService(name="a", features=[views.event_dynamics]))
    assert base == service_schema_hash(FeatureService(name="b", features=[views.event_dynamics]))
    assert base != service_schema_hash(FeatureService(name="a", features=[retyped]))
    assert base != service_schema_hash(
        FeatureService(name="a", features=[views.event_dynamics[["fill_rate"]]])
    )
    with pytest.raises(KeyError):
        schema_hash("p_rsvp_v0")


def _crosses(**columns: list[Any]) -> dict[str, list[Any]]:
    from features.crosses import request_crosses

    return dict(_udf(request_crosses)(columns))


def test_request_crosses_distance_buckets_lead_time_and_local_hour_of_week() -> None:
    mile = 1.609344
    # Due north along a meridian: 1 degree of latitude = 111.195 km on the mean sphere.
    km_per_deg = 2 * math.pi * 6371.0088 / 360
    just = [d * mile / km_per_deg for d in (1.99, 2.01, 4.99, 5.01, 19.99, 20.01, 39.99, 40.01)]
    n = len(just)
    # Monday 2026-03-02 00:30 in San Francisco (UTC-8) is 08:30 UTC.
    monday_0030_local = datetime(2026, 3, 2, 8, 30, tzinfo=UTC).timestamp()
    out = _crosses(
        request_lat=[0.0] * n,
        request_lng=[0.0] * n,
        venue_lat=just,
        venue_lng=[0.0] * n,
        request_ts=[monday_0030_local] * n,
        start_ts=[monday_0030_local + 36 * 3600] * n,
        request_utc_offset_min=[-480] * n,
    )
    assert out["distance_bucket"] == [0, 1, 1, 2, 3, 4, 4, 5]
    assert out["distance_km"][0] == pytest.approx(1.99 * mile, rel=1e-9)
    assert out["lead_time_hours"] == [pytest.approx(36.0)] * n
    assert out["request_hour_of_week"] == [0] * n


def test_request_hour_of_week_wraps_at_sunday_midnight_and_uses_the_offset() -> None:
    # Sunday 2026-03-08 23:59 in Berlin (UTC+1) = 22:59 UTC; a minute later it is Monday hour 0.
    sunday = datetime(2026, 3, 8, 22, 59, tzinfo=UTC).timestamp()
    out = _crosses(
        request_lat=[52.5, 52.5],
        request_lng=[13.4, 13.4],
        venue_lat=[52.5, 52.5],
        venue_lng=[13.4, 13.4],
        request_ts=[sunday, sunday + 60],
        start_ts=[sunday, sunday],
        request_utc_offset_min=[60, 60],
    )
    assert out["request_hour_of_week"] == [167, 0]
    assert out["distance_km"] == [0.0, 0.0] and out["distance_bucket"] == [0, 0]


def test_request_crosses_are_missing_when_an_input_is() -> None:
    out = _crosses(
        request_lat=[37.7],
        request_lng=[-122.4],
        venue_lat=[None],
        venue_lng=[None],
        request_ts=[1.7e9],
        start_ts=[None],
        request_utc_offset_min=[-480],
    )
    assert out["distance_km"] == [None] and out["distance_bucket"] == [None]
    assert out["lead_time_hours"] == [None]
    assert out["request_hour_of_week"] != [None]


def test_category_affinity_picks_the_events_category() -> None:
    from features.crosses import category_affinity

    inputs: dict[str, list[Any]] = {f"aff_{c}": [0.1, 0.2, 0.3] for c in ("music", "tech")}
    inputs["aff_tech"] = [0.7, 0.8, 0.9]
    inputs["category"] = ["tech", "music", None]
    assert _udf(category_affinity)(inputs) == {"category_affinity": [0.7, 0.2, None]}


def test_definitions_bind_gold_paths_to_the_profile_lake_without_touching_declarations(
    tmp_path: Path,
) -> None:
    from features import repo
    from pipelines.features.definitions import bound_definitions, definitions_hash

    a, b = make_settings(tmp_path / "a"), make_settings(tmp_path / "b")
    bound = bound_definitions(a)
    by_name = {v.name: v for v in bound.feature_views}
    for view in repo.FEATURE_VIEWS:
        table = view.batch_source.tags["table"]
        assert by_name[view.name].batch_source.path == a.lake.table_path("gold", table)
        assert view.batch_source.path.startswith("{lake}/")  # the declaration is untouched
    assert definitions_hash(a) == definitions_hash(a)
    assert definitions_hash(a) != definitions_hash(b)


@pytest.mark.parametrize(("profile", "online_type"), [("local", "sqlite"), ("cluster", "redis")])
def test_feature_store_yaml_comes_from_conf(tmp_path: Path, profile: str, online_type: str) -> None:
    from feast import RepoConfig

    from pipelines.feast_store import write_feature_store_yaml

    settings = load_settings(profile, home=tmp_path, environ={})
    path = write_feature_store_yaml(settings)
    assert path == tmp_path.resolve() / "feast" / "feature_store.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["online_store"]["type"] == online_type
    assert data["offline_store"]["type"] == "pipelines.offline_store.SortedSparkOfflineStore"
    spark_conf = data["offline_store"]["spark_conf"]
    assert spark_conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert spark_conf["spark.sql.session.timeZone"] == "UTC"
    assert "delta-spark" in spark_conf["spark.jars"]
    config = RepoConfig(repo_path=path.parent, **data)  # Feast's own model accepts it
    assert config.online_store.type == online_type
    assert config.materialization_config.pull_latest_features is True
    assert data["batch_engine"]["type"] == "pipelines.online_write.ColumnarComputeEngine"
    assert type(config.batch_engine).__name__ == "ColumnarComputeEngineConfig"  # Feast resolves it
