"""Incremental materialization to the online store that never moves an online value backwards.

``materialize(settings, end)``: per feature view, the window from the view's last materialized
end to ``end``; never a window that ends before it (see the function for why that is the guard).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from conf import Settings
from pipelines.feast_store import feast_output_to_log, get_store
from pipelines.features.definitions import gold_source_of

if TYPE_CHECKING:
    from feast import FeatureView
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"naive datetime {t!r}: pass an aware UTC instant")
    return t.astimezone(UTC)


def last_materialized_end(view: FeatureView) -> datetime | None:
    """Where the online store's copy of ``view`` ends (None: never materialized)."""
    end = view.most_recent_end_time
    return None if end is None else _utc(end)


def _source_exists(spark: SparkSession, view: FeatureView) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, gold_source_of(view).path))


def _rows_in_window(spark: SparkSession, view: FeatureView, start: datetime, end: datetime) -> int:
    """How many keys the window writes: one row per entity key with a row in [start, end]."""
    from pyspark.sql import functions as F

    source = gold_source_of(view)
    keys = [c.name for c in view.entity_columns]
    frame = spark.read.format("delta").load(source.path)
    ts = F.col(source.timestamp_field)
    return int(frame.where(ts.between(start, end)).select(*keys).distinct().count())


def _skipped(status: str, last_end: datetime | None) -> dict[str, Any]:
    return {
        "status": status,
        "start": None,
        "end": None if last_end is None else last_end.isoformat(),
        "rows": 0,
        "seconds": 0.0,
        "rows_per_s": None,
    }


def materialize(
    settings: Settings,
    end: datetime,
    feature_views: Sequence[str] | None = None,
    lookback: timedelta | None = None,
) -> dict[str, Any]:
    """Bring the online store up to ``end``: per view, the window after its last materialized end.

    * **Incremental and contiguous**: a view's window starts where its last one ended (the
      registry records every window), reaching back ``lookback`` more (default: the gold jobs'
      ``LATE_ARRIVAL_WINDOW``) because the jobs may still write rows stamped up to that far in
      the past; no window starts before ``end - ttl`` (older rows are past their TTL offline
      too, so serving them would be skew). A view never materialized starts at ``end - ttl``.
    * **Idempotent**: ``end`` at or before the last end writes nothing (``up_to_date`` /
      ``behind``), so re-running an interval is a no-op; a run killed after writing but before
      recording its window rewrites the same rows.
    * **Never backwards**: Feast writes, per key, the newest row *inside the window*. A window
      ending before the last end could overwrite a newer value with an older one, and the SQLite
      online store does not compare event times (Redis does). Every window here ends at or after
      the last end, so the row it writes for a key is at least as new as the one online, whatever
      its start; windows that would end earlier are refused (skipped, reported ``behind``).

    A view whose gold table does not exist yet is skipped (``no_source_table``).
    Returns ``{"end", "views": {name: {"status", "start", "end", "rows", "seconds", "rows_per_s"}},
    "rows", "seconds"}``.
    """
    if lookback is None:
        from pipelines.features.jobs import LATE_ARRIVAL_WINDOW

        lookback = LATE_ARRIVAL_WINDOW
    from pipelines.offline_store import PULLED_ROWS
    from pipelines.spark import get_spark

    end = _utc(end)
    started = time.perf_counter()
    spark = get_spark(settings)
    store = get_store(settings)
    wanted = set(feature_views) if feature_views is not None else None
    report: dict[str, Any] = {"end": end.isoformat(), "views": {}}
    views = [v for v in store.list_feature_views(allow_cache=False) if wanted is None or v.name in wanted]
    missing = (wanted or set()) - {v.name for v in views}
    if missing:
        raise ValueError(f"no such feature views in the registry: {sorted(missing)}")
    for view in sorted(views, key=lambda v: v.name):
        last_end = last_materialized_end(view)
        if last_end is not None and end <= last_end:
            if end < last_end:
                log.warning(
                    "materialize %s: refusing a window ending %s, before the online store's %s",
                    view.name,
                    end.isoformat(),
                    last_end.isoformat(),
                )
            report["views"][view.name] = _skipped("up_to_date" if end == last_end else "behind", last_end)
            continue
        if not _source_exists(spark, view):
            log.warning("materialize %s: no gold table at %s yet", view.name, gold_source_of(view).path)
            report["views"][view.name] = _skipped("no_source_table", last_end)
            continue
        if view.ttl is None or view.ttl.total_seconds() <= 0:
            raise ValueError(f"feature view {view.name} needs a positive TTL to be materialized")
        oldest = end - view.ttl
        start = oldest if last_end is None else max(last_end - lookback, oldest)
        view_started = time.perf_counter()
        PULLED_ROWS.pop(gold_source_of(view).path, None)
        with feast_output_to_log():
            store.materialize(start_date=start, end_date=end, feature_views=[view.name])
        seconds = time.perf_counter() - view_started
        # The sorted offline store counts what Feast pulled and wrote; Feast's stock store does
        # not, and then the same keys are counted here (a Spark job more per view, not timed).
        rows = PULLED_ROWS.get(gold_source_of(view).path)
        if rows is None:
            rows = _rows_in_window(spark, view, start, end)
        report["views"][view.name] = {
            "status": "materialized",
            "start": start.isoformat(),
            "end": end.isoformat(),
            "rows": rows,
            "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
        }
        log.info("materialized %s [%s, %s]: %d rows in %.1f s", view.name, start, end, rows, seconds)
    report["rows"] = sum(v["rows"] for v in report["views"].values())
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def materialized_intervals(settings: Settings) -> dict[str, list[tuple[str, str]]]:
    """Every view's recorded materialization windows, oldest first (for reports and tests)."""
    store = get_store(settings)
    return {
        v.name: [(_utc(s).isoformat(), _utc(e).isoformat()) for s, e in sorted(v.materialization_intervals)]
        for v in store.list_feature_views(allow_cache=False)
    }
