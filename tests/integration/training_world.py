"""A small simulated world ready for training: silver, gold, a tower, embeddings, Feast applied."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from conf import Settings
from pipelines.features.jobs import build_gold
from pipelines.features.store import apply_definitions
from pipelines.index.run import embed_new_events, train_content_tower
from pipelines.ingest.run import build_silver, ingest_bronze
from pipelines.simulator import SimulationConfig, simulate


def history_end(config: SimulationConfig) -> datetime:
    return config.start + timedelta(days=config.days)


def build_training_world(settings: Settings, config: SimulationConfig) -> datetime:
    """Simulate -> ingest -> gold as of the history's end -> tower -> embeddings -> apply.

    The tower is trained as early as the co-RSVP pairs allow (from day six on), so most label
    instants see embeddings (as in production, where the tower predates the events).
    Returns the history's end, the ``as_of`` to train at.
    """
    as_of = history_end(config)
    simulate(config, Path(settings.landing.root), settings.home / "simulator")
    ingest_bronze(settings, None, None, run_id="world")
    build_silver(settings, None, None, run_id="world")
    build_gold(settings, None, as_of, run_id="world")
    for day in range(6, config.days, 2):  # the earliest day with enough co-RSVP pairs
        tower = train_content_tower(settings, config.start + timedelta(days=day))
        if tower["status"] == "published":
            break
    else:
        raise RuntimeError(f"tower never published: {tower}")
    embed_new_events(settings, as_of)
    apply_definitions(settings)
    return as_of
