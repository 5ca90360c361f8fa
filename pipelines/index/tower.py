"""The content tower's weekly retrain: silver RSVPs -> co-RSVP pairs -> tower -> staged + published.

Train/check split is temporal: the newest ``HOLDOUT_SHARE`` of pairs (by the second RSVP's time)
is held out, and the tower is published only if it places those unseen pairs closer than random
pairs. A tower that cannot do that on next week's behaviour would hand the ranker noise in 64
columns, so the previous tower stays live instead.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from conf import Settings
from contracts.instants import to_micros
from pipelines.index.sources import read_silver
from published.tower import META_FILE, tower_store
from published.versioned import PublicationError, write_json_atomic

if TYPE_CHECKING:
    import pandas as pd

    from models.content_tower import TowerArtifact

log = logging.getLogger(__name__)

RSVP_LOOKBACK_DAYS: Final = 180
PAIR_WINDOW_DAYS: Final = 30
HOLDOUT_SHARE: Final = 0.1
MIN_TRAIN_PAIRS: Final = 200
# A week (the DAG's interval) with no RSVP at all is a stale or stopped platform, not a week to
# learn from: the weekly run keeps the published tower instead of retraining on old pairs.
STALE_AFTER: Final = timedelta(days=7)


class TowerQualityError(PublicationError):
    """A freshly trained tower failed its held-out check; it was not published."""


def read_training_inputs(settings: Settings, now: datetime) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(corpus, rsvps) known at ``now``: events created by then, RSVPs of the last 180 days."""
    import pandas as pd
    from pyspark.sql import functions as F

    from pipelines.spark import get_spark

    spark = get_spark(settings)
    now_us = to_micros(now)
    since_us = now_us - RSVP_LOOKBACK_DAYS * 86_400 * 1_000_000
    events = read_silver(spark, settings, "events")
    rsvps = read_silver(spark, settings, "rsvps")
    corpus_cols = ["event_id", "title", "description", "category", "organizer_id", "series_id"]
    if events is None or rsvps is None:
        return pd.DataFrame(columns=corpus_cols), pd.DataFrame(columns=["user_id", "event_id", "rsvp_at"])
    corpus = (
        events.filter((F.unix_micros("created_at") <= now_us) & (F.unix_micros("start_at") > since_us))
        .select(*corpus_cols)
        .toPandas()
    )
    rsvp_rows = (
        rsvps.filter((F.unix_micros("rsvp_at") <= now_us) & (F.unix_micros("rsvp_at") > since_us))
        .select("user_id", "event_id", F.unix_micros("rsvp_at").alias("rsvp_us"))
        .toPandas()
    )
    rsvp_rows["rsvp_at"] = pd.to_datetime(rsvp_rows["rsvp_us"], unit="us", utc=True)
    rsvp_rows = rsvp_rows[rsvp_rows["event_id"].isin(corpus["event_id"])]
    return corpus, rsvp_rows[["user_id", "event_id", "rsvp_at"]]


def similarity_margins(artifact: TowerArtifact, corpus: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Mean cosine of same-series / same-organizer / same-category pairs against random pairs."""
    from models.content_tower import embed_events, group_similarity

    vectors = embed_events(artifact, corpus)
    out: dict[str, dict[str, float]] = {}
    for column in ("series_id", "organizer_id", "category"):
        same, rand = group_similarity(vectors, corpus[column])
        out[column] = {"same": round(same, 4), "random": round(rand, 4), "margin": round(same - rand, 4)}
    return out


def holdout_margin(artifact: TowerArtifact, corpus: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, float]:
    """Mean cosine of held-out co-RSVP pairs against the mean cosine of random event pairs."""
    from models.content_tower import embed_events

    vectors = embed_events(artifact, corpus)
    pos = {e: i for i, e in enumerate(corpus["event_id"])}
    a = vectors[[pos[e] for e in pairs["event_a"]]]
    b = vectors[[pos[e] for e in pairs["event_b"]]]
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, len(vectors), 20_000), rng.integers(0, len(vectors), 20_000)
    pair_cos = float(np.mean(np.sum(a * b, axis=1))) if len(pairs) else float("nan")
    rand_cos = float(np.mean(np.sum(vectors[i] * vectors[j], axis=1)))
    return {
        "pairs": len(pairs),
        "pair_cos": round(pair_cos, 4),
        "random_cos": round(rand_cos, 4),
        "margin": round(pair_cos - rand_cos, 4),
    }


def retrain_tower(settings: Settings, now: datetime, seed: int = 7) -> dict[str, Any]:
    """Train on what was known at ``now``, check on the newest pairs, stage, publish."""
    import time

    from models.content_tower import TowerConfig, co_rsvp_pairs, save_tower, train_content_tower

    started = time.perf_counter()
    store = tower_store(settings)
    previous = store.read_pointer()
    corpus, rsvps = read_training_inputs(settings, now)
    pairs = co_rsvp_pairs(rsvps, window_days=PAIR_WINDOW_DAYS, seed=seed)
    summary: dict[str, Any] = {
        "now": now.isoformat(),
        "events": len(corpus),
        "rsvps": len(rsvps),
        "pairs": len(pairs),
        "previous_version": previous.version if previous else None,
    }
    newest = rsvps["rsvp_at"].max() if len(rsvps) else None
    if previous is not None and (newest is None or newest < now - STALE_AFTER):
        log.warning(
            "no RSVP in the %s before %s (newest %s): keeping the current tower", STALE_AFTER, now, newest
        )
        return {
            **summary,
            "status": "skipped",
            "reason": f"no RSVP since {(now - STALE_AFTER).isoformat()} (newest: {newest})",
            "version": summary["previous_version"],
        }
    if len(pairs) < MIN_TRAIN_PAIRS:
        log.warning("only %d co-RSVP pairs (< %d): keeping the current tower", len(pairs), MIN_TRAIN_PAIRS)
        return {
            **summary,
            "status": "skipped",
            "reason": f"fewer than {MIN_TRAIN_PAIRS} co-RSVP pairs",
            "version": summary["previous_version"],
        }

    cut = pairs["later_at"].quantile(1.0 - HOLDOUT_SHARE)
    train, holdout = pairs[pairs["later_at"] <= cut], pairs[pairs["later_at"] > cut]
    config = TowerConfig(dim=settings.index.embedding_dim, seed=seed)
    artifact, report = train_content_tower(corpus, train, config)
    check = holdout_margin(artifact, corpus, holdout)
    margins = similarity_margins(artifact, corpus)
    summary.update(
        version=artifact.version,
        train=asdict(report),
        holdout=check,
        similarity=margins,
    )
    if check["pairs"] and not check["margin"] > 0:
        raise TowerQualityError(
            f"tower {artifact.version} puts held-out co-RSVP pairs no closer than random pairs "
            f"({check}); the current tower stays live"
        )

    def write(folder: Path) -> None:
        save_tower(artifact, folder)
        write_json_atomic(folder / META_FILE, {**summary, "trained_at": now.isoformat()})

    store.stage(artifact.version, write, exist_ok=True)
    pointer = store.switch(artifact.version, expected_current=previous.version if previous else None)
    unchanged = previous is not None and previous.version == artifact.version
    summary.update(
        status="unchanged" if unchanged else "published",
        history=list(pointer.history),
        seconds=round(time.perf_counter() - started, 2),
    )
    log.info("content tower %s published (previous %s)", artifact.version, summary["previous_version"])
    return summary
