"""Shared fixtures: one Spark session per test run, and a fresh TURNOUT_HOME per test module."""

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
