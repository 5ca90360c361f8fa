"""Versioned training sets: labelled examples + Feast's point-in-time features -> one Delta table.

``build_training_set(settings, head, as_of)`` labels examples on Spark (``examples``), joins the
head's feature service with Feast's historical retrieval (Spark offline store, rows created after
the label instant hidden), and overwrites ``lake/training/<head>``. Each build is a new Delta
version; the version, the example counts (which the odds correction is computed from) and the
versions of every silver and gold table read are returned and logged with the training run, so
a model can be retrained from exactly the rows it saw (``read_training_set(..., version)``).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from conf import Settings
from models.heads import EMBEDDING_COLUMN, SERVICE_OF_HEAD, model_columns
from pipelines.training.examples import (
    KEY_COLUMNS,
    META_COLUMNS,
    REQUEST_COLUMNS,
    RSVP_LABEL_WINDOW,
    ExampleCounts,
    attend_examples,
    rsvp_examples,
)
from pipelines.training.split import Split, split_boundaries, temporal_split

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql import DataFrame as SparkDataFrame

log = logging.getLogger(__name__)

SILVER_INPUTS = ("users", "events", "event_cancellations", "impressions", "rsvps", "attendance", "ratings")
GOLD_INPUTS = (
    "user_features",
    "event_features",
    "event_dynamics",
    "organizer_stats",
    "venue_stats",
    "series_stats",
    "market_rates",
    "social",
    "event_embeddings",
)


@dataclass(frozen=True)
class TrainingSet:
    """Where one build landed and what it was made from."""

    head: str
    service: str
    path: str
    version: int
    as_of: str
    start: str
    label_end: str
    rows: int
    counts: dict[str, Any]
    source_versions: dict[str, int]
    columns: list[str]  # model input columns
    seconds: dict[str, float]  # labels (Spark), join_and_write (Feast's join, model columns, Delta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def training_set_path(settings: Settings, head: str) -> str:
    return settings.lake.table_path("training", head)


def table_version(spark: Any, path: str) -> int:
    """The current Delta version of the table at ``path`` (-1 when there is none)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return -1
    row = DeltaTable.forPath(spark, path).history(1).select("version").first()
    return int(row[0]) if row is not None else -1


def source_versions(spark: Any, settings: Settings) -> dict[str, int]:
    """The Delta version of every silver and gold table a training set reads."""
    tables = [("silver", t) for t in SILVER_INPUTS] + [("gold", t) for t in GOLD_INPUTS]
    # Each is a small Spark job over one table's log, mostly planning and waiting: four side by
    # side took 1.5 s against 2.5 s one by one on the 1M-impression history (warm JVM).
    with ThreadPoolExecutor(4) as pool:
        versions = pool.map(lambda t: table_version(spark, settings.lake.table_path(*t)), tables)
    return {f"{layer}.{name}": v for (layer, name), v in zip(tables, versions, strict=True)}


_STRINGS = (
    *(c for c in KEY_COLUMNS if c != "event_timestamp"),
    "request_id",
    "exploration_kind",
    "user_metro",
)


def _training_columns(joined: SparkDataFrame, features: list[str], embedding_dim: int) -> SparkDataFrame:
    """The training set's columns: the example's keys, request and labels, explicitly typed (a
    column that happens to be all-null still has one in Delta), then the model's inputs by
    ``models.heads.to_model_frame``'s rule, on Spark: every feature a double, missing where it
    is not a number, the embedding spread into ``embedding_<i>`` where it has ``embedding_dim``
    values."""
    from pyspark.sql import functions as F

    def typed(c: str) -> Column:
        if c == "event_timestamp":
            return F.col(c)
        return F.col(c).cast(
            "string" if c in _STRINGS else "double" if c in REQUEST_COLUMNS[:3] else "bigint"
        )

    model: list[Column] = []
    for name in features:
        if name == EMBEDDING_COLUMN:
            whole = F.size(F.col(name)) == embedding_dim
            model += [
                F.when(whole, F.col(name)[i].cast("double")).alias(f"{EMBEDDING_COLUMN}_{i}")
                for i in range(embedding_dim)
            ]
        else:
            model.append(F.col(name).try_cast("double").alias(name))
    return joined.select(*(typed(c) for c in (*KEY_COLUMNS, *REQUEST_COLUMNS, *META_COLUMNS)), *model)


def build_training_set(
    settings: Settings,
    head: str,
    as_of: datetime,
    window: timedelta | None = None,
) -> TrainingSet:
    """Label, join point-in-time features, write a new version of ``lake/training/<head>``."""
    from delta.tables import DeltaTable

    from pipelines.feast_store import get_store
    from pipelines.spark import get_spark
    from pipelines.training.retrieval import historical_features_frame
    from published.feature_store import service_feature_names
    from published.tower import tower_at

    if head not in SERVICE_OF_HEAD:
        raise ValueError(f"unknown head {head!r}; choose one of {sorted(SERVICE_OF_HEAD)}")
    cfg = settings.training
    as_of = as_of.astimezone(UTC)
    days = cfg.window_days if head == "rsvp" else cfg.attend_window_days
    start = as_of - (window or timedelta(days=days))
    clock = time.perf_counter()
    spark = get_spark(settings)
    versions = source_versions(spark, settings)
    counts: ExampleCounts
    if head == "rsvp":
        label_end = as_of - RSVP_LABEL_WINDOW
        train_end, _ = split_boundaries(
            start, label_end, cfg.calibration_start_fraction, cfg.test_start_fraction
        )
        rows, counts = rsvp_examples(
            spark,
            settings,
            start,
            as_of,
            train_end=train_end,
            negative_keep_rate=cfg.negative_keep_rate,
            injected_negative_share=cfg.injected_negative_share,
            seed=cfg.seed,
        )
    else:
        # The window ends where labels stop being mature, so it reaches back by the delay too.
        delay = timedelta(days=cfg.attend_label_delay_days)
        start -= delay
        label_end = as_of - delay
        rows, counts = attend_examples(spark, settings, start, as_of, label_delay=delay)
    if counts.natural_positives + counts.natural_negatives == 0:
        raise ValueError(
            f"no {head} examples in [{start.isoformat()}, {as_of.isoformat()}): nothing to train on"
        )
    log.info("%s examples: %s", head, counts.to_dict())
    # Materialized once, then handed to Feast as a Spark DataFrame over files: a pandas frame
    # would become an in-memory relation that the join's plan copies once per feature view.
    staged = settings.lake.table_path("training", f"_examples_{head}")
    rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(staged)
    spark.catalog.clearCache()  # the labelled frames were cached for their counts
    entity = spark.read.format("delta").load(staged)
    seconds = {"labels": time.perf_counter() - clock}
    clock = time.perf_counter()

    service_name = SERVICE_OF_HEAD[head]
    features = service_feature_names(get_store(settings).get_feature_service(service_name))
    # Joined, typed and written by the executors: the set never comes to the driver (which held
    # ~10 GiB for the 1M-impression history's 884k rows and could not hold 10x of it).
    joined = historical_features_frame(settings, entity, service_name)
    frame = _training_columns(joined, features, settings.index.embedding_dim)
    path = training_set_path(settings, head)
    description = {
        # The embeddings' meaning: a head may only be served beside vectors from this tower.
        "tower_version": tower_at(settings, as_of) if EMBEDDING_COLUMN in features else None,
        "head": head,
        "path": path,
        "as_of": as_of.isoformat(),
        "start": start.isoformat(),
        "label_end": label_end.isoformat(),
        "counts": counts.to_dict(),
        "sources": versions,
    }
    (
        frame.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", json.dumps(description, sort_keys=True))
        .save(path)
    )
    commit = DeltaTable.forPath(spark, path).history(1).select("version", "operationMetrics").first()
    assert commit is not None
    version, written = int(commit["version"]), int(commit["operationMetrics"]["numOutputRows"])
    seconds["join_and_write"] = time.perf_counter() - clock
    seconds = {k: round(v, 2) for k, v in seconds.items()}
    log.info("training set %s version %d: %d rows, seconds %s", path, version, written, seconds)
    return TrainingSet(
        head=head,
        service=service_name,
        path=path,
        version=version,
        as_of=as_of.isoformat(),
        start=start.isoformat(),
        label_end=label_end.isoformat(),
        rows=written,
        counts=counts.to_dict(),
        source_versions=versions,
        columns=model_columns(features, settings.index.embedding_dim),
        seconds=seconds,
    )


def read_training_set(settings: Settings, head: str, version: int | None = None) -> tuple[pd.DataFrame, int]:
    """One version of ``lake/training/<head>`` (the latest by default) as pandas, sorted by time."""
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    path = training_set_path(settings, head)
    current = table_version(spark, path)
    if current < 0:
        raise FileNotFoundError(f"no training set at {path}: run `turnout train --head {head}` first")
    v = current if version is None else version
    # Arrow to the end: sorted as a table, then converted column by column, each freed as it goes.
    # toPandas held the JVM's batches, pandas' blocks and the sorted copy at once: at 3x the
    # 1M-impression history (2.6M rows) it peaked at 17.4 GiB against 11.4, in 65 s against 37.
    table = spark.read.format("delta").option("versionAsOf", v).load(path).toArrow()
    table = table.sort_by([("event_timestamp", "ascending"), ("example_id", "ascending")])
    frame: pd.DataFrame = table.to_pandas(self_destruct=True, split_blocks=True)
    frame["event_timestamp"] = frame["event_timestamp"].astype("datetime64[ns, UTC]")
    return frame, v


def training_set_description(settings: Settings, head: str, version: int) -> dict[str, Any]:
    """The metadata a build recorded with its Delta commit (as_of, counts, source versions)."""
    from delta.tables import DeltaTable

    from pipelines.spark import get_spark

    spark = get_spark(settings)
    history = DeltaTable.forPath(spark, training_set_path(settings, head)).history()
    row = history.filter(f"version = {int(version)}").select("userMetadata").first()
    if row is None or row[0] is None:
        raise KeyError(f"training set {head} has no version {version} with metadata")
    return dict(json.loads(row[0]))


def split_training_set(settings: Settings, frame: pd.DataFrame, described: dict[str, Any]) -> Split:
    """The temporal split of one recorded training set, from the window its build recorded."""
    cfg = settings.training
    calibration_start, test_start = split_boundaries(
        datetime.fromisoformat(described["start"]),
        datetime.fromisoformat(described["label_end"]),
        cfg.calibration_start_fraction,
        cfg.test_start_fraction,
    )
    return temporal_split(frame, calibration_start, test_start, new_events_only=described["head"] == "rsvp")
