"""great-expectations suites on every gold table: the data contract checked before materialization.

A gold table is judged as of the run's ``end`` (rows with ``event_timestamp <= end``, so a
re-run of an old interval is judged on what that interval could see). An hourly run judges only
the rows it may have written: with ``since`` (the start of its MERGE window, ``jobs.build_gold``),
rows from ``since`` on, or from ``end - max_age`` where that is earlier, so freshness still sees
the newest row. Every row was judged by the run that wrote it, and an hour's suites stay the size
of an hour's window instead of growing with the history. Without ``since``, every row.

* **schema**: the columns and Spark types ``features/`` declares for its view, plus the two stamps;
* **nulls**: keys, stamps and every feature except the few that are legitimately absent;
* **ranges and sets**: rates in [0, 1], counts >= 0, coordinates on Earth, categories from the
  landing contract, hour-of-week in 0..167, the embedding's dimension;
* **point-in-time stamps**: ``created >= event_timestamp`` (a value cannot be written before it is
  known; a row that is, leaks the future into training), one row per key and instant;
* **freshness**: the newest ``event_timestamp`` is within the table's ``max_age`` of ``end``.

Column names and types come from the feature views, so the contract and the Feast repository
cannot drift apart; the rules below only add what a schema cannot say.

The same suite runs on either of great-expectations' engines. A table of at most
``features.validate_on_driver_max_rows`` rows is collected once and validated with pandas on the
driver; a larger one stays on Spark, which runs a job per expectation (~20 per table, each a
fixed cost that dwarfs the check on an hourly run's small tables).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from conf import Settings

if TYPE_CHECKING:
    from feast import FeatureView
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

EVENT_TIMESTAMP = "event_timestamp"
CREATED = "created"
# A Feast dtype as each engine names the column type it reads from the Delta table. On the
# driver, strings are checked value by value; an array is an object column, its length checked
# through the derived column below.
_TYPES = {
    "spark": {
        "String": "StringType",
        "Float64": "DoubleType",
        "Int64": "LongType",
        "Array(Float32)": "ArrayType",
        "timestamp": "TimestampType",
    },
    "pandas": {
        "String": "str",
        "Float64": "float64",
        "Int64": "int64",
        "Array(Float32)": "object",
        "timestamp": "datetime64",
    },
}
# Columns validated through a derived column (GE has no array-length expectation for Spark).
_EMBEDDING_DIM_COLUMN = "_embedding_dim"

Range = tuple[float | None, float | None]
# Written by another stage (the index DAG's content tower), which may not have run yet. Every other
# gold table is the feature jobs' own output: if one is missing, the jobs broke their contract.
OPTIONAL_TABLES = frozenset({"event_embeddings"})


@dataclass(frozen=True)
class TableContract:
    """What a gold table promises beyond its schema."""

    table: str
    # A stalled job shows as a table whose newest row is older than this at the run's end.
    max_age: timedelta
    ranges: dict[str, Range] = field(default_factory=dict)
    allowed: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    nullable: frozenset[str] = frozenset()
    # (a, b): a >= b on every row.
    at_least: tuple[tuple[str, str], ...] = ()
    regex: dict[str, str] = field(default_factory=dict)


_RATE: Range = (0.0, 1.0)
_COUNT: Range = (0, None)
_RATING: Range = (1.0, 5.0)
_LAT: Range = (-90.0, 90.0)
_LNG: Range = (-180.0, 180.0)


def contracts(embedding_dim: int) -> dict[str, TableContract]:
    """Every gold table's contract; ``embedding_dim`` is the content tower's (settings.index)."""
    from features.views import AFFINITY_FEATURES, CATEGORIES

    return {
        c.table: c
        for c in (
            TableContract(
                "user_features",
                max_age=timedelta(days=2),
                ranges={
                    "home_lat": _LAT,
                    "home_lng": _LNG,
                    "history_depth": _COUNT,
                    "attended_count": _COUNT,
                    "attend_rate_shrunk": _RATE,
                    "travel_tolerance_km": (0.0, 500.0),
                    **{a: _RATE for a in AFFINITY_FEATURES},
                },
                allowed={"onboarded": (0, 1)},
                at_least=(("history_depth", "attended_count"),),
            ),
            TableContract(
                "event_features",
                max_age=timedelta(days=2),
                ranges={
                    "price_cents": (0, 10_000_000),
                    "capacity": (1, 1_000_000),
                    "start_ts": (0.0, None),
                    "hour_of_week": (0, 167),
                    "week_of_year": (1, 53),
                    "days_to_nearest_holiday": (0, 366),
                    "venue_lat": _LAT,
                    "venue_lng": _LNG,
                },
                allowed={"is_free": (0, 1), "category": CATEGORIES},
                nullable=frozenset({"series_id"}),
                regex={"market_key": r"^[^|]+\|[^|]+\|[0-9]{1,3}$"},
            ),
            TableContract(
                "event_dynamics",
                max_age=timedelta(days=2),
                ranges={"rsvp_count": _COUNT, "fill_rate": _RATE, "rsvp_velocity_6h": (0.0, None)},
            ),
            TableContract(
                "organizer_stats",
                max_age=timedelta(days=14),
                ranges={
                    "org_event_count": _COUNT,
                    "org_attend_rate": _RATE,
                    "org_noshow_rate": _RATE,
                    "org_rating_mean": _RATING,
                    "org_rating_count": _COUNT,
                },
            ),
            TableContract(
                "venue_stats",
                max_age=timedelta(days=14),
                ranges={
                    "venue_attend_rate": _RATE,
                    "venue_noshow_rate": _RATE,
                    "venue_rating_mean": _RATING,
                    "venue_rating_count": _COUNT,
                },
            ),
            TableContract(
                "series_stats",
                max_age=timedelta(days=30),
                ranges={
                    "series_instances": (1, None),
                    "series_attend_rate": _RATE,
                    "series_noshow_rate": _RATE,
                    "series_rating_mean": _RATING,
                },
            ),
            TableContract(
                "market_rates",
                max_age=timedelta(days=2),
                ranges={"market_rsvp_rate": _RATE, "market_impressions": _COUNT},
                regex={"market_key": r"^[^|]+\|[^|]+\|[0-9]{1,3}$"},
            ),
            TableContract(
                "social",
                max_age=timedelta(days=2),
                ranges={"friends_going": _COUNT},
                allowed={"friends_going_bucket": (0, 1, 2, 3)},
                at_least=(("friends_going", "friends_going_bucket"),),
            ),
            TableContract(
                "event_embeddings",
                max_age=timedelta(days=2),
                ranges={_EMBEDDING_DIM_COLUMN: (embedding_dim, embedding_dim)},
            ),
        )
    }


@dataclass(frozen=True)
class TableResult:
    table: str
    success: bool
    rows: int
    failures: list[str]
    engine: str = "spark"

    def report(self) -> str:
        if self.success:
            return f"gold.{self.table}: {self.rows} rows ({self.engine}), all expectations met"
        return f"gold.{self.table}: {self.rows} rows ({self.engine}), " + "; ".join(self.failures)


def _naive_utc(t: datetime) -> datetime:
    # Spark hands timestamps to Python as naive datetimes in the session zone (UTC, pipelines.spark).
    return t.astimezone(UTC).replace(tzinfo=None)


def build_suite(view: FeatureView, contract: TableContract, end: datetime, engine: str = "spark") -> Any:
    """The expectation suite for one gold table, judged as of ``end`` on ``engine`` (``_TYPES``)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    keys = [c.name for c in view.entity_columns]
    features = {f.name: str(f.dtype) for f in view.features}
    columns = {**{k: "String" for k in keys}, **features}

    types = _TYPES[engine]
    suite = gx.ExpectationSuite(name=f"gold_{contract.table}_{engine}")
    add = suite.add_expectation
    add(gxe.ExpectTableColumnsToMatchSet(column_set=[*columns, EVENT_TIMESTAMP, CREATED], exact_match=False))
    for name, dtype in columns.items():
        add(gxe.ExpectColumnValuesToBeOfType(column=name, type_=types[dtype]))
    for stamp in (EVENT_TIMESTAMP, CREATED):
        add(gxe.ExpectColumnValuesToBeOfType(column=stamp, type_=types["timestamp"]))
    for name in [*keys, *features, EVENT_TIMESTAMP, CREATED]:
        if name not in contract.nullable:
            add(gxe.ExpectColumnValuesToNotBeNull(column=name))
    for name, (low, high) in contract.ranges.items():
        add(gxe.ExpectColumnValuesToBeBetween(column=name, min_value=low, max_value=high))
    for name, values in contract.allowed.items():
        add(gxe.ExpectColumnValuesToBeInSet(column=name, value_set=list(values)))
    for name, pattern in contract.regex.items():
        add(gxe.ExpectColumnValuesToMatchRegex(column=name, regex=pattern))
    for a, b in contract.at_least:
        add(gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A=a, column_B=b, or_equal=True))
    add(
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A=CREATED, column_B=EVENT_TIMESTAMP, or_equal=True)
    )
    add(gxe.ExpectCompoundColumnsToBeUnique(column_list=[*keys, EVENT_TIMESTAMP]))
    add(
        gxe.ExpectColumnMaxToBeBetween(
            column=EVENT_TIMESTAMP,
            min_value=_naive_utc(end - contract.max_age),
            max_value=_naive_utc(end),
        )
    )
    return suite


def _describe(result: Any) -> str:
    cfg = result.expectation_config
    kind = cfg.type if cfg is not None else "?"
    kwargs = cfg.kwargs if cfg is not None else {}
    target = (
        kwargs.get("column")
        or kwargs.get("column_list")
        or (f"{kwargs['column_A']}>={kwargs['column_B']}" if "column_A" in kwargs else "table")
    )
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"{kind}({target}) could not run: {result.exception_info.get('exception_message')}"
    details = result.result or {}
    if "observed_value" in details:
        bounds = {k: kwargs[k] for k in ("min_value", "max_value", "column_set", "type_") if k in kwargs}
        return f"{kind}({target}) failed: observed {details['observed_value']!r}, expected {bounds}"
    count, pct = details.get("unexpected_count"), details.get("unexpected_percent")
    sample = details.get("partial_unexpected_list") or []
    if count is not None and pct is not None:
        return f"{kind}({target}) failed: {count} rows ({pct:.1f}%) unexpected, e.g. {sample[:3]}"
    return f"{kind}({target}) failed"


def _table_exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def _frame(spark: SparkSession, path: str, end: datetime, since: datetime | None) -> DataFrame:
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(path).where(F.col(EVENT_TIMESTAMP) <= F.lit(_naive_utc(end)))
    if since is not None:
        frame = frame.where(F.col(EVENT_TIMESTAMP) >= F.lit(_naive_utc(since)))
    if "embedding" in frame.columns:
        frame = frame.withColumn(_EMBEDDING_DIM_COLUMN, F.size("embedding"))
    return frame


def validate_gold(
    settings: Settings, end: datetime, tables: list[str] | None = None, since: datetime | None = None
) -> dict[str, Any]:
    """Run every gold table's suite as of ``end``; raise ``DataContractError`` listing all failures.

    ``since``: judge only rows from then on (or from the table's freshness horizon, if earlier);
    an interval's run passes the start of its MERGE window. None: every row up to ``end``.

    A missing gold table fails, except one written by another stage (``OPTIONAL_TABLES``:
    ``event_embeddings`` before the index stage first runs), which is reported as ``missing`` and
    skipped; materialization skips its view the same way.
    Returns ``{"end", "since", "tables": {name: {"success", "rows", "engine", "failures"}}, "missing"}``
    (``rows``: the rows judged).
    """
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    from contracts.errors import DataContractError
    from features.repo import FEATURE_VIEWS
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    from pipelines.features.definitions import gold_source_of

    views = {gold_source_of(v).tags["table"]: v for v in FEATURE_VIEWS}
    selected = tables if tables is not None else list(views)
    unknown = set(selected) - set(views)
    if unknown:
        raise ValueError(f"no gold contract for {sorted(unknown)}; known: {sorted(views)}")
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    sources: dict[str, Any] = {
        "spark": context.data_sources.add_spark(name="gold"),
        "pandas": context.data_sources.add_pandas(name="gold_on_driver"),
    }
    on_driver_max = settings.features.validate_on_driver_max_rows
    rules = contracts(settings.index.embedding_dim)
    results: dict[str, TableResult] = {}
    missing: list[str] = []
    for table in selected:
        path = settings.lake.table_path("gold", table)
        if not _table_exists(spark, path):
            if table in OPTIONAL_TABLES:
                log.warning("gold.%s does not exist yet at %s: not validated", table, path)
                missing.append(table)
            else:
                results[table] = TableResult(table, False, 0, [f"no Delta table at {path}"])
            continue
        horizon = end - rules[table].max_age
        frame = _frame(spark, path, end, None if since is None else min(since, horizon)).cache()
        try:
            rows = frame.count()
            # An empty table stays on Spark: its schema still has the types to check.
            engine = "pandas" if 0 < rows <= on_driver_max else "spark"
            batch = (
                sources[engine].add_dataframe_asset(name=table).add_batch_definition_whole_dataframe("batch")
            )
            suite = context.suites.add(build_suite(views[table], rules[table], end, engine))
            dataframe = frame.toPandas() if engine == "pandas" else frame
            data = batch.get_batch(batch_parameters={"dataframe": dataframe})
            # Pass/fail first (the cheap result format); the details only for a table that failed.
            outcome = data.validate(suite, result_format={"result_format": "BOOLEAN_ONLY"})
            if not outcome.success:
                details = {"result_format": "BASIC", "partial_unexpected_count": 3}
                outcome = data.validate(suite, result_format=details)
        finally:
            frame.unpersist()
        failures = [_describe(r) for r in outcome.results if not r.success]
        results[table] = TableResult(table, bool(outcome.success), rows, failures, engine)
        log.info("%s", results[table].report())
    report = {
        "end": end.astimezone(UTC).isoformat(),
        "since": None if since is None else since.astimezone(UTC).isoformat(),
        "tables": {
            t: {"success": r.success, "rows": r.rows, "engine": r.engine, "failures": r.failures}
            for t, r in results.items()
        },
        "missing": missing,
    }
    failed = [r for r in results.values() if not r.success]
    if failed:
        raise DataContractError(
            f"gold validation as of {report['end']}: {len(failed)} table(s) broke their contract, "
            "nothing was materialized:\n  " + "\n  ".join(r.report() for r in failed)
        )
    return report
