"""A small simulated world ready for training: silver, gold, a tower, embeddings, Feast applied."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from conf import Settings
from pipelines.features.definitions import apply_definitions
from pipelines.features.jobs import build_gold
from pipelines.index.run import embed_new_events, train_content_tower
from pipelines.ingest.run import build_silver, ingest_bronze
from simulator import SimulationConfig, simulate


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


# The world the training and live-serving tests share (built once per session: ~5 minutes), with
# one more day for the live platform the scheduler test plays against a running service.
CONFIG = SimulationConfig(users=700, days=20, seed=23, platform_days=1)
AS_OF = history_end(CONFIG)


def with_training(settings: Settings, **changes: Any) -> Settings:
    """The settings with some ``training`` fields replaced (gates by head: ``gates={...}``)."""
    return settings.model_copy(update={"training": settings.training.model_copy(update=changes)})


def lenient(settings: Settings) -> Settings:
    """Gates that always pass: for tests about what happens after a promotion."""
    from conf.settings import GateSettings

    gate = GateSettings(tolerance=1.0, max_ece=1.0, min_score_std=0.0)
    return with_training(settings, gates={"rsvp": gate, "attend": gate})


@dataclass
class TrainedWorld:
    settings: Settings
    rsvp: dict[str, Any]  # the first p_rsvp training report (version 1, champion)
    attend: dict[str, Any]


def build_trained_world(settings: Settings) -> TrainedWorld:
    """``CONFIG``'s world with both heads trained and promoted, the index published, features online."""
    from pipelines.features.materialize import materialize
    from pipelines.index.run import build_and_publish_index
    from pipelines.training.train import train_head

    assert build_training_world(settings, CONFIG) == AS_OF
    ok = lenient(settings)
    rsvp = train_head(ok, "rsvp", AS_OF)
    attend = train_head(ok, "attend", AS_OF)
    build_and_publish_index(settings, AS_OF)
    materialize(settings, end=AS_OF)
    return TrainedWorld(settings, rsvp, attend)
