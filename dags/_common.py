"""Wiring that turnout's DAG files share: schedule, task defaults, failure policy, assets.

Airflow runs this module on every parse of every DAG file that imports it, so it imports the
Airflow task SDK and the standard library only: no ``pipelines``, ``conf``, Spark or pandas.
DAG files import it as ``_common`` because Airflow puts the root of the dags bundle on
``sys.path`` when it parses a file or runs a task.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from airflow.sdk import Asset, AssetAlias, CronDataIntervalTimetable, get_current_context
from airflow.sdk.exceptions import AirflowFailException

# A fixed past instant, never ``now()``: a moving start_date changes the DAG on every parse.
# With catchup=False only the latest complete interval runs when a DAG is switched on.
START_DATE: Final = datetime(2026, 1, 1, tzinfo=UTC)

# One silver Delta table per landing entity. Kept here as literals because a DAG file may not
# import ``pipelines`` at parse time; tests/dags checks it against pipelines.ingest.run.
SILVER_TABLES: Final[tuple[str, ...]] = (
    "users",
    "friendships",
    "organizers",
    "venues",
    "series",
    "events",
    "event_cancellations",
    "impressions",
    "rsvps",
    "attendance",
    "ratings",
    "capacity_snapshots",
)


def hourly_utc() -> CronDataIntervalTimetable:
    """Hourly runs over the data interval [HH:00, HH+1:00) UTC.

    Airflow 3 turns a bare cron string into a trigger timetable whose runs have
    ``data_interval_start == data_interval_end`` (``[scheduler] create_cron_data_intervals``
    defaults to False), and a job keyed on that interval would read an empty window. Asking
    for the data-interval timetable explicitly makes each run cover the hour that just ended.
    """
    return CronDataIntervalTimetable("0 * * * *", timezone="UTC")


def default_args(**overrides: Any) -> dict[str, Any]:
    """Task defaults for every turnout DAG; a fresh dict per call so no DAG mutates another's."""
    args: dict[str, Any] = {
        "owner": "turnout",
        # Transient faults (a Spark executor lost, a storage hiccup, a killed worker) usually clear
        # within minutes; contract failures skip retries entirely (see ``fail_without_retry``). The
        # delay is Airflow's own ``[core] default_task_retry_delay`` (300 s in ops/airflow-env.sh).
        "retries": 2,
    }
    args.update(overrides)
    return args


def silver_asset(table: str) -> Asset:
    """The asset a DAG lists in ``outlets`` or ``schedule`` for ``silver.<table>``.

    Airflow identifies an asset by name *and* URI, so every DAG must build it here: a consumer
    that spelled the name differently would wait for an asset nothing ever updates.
    """
    if table not in SILVER_TABLES:
        raise ValueError(f"unknown silver table {table!r}; known: {SILVER_TABLES}")
    return Asset(name=f"silver.{table}", uri=f"turnout://silver/{table}", group="silver")


SILVER_ASSETS: Final[tuple[Asset, ...]] = tuple(silver_asset(t) for t in SILVER_TABLES)
# The ingest task's outlet: at run time it adds an event for each silver asset the interval
# changed (``outlet_events[SILVER_DELIVERED].add(silver_asset(t))``), so an empty hour triggers
# nothing downstream. Consumers schedule on the silver assets themselves.
SILVER_DELIVERED: Final = AssetAlias(name="silver.delivered", group="silver")

# Updated by the ``platform`` DAG (the simulated platform) for every hour it delivered into the
# landing zone, extra ``{"start", "end"}``: ``ingest`` runs for that hour at once instead of on the
# wall clock's hour, so a backfilled platform is ingested hour by hour behind it.
LANDING_DELIVERED: Final = Asset(name="landing.delivered", uri="turnout://landing/delivered", group="landing")

# Updated by the ``features`` DAG once gold is validated and materialized; its event's extra
# carries ``{"end": ISO}``, the instant the features are complete up to.
GOLD_FEATURES: Final = Asset(name="gold.features", uri="turnout://gold/features", group="gold")
# The index DAG's outputs: event vectors under the published tower, and the published geo index
# with its serving catalog; the content_tower DAG's: a newly published tower.
EVENT_EMBEDDINGS: Final = Asset(
    name="gold.event_embeddings", uri="turnout://gold/event_embeddings", group="gold"
)
GEO_INDEX: Final = Asset(name="index.geo", uri="turnout://index/geo", group="index")
CONTENT_TOWER: Final = Asset(name="index.content_tower", uri="turnout://index/content_tower", group="index")


def weekly_utc() -> CronDataIntervalTimetable:
    """Weekly runs on Mondays 04:00 UTC over the week that just ended (see ``hourly_utc``)."""
    return CronDataIntervalTimetable("0 4 * * 1", timezone="UTC")


@contextmanager
def fail_without_retry(*errors: type[BaseException]) -> Generator[None, None, None]:
    """Turn ``errors`` raised in the block into ``AirflowFailException``: fail now, never retry.

    For failures a retry cannot fix (a delivery that breaks its data contract breaks it the
    same way on every try); retrying them only delays the alert and re-reads the batch. Any
    other exception propagates unchanged and is retried as the task's ``retries`` allow.
    """
    if not errors:
        raise TypeError("fail_without_retry needs at least one exception class")
    try:
        yield
    except errors as err:
        raise AirflowFailException(f"{type(err).__name__}: {err}") from err


class RunWindow(NamedTuple):
    """What an interval-keyed job needs from its run: [start, end) in UTC and the run id."""

    start: datetime
    end: datetime
    run_id: str


def current_window() -> RunWindow:
    """The running task's data interval and run id; a no-retry failure if the interval is unusable.

    A run without a logical date has no interval, and a plain cron schedule gives an empty one;
    either would make an interval-keyed job silently process nothing (or everything).
    Call it inside a task body only: it reads the task's runtime context.
    """
    context = get_current_context()
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException(
            "this run has no data interval: give it a logical date, e.g. "
            "`airflow backfill create --dag-id <dag> --from-date ... --to-date ...` or "
            'POST /api/v2/dags/<dag>/dagRuns {"logical_date": "2026-01-01T01:00:00Z"}'
        )
    if not start < end:
        raise AirflowFailException(
            f"empty data interval [{start.isoformat()}, {end.isoformat()}): "
            "the DAG needs an interval timetable such as _common.hourly_utc()"
        )
    return RunWindow(start=start, end=end, run_id=context["run_id"])


def resolve_window(context: Any) -> dict[str, Any]:
    """The interval this run rebuilds, as ISO strings: ``{"start", "end", "run_id", "windows"}``.

    ``windows`` lists, in order, the distinct windows that make it up: one per producing run when
    asset events triggered the run (several when a backfill or a held-over event batched them),
    else the one window. A consumer that must write what hourly runs would have written (the
    features DAG) processes them one by one. A ``start`` of ``None`` means everything before
    ``end`` (the first load of a whole history).

    1. Triggered by asset events: the union of the windows the producing runs covered (each
       event's ``extra`` ``start``/``end``, else its run's data interval): an asset-triggered run
       has no data interval of its own.
    2. Triggered by hand with ``{"start": ISO, "end": ISO}`` in the run conf: that window
       (backfills, tests); ``{"end": ISO}`` alone: everything delivered before it.
    3. Otherwise the run's own data interval, failing without retry when it is empty.
    """
    found: list[tuple[datetime | None, datetime]] = []
    for events in (context.get("triggering_asset_events") or {}).values():
        for event in events:
            extra = event.extra or {}
            run = event.source_dag_run
            if extra.get("end") and "start" in extra:  # the window the producing run covered
                lo = datetime.fromisoformat(extra["start"]) if extra["start"] else None
                found.append((lo, datetime.fromisoformat(extra["end"])))
            elif run is not None and run.data_interval_start and run.data_interval_end:
                found.append((run.data_interval_start, run.data_interval_end))
    run_id = str(context["run_id"])
    if found:
        ordered = sorted(set(found), key=lambda w: (w[0] or datetime.min.replace(tzinfo=UTC), w[1]))
        starts = [lo for lo, _ in ordered]
        return {
            "start": None if None in starts else min(lo for lo in starts if lo is not None).isoformat(),
            "end": max(hi for _, hi in ordered).isoformat(),
            "run_id": run_id,
            "windows": [[_iso(lo), hi.isoformat()] for lo, hi in ordered],
        }
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    if "start" in conf or "end" in conf:
        from contracts.instants import parse_instant

        try:
            end = parse_instant(str(conf["end"]))
            start = parse_instant(str(conf["start"])) if conf.get("start") is not None else None
        except (KeyError, ValueError) as err:
            raise AirflowFailException(
                f"run conf needs ISO 'end' (and 'start', or none for everything before 'end') "
                f"with a UTC offset: {err}"
            ) from err
        if start is not None and not start < end:
            raise AirflowFailException(
                f"run conf window [{conf['start']}, {conf['end']}) is not an aware interval"
            )
        return {
            "start": _iso(start),
            "end": end.isoformat(),
            "run_id": run_id,
            "windows": [[_iso(start), end.isoformat()]],
        }
    window = current_window()
    first, last = window.start.isoformat(), window.end.isoformat()
    return {"start": first, "end": last, "run_id": window.run_id, "windows": [[first, last]]}


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def parse_window(window: dict[str, Any]) -> tuple[datetime | None, datetime]:
    """``resolve_window``'s start and end as instants (start ``None``: everything before end)."""
    start = window["start"]
    return (None if start is None else datetime.fromisoformat(start)), datetime.fromisoformat(window["end"])


def resolve_features_end(context: Any) -> str:
    """The instant a run acts as of, as ISO: how far the features reach that triggered it.

    1. Triggered by ``gold.features``: the newest triggering event's ``extra["end"]``.
    2. Triggered by hand with ``{"as_of": ISO}`` in the run conf (backfills, tests).
    3. Otherwise the end of the run's own data interval.
    """
    ends = [
        event.extra["end"]
        for events in (context.get("triggering_asset_events") or {}).values()
        for event in events
        if (event.extra or {}).get("end")
    ]
    if ends:
        return max(ends, key=datetime.fromisoformat)
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    if "as_of" in conf:
        from contracts.instants import parse_instant

        try:
            return parse_instant(str(conf["as_of"])).isoformat()
        except ValueError as err:
            raise AirflowFailException(f"run conf 'as_of': {err}, e.g. 2026-11-09T00:00Z") from err
    return current_window().end.isoformat()
