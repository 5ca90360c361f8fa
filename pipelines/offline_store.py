"""Feast's Spark offline store with a sort-based point-in-time join behind the same API.

Feast's stock Spark store joins each label row to *every* row of its entity within the view's TTL
(an equi-join on the keys with a range condition) and then keeps the newest. For an event with
hundreds of impressions and hundreds of hourly dynamics rows that intermediate is their product
(7.7M shuffled rows for one view of the demo's 355k-row p_rsvp set). This store answers the same
question with one sort per view instead of a join:

* put the view's rows and the label rows of the same keys in one stream, ordered by the instant
  each becomes usable: a feature row at ``max(event_timestamp, created)`` (``event_timestamp``
  alone without ``filter_by_created_timestamp``), a label at its own instant, features first on a
  tie (a value known at T is visible at T);
* a running ``MAX(STRUCT(event_timestamp, created, features...))`` down that stream is, at each
  label, the row Feast would pick among those visible then: the newest ``event_timestamp``, then
  the newest ``created`` (struct comparison is field by field);
* the TTL is applied to the winner: if even the newest visible row is older than ``T - ttl``,
  every visible row is, and the features are missing;
* each label row rides through the sort as one struct and comes out with the view's features
  appended, so the views chain (one shuffle each) with no join back.

Everything else is Feast's: the feature service and view definitions, the query contexts, the
on-demand views (their own ``transform_arrow``, handed only the columns they read; here in Spark's
Python workers, so the joined rows need not reach the driver), the staging
location. It is the default (``feast.offline_store`` in the settings; it appears in
``feature_store.yaml`` as the offline store's type); ``"spark"`` selects the stock store. Cases it
does not handle (no entity frame, full feature names, date-partitioned sources) go to the stock
store. ``tests/integration`` holds the two equal on the same inputs (whole services included) and
both equal to a brute-force oracle; ``bench/bench_training.py`` times them side by side.
"""

from __future__ import annotations

import logging
import operator
import uuid
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from feast.infra.offline_stores.contrib.spark_offline_store.spark import (
    SparkOfflineStore,
    SparkOfflineStoreConfig,
    SparkRetrievalJob,
    _get_entity_df_event_timestamp_range,
    _get_entity_schema,
    _upload_entity_df,
    get_spark_session_or_start_new_with_repoconfig,
)
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.infra.offline_stores.offline_store import RetrievalMetadata
from feast.infra.offline_stores.offline_utils import (
    FeatureViewQueryContext,
    get_feature_view_query_context,
    get_temp_entity_table_name,
    infer_event_timestamp_from_entity_df,
)
from feast.on_demand_feature_view import OnDemandFeatureView
from feast.types import from_feast_to_pyarrow_type
from pydantic import StrictStr

if TYPE_CHECKING:
    from datetime import datetime

    from feast import FeatureView, Field
    from feast.data_source import DataSource
    from feast.infra.offline_stores.offline_store import RetrievalJob
    from feast.infra.registry.base_registry import BaseRegistry
    from feast.repo_config import RepoConfig
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_T, _KIND, _VAL, _ASK, _EV, _CR = "_pit_t", "_pit_kind", "_pit_val", "_pit_ask", "_pit_ev", "_pit_cr"


class SortedSparkOfflineStoreConfig(SparkOfflineStoreConfig):
    """The Spark offline store's settings; only the type differs."""

    type: StrictStr = "pipelines.offline_store.SortedSparkOfflineStore"


def join_as_of(
    labels: DataFrame, rows: DataFrame, keys: list[str], features: list[str], ttl_s: int, by_created: bool
) -> DataFrame:
    """``labels`` with ``features`` appended: for each label row, the view's row Feast's join would pick.

    ``labels`` has the join ``keys`` and ``_pit_t`` (the label instant), and any other columns,
    which are carried through unchanged; ``rows`` has the keys, ``_pit_ev`` (event timestamp),
    ``_pit_cr`` (created, may be null without ``by_created``) and the features. A label row with
    a missing key gets no features, as an equi-join would give it. One shuffle and sort per view,
    and no join back: each label row travels through the sort as one struct.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if by_created:
        rows = rows.where(F.col(_CR).isNotNull())
        available = F.greatest(F.col(_EV), F.col(_CR))
    else:
        available = F.col(_EV)
    keyed = reduce(operator.and_, (F.col(k).isNotNull() for k in keys), F.lit(True))
    value = F.struct(F.col(_EV), F.col(_CR), *(F.col(f) for f in features))
    label = F.struct(*(F.col(c) for c in labels.columns))
    facts = rows.where(keyed).select(
        *keys,
        available.alias(_T),
        F.lit(0).alias(_KIND),
        value.alias(_VAL),
        F.lit(None).cast(labels.select(label).schema[0].dataType).alias(_ASK),
    )
    asks = labels.select(
        *keys,
        F.col(_T),
        F.lit(1).alias(_KIND),
        F.lit(None).cast(facts.schema[_VAL].dataType).alias(_VAL),
        label.alias(_ASK),
    )
    stream = (
        Window.partitionBy(*keys).orderBy(_T, _KIND).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    best = facts.unionByName(asks).select(_KIND, _ASK, F.max(_VAL).over(stream).alias("_best"))
    answered = best.where(F.col(_KIND) == 1)
    fresh = F.col(f"_best.{_EV}").isNotNull()
    if ttl_s > 0:
        fresh &= F.col(f"_best.{_EV}") >= F.col(f"{_ASK}.{_T}") - F.expr(f"INTERVAL {int(ttl_s)} SECONDS")
    return answered.select(f"{_ASK}.*", *(F.when(fresh, F.col(f"_best.{f}")).alias(f) for f in features))


def _source_rows(spark: SparkSession, ctx: FeatureViewQueryContext, by_created: bool) -> DataFrame:
    """The view's rows within the labels' reach, keys renamed to their join keys."""
    from pyspark.sql import functions as F

    ev = F.col(ctx.timestamp_field)
    frame = spark.sql(f"SELECT * FROM {ctx.table_subquery}").where(
        ev <= F.lit(ctx.max_event_timestamp).cast("timestamp")
    )
    if ctx.ttl and ctx.min_event_timestamp is not None:
        frame = frame.where(ev >= F.lit(ctx.min_event_timestamp).cast("timestamp"))
    created = (
        F.col(ctx.created_timestamp_column) if ctx.created_timestamp_column else F.lit(None).cast("timestamp")
    )
    return frame.select(
        *(F.expr(selection) for selection in ctx.entity_selections),
        ev.alias(_EV),
        created.alias(_CR),
        *(F.col(f).alias(ctx.field_mapping.get(f, f)) for f in ctx.features),
    )


class SortedSparkOfflineStore(SparkOfflineStore):
    """``SparkOfflineStore`` whose historical retrieval sorts instead of range-joining."""

    @staticmethod
    def get_historical_features(
        config: RepoConfig,
        feature_views: list[FeatureView],
        feature_refs: list[str],
        entity_df: Any,
        registry: BaseRegistry,
        project: str,
        full_feature_names: bool = False,
        filter_by_created_timestamp: bool = False,
        **kwargs: Any,
    ) -> RetrievalJob:
        from pyspark.sql import functions as F

        stock = (
            entity_df is None
            or full_feature_names
            or any(
                not isinstance(v.batch_source, SparkSource) or v.batch_source.date_partition_column
                for v in feature_views
            )
        )
        if stock:
            return SparkOfflineStore.get_historical_features(
                config, feature_views, feature_refs, entity_df, registry, project,
                full_feature_names, filter_by_created_timestamp, **kwargs,
            )  # fmt: skip
        spark = get_spark_session_or_start_new_with_repoconfig(store_config=config.offline_store)
        schema = _get_entity_schema(spark_session=spark, entity_df=entity_df)
        timestamp_col = infer_event_timestamp_from_entity_df(entity_schema=schema)
        reach = _get_entity_df_event_timestamp_range(entity_df, timestamp_col, spark)
        entity_view = get_temp_entity_table_name()
        _upload_entity_df(
            spark_session=spark,
            table_name=entity_view,
            entity_df=entity_df,
            event_timestamp_col=timestamp_col,
        )
        columns = list(schema.keys())
        result = spark.table(entity_view).withColumn(_T, F.col(timestamp_col).cast("timestamp"))
        contexts = get_feature_view_query_context(feature_refs, feature_views, registry, project, reach)
        for ctx in contexts:
            names = [ctx.field_mapping.get(f, f) for f in ctx.features]
            rows = _source_rows(spark, ctx, filter_by_created_timestamp)
            by_created = filter_by_created_timestamp and bool(ctx.created_timestamp_column)
            result = join_as_of(result, rows, ctx.entities, names, ctx.ttl, by_created)
        final = f"turnout_pit_{uuid.uuid4().hex}"
        result.drop(_T).createOrReplaceTempView(final)
        log.info("sorted point-in-time join over %d views for %s", len(contexts), feature_refs[:3])
        return _OnDemandInSparkRetrievalJob(
            spark_session=spark,
            query=f"SELECT * FROM {final}",
            full_feature_names=full_feature_names,
            on_demand_feature_views=OnDemandFeatureView.get_requested_odfvs(feature_refs, project, registry),
            metadata=RetrievalMetadata(
                features=feature_refs,
                keys=[c for c in columns if c != timestamp_col],
                min_event_timestamp=reach[0],
                max_event_timestamp=reach[1],
            ),
            config=config,
        )

    @staticmethod
    def pull_latest_from_table_or_query(
        config: RepoConfig,
        data_source: DataSource,
        join_key_columns: list[str],
        feature_name_columns: list[str],
        timestamp_field: str,
        created_timestamp_column: str | None,
        start_date: datetime,
        end_date: datetime,
    ) -> RetrievalJob:
        """Feast's own pull (the newest row per key in the window), counting what it returns."""
        job = SparkOfflineStore.pull_latest_from_table_or_query(
            config, data_source, join_key_columns, feature_name_columns,
            timestamp_field, created_timestamp_column, start_date, end_date,
        )  # fmt: skip
        assert isinstance(job, SparkRetrievalJob) and isinstance(data_source, SparkSource)
        return _CountedRetrievalJob(
            source=data_source.path or data_source.table or "",
            spark_session=job.spark_session,
            query=job.query,
            full_feature_names=job.full_feature_names,
            config=config,
            metadata=job._metadata,
        )


# Rows the last materialization pull of each source (its Delta path) returned: what Feast then
# wrote online, one row per key. Read by pipelines.features.materialize for its report, instead
# of a second Spark job per view that counted the same keys (more than half of the demo's
# materialization time).
PULLED_ROWS: dict[str, int] = {}


class _CountedRetrievalJob(SparkRetrievalJob):
    """A pull whose row count is kept in ``PULLED_ROWS`` once Feast reads it."""

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._source = source

    def _to_arrow_internal(self, timeout: int | None = None) -> pa.Table:
        table = super()._to_arrow_internal(timeout=timeout)
        PULLED_ROWS[self._source] = table.num_rows
        return table


def _asked(view: OnDemandFeatureView, refs: Sequence[str]) -> list[Field]:
    """The outputs of ``view`` that ``refs`` ask for (all of them when none is named), in the
    view's order, as ``RetrievalJob.to_arrow`` reads them."""
    names = (view.name, view.projection.name_to_use())
    wanted = {ref.split(":", 1)[1] for ref in refs if ref.split(":", 1)[0] in names}
    return [f for f in view.features if not wanted or f.name in wanted]


def on_demand_columns(table: pa.Table, views: Sequence[OnDemandFeatureView], refs: Sequence[str]) -> pa.Table:
    """``table`` with the requested outputs of each on-demand view appended, typed as the view declares.

    ``RetrievalJob.to_arrow`` passes every on-demand view the whole joined table, and a Python-mode
    view starts with ``to_pydict()`` of it: ~150 columns and a 64-float embedding list per row
    became ~80M Python objects per view for the demo's p_rsvp set (22 s of a 155 s build). Here the
    same ``transform_arrow`` runs on the columns the view reads (its source projections and
    request fields). The declared type holds where a batch's values are all missing.
    """
    for view in views:
        inputs = {f.name for r in view.source_request_sources.values() for f in r.schema}
        for projection in view.source_feature_view_projections.values():
            inputs |= {f.name for f in projection.features}
            inputs |= {f"{projection.name}__{f.name}" for f in projection.features}
        out = view.transform_arrow(table.select([c for c in table.column_names if c in inputs]))
        for field in _asked(view, refs):
            table = table.append_column(
                field.name, out[field.name].cast(from_feast_to_pyarrow_type(field.dtype))
            )
    return table


def with_on_demand_views(
    frame: DataFrame, views: Sequence[OnDemandFeatureView], refs: Sequence[str]
) -> DataFrame:
    """``on_demand_columns`` on Spark, batch by batch in its Python workers (``mapInArrow``).

    The joined rows never come to the driver, so a training set larger than the driver's memory is
    built and written by the executors. Each worker unpickles the views once (importing Feast).
    """
    if not views:
        return frame
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    outputs = pa.schema(
        pa.field(f.name, from_feast_to_pyarrow_type(f.dtype)) for view in views for f in _asked(view, refs)
    )
    views, refs = list(views), list(refs)

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from on_demand_columns(pa.Table.from_batches([batch]), views, refs).to_batches()

    return frame.mapInArrow(apply, StructType([*frame.schema.fields, *from_arrow_schema(outputs).fields]))


class _OnDemandInSparkRetrievalJob(SparkRetrievalJob):
    """Feast's Spark retrieval job with the on-demand views applied in Spark (``with_on_demand_views``).

    The stock job leaves them to ``to_arrow`` on the driver (and ``to_spark_df`` skips them); here
    ``to_spark_df`` carries them, and every other read (``to_arrow`` through the staging location,
    ``to_df``) goes through it, each view handed only the columns it reads.
    """

    def __init__(self, *, on_demand_feature_views: list[OnDemandFeatureView], **kwargs: Any) -> None:
        super().__init__(on_demand_feature_views=[], **kwargs)
        self._crosses = on_demand_feature_views

    def to_spark_df(self) -> DataFrame:
        refs = self.metadata.features if self.metadata else []
        return with_on_demand_views(super().to_spark_df(), self._crosses, refs)
