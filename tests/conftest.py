"""Shared fixtures: one Spark session per test process, and a fresh TURNOUT_HOME per test module.

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``); the hook at
the end decides which tests share a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conf import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def make_settings(home: Path, **overrides: str) -> Settings:
    env = {f"TURNOUT__{k.upper()}": v for k, v in overrides.items()}
    return load_settings("local", home=home, environ=env)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from pipelines.spark import get_spark

    session = get_spark(make_settings(tmp_path_factory.mktemp("spark-home")))
    yield session
    session.stop()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "home")


@pytest.fixture(scope="session")
def trained_world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A simulated world with both heads promoted, the index published and features online."""
    from tests.integration.training_world import build_trained_world

    return build_trained_world(make_settings(tmp_path_factory.mktemp("trained-world")))


TRAINED_WORLD_GROUP = "trained_world"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test module runs whole on one xdist worker, and every module that uses the trained
    world runs on the same one, first.

    A module's fixtures are then built once, and the trained world (two minutes to build) once,
    not once per worker; the modules on it (the scheduler test among them) take about half the
    suite's time, so they start at once and the other worker takes everything else. Without
    xdist the marks do nothing and only the order changes.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    uses_world = {module(item) for item in items if "trained_world" in getattr(item, "fixturenames", ())}
    for item in items:
        group = TRAINED_WORLD_GROUP if module(item) in uses_world else module(item)
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: module(item) not in uses_world)  # stable: keeps the rest in order
