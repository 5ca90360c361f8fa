"""Feast for the batch jobs: the store with its Spark offline store over the gold Delta tables.

``get_store(settings)`` is what apply, materialization and historical retrieval use; it starts
the one Delta-configured Spark session first (``pipelines.spark``), because Feast's Spark offline
store takes the thread's active session, or else builds one of its own from ``spark_conf``.
``write_feature_store_yaml`` writes the same configuration out for the ``feast`` CLI. Serving
reads the online store through ``published.feature_store`` and never starts Spark.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf import Settings
from published.feature_store import FEATURE_STORE_YAML, feast_dir, repo_config_dict

if TYPE_CHECKING:
    from feast import FeatureStore

log = logging.getLogger(__name__)


def offline_store_config(settings: Settings) -> dict[str, Any]:
    """The offline store ``settings.feast.offline_store`` names (a Spark one), with every Spark
    setting turnout relies on."""
    from pipelines.spark import spark_conf

    return {
        "type": settings.feast.offline_store,
        "staging_location": settings.feast.staging_location,
        "spark_conf": spark_conf(settings),
    }


def batch_config(settings: Settings) -> dict[str, Any]:
    """``feature_store.yaml`` for the batch side: the Spark offline store and the batch engine."""
    config = repo_config_dict(settings, offline_store_config(settings))
    return {**config, "batch_engine": {"type": settings.feast.batch_engine}}


def write_feature_store_yaml(settings: Settings, path: Path | None = None) -> Path:
    """Write the profile's ``feature_store.yaml`` (default ``$TURNOUT_HOME/feast/``) and return its path.

    Code never reads it (``get_store`` builds the same config in memory); it is for people and
    for read-only ``feast`` CLI commands (``feast -f <path> feature-views list``).
    """
    import yaml

    target = path or feast_dir(settings) / FEATURE_STORE_YAML
    target.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Generated from conf/{settings.profile}.yaml by pipelines.feast_store; do not edit.\n"
    config = batch_config(settings)
    target.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return target


def _ensure_local_dirs(settings: Settings) -> None:
    for location in (settings.feast.registry, settings.feast.online_store.get("path", "")):
        if location and "://" not in location:
            Path(location).parent.mkdir(parents=True, exist_ok=True)


def get_store(settings: Settings) -> FeatureStore:
    """The feature store the batch jobs write through (creating local folders as needed)."""
    from feast import FeatureStore, RepoConfig

    from pipelines.spark import get_spark

    get_spark(settings)
    _ensure_local_dirs(settings)
    config = batch_config(settings)
    return FeatureStore(config=RepoConfig(repo_path=feast_dir(settings), **config))


class _LogWriter(io.TextIOBase):
    """Feast prints progress to stdout; route it to the log so a CLI's last line stays its summary."""

    def write(self, text: str) -> int:
        if text.strip():
            log.debug("feast: %s", text.strip())
        return len(text)


@contextlib.contextmanager
def feast_output_to_log() -> Iterator[None]:
    with contextlib.redirect_stdout(_LogWriter()):
        yield
