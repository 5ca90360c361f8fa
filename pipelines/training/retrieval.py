"""Point-in-time training frames through Feast's historical retrieval (the offline store).

``historical_features(settings, entity_df, service)``: for each label row, every feature of the
service as it was known at the row's instant, hiding values written after it, as pandas.
``historical_features_frame``: the same as a Spark DataFrame that never reaches the driver (for
training sets).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from feast.infra.offline_stores.contrib.spark_offline_store.spark import SparkRetrievalJob

from conf import Settings
from pipelines.feast_store import get_store
from pipelines.offline_store import with_on_demand_views
from published.feature_store import service_feature_names

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureService, FeatureStore
    from pyspark.sql import DataFrame as SparkDataFrame

log = logging.getLogger(__name__)

_ROW = "_turnout_row"


def _refs(store: FeatureStore, features: str | Sequence[str]) -> tuple[FeatureService | list[str], list[str]]:
    """Feast's feature argument and the output feature names, for a service name or a ref list."""
    if isinstance(features, str):
        service = store.get_feature_service(features)
        return service, service_feature_names(service)
    return list(features), [ref.split(":", 1)[1] for ref in features]


def historical_features(
    settings: Settings,
    entity_df: pd.DataFrame,
    features: str | Sequence[str],
    filter_by_created: bool = True,
) -> pd.DataFrame:
    """Point-in-time features for each row of ``entity_df``, in its order (same index).

    ``features`` is a feature service name (training reads the same service serving does) or,
    for tests and analysis, a list of ``view:feature`` references. ``entity_df`` holds the join
    keys, ``event_timestamp`` (the label instant, aware UTC) and the request inputs of any
    on-demand view requested (``request_lat``, ``request_lng``, ``request_ts``,
    ``request_utc_offset_min``); other columns are carried through, followed by the features.

    A row sees, per view, the newest value with ``event_timestamp <= T`` *and* ``created <= T``
    (and within the view's TTL): ``created_timestamp_column`` alone only breaks ties, so a value
    written after T (a late or recomputed row) would otherwise leak into the past. With rows
    stamped ``created`` at write time, this is what serving could have read at T, up to the
    materialization lag. ``filter_by_created=False`` drops the second condition: only for history
    rebuilt in one batch, whose ``created`` is the rebuild's time and says nothing about when a
    value was known (every row would be hidden); ``event_timestamp`` alone then decides.

    The result is read through Feast's staging location (Spark writes Parquet, pyarrow reads it):
    ``to_df`` would collect it on the driver's JVM heap.
    """
    store = get_store(settings)
    refs, names = _refs(store, features)
    if _ROW in entity_df.columns:
        raise ValueError(f"entity_df may not have a column named {_ROW}")
    _clear_old_staging(settings)
    # The Spark join does not keep the entity frame's order; a row number puts it back.
    numbered = entity_df.assign(**{_ROW: range(len(entity_df))})
    job = store.get_historical_features(
        entity_df=numbered, features=refs, filter_by_created_timestamp=filter_by_created
    )
    frame = job.to_arrow().to_pandas().sort_values(_ROW).set_index(_ROW)
    frame.index = entity_df.index
    return frame[[*entity_df.columns, *names]]


def historical_features_frame(
    settings: Settings,
    entity_df: SparkDataFrame,
    features: str | Sequence[str],
    filter_by_created: bool = True,
) -> SparkDataFrame:
    """``historical_features`` left in Spark, in no particular order: for sets larger than the driver.

    ``entity_df`` is a Spark DataFrame (a pandas frame would become an in-memory relation that the
    join's plan copies once per feature view; ~400k rows exhausted the driver's heap). The
    on-demand views run in Spark's Python workers (Feast's stock store leaves them to ``to_arrow``
    and its ``to_spark_df`` skips them; the sorted store's ``to_spark_df`` carries them already).
    """
    store = get_store(settings)
    refs, names = _refs(store, features)
    # The Spark offline store takes a Spark DataFrame; FeatureStore's annotation omits it.
    job = store.get_historical_features(
        entity_df=entity_df,  # type: ignore[arg-type]
        features=refs,
        filter_by_created_timestamp=filter_by_created,
    )
    assert isinstance(job, SparkRetrievalJob), (
        f"historical_features_frame needs a Spark offline store, not {job}"
    )
    asked = job.metadata.features if job.metadata else []
    frame = with_on_demand_views(job.to_spark_df(), job.on_demand_feature_views, asked)
    return frame.select(*entity_df.columns, *names)


def _clear_old_staging(settings: Settings, older_than_s: float = 6 * 3600) -> None:
    """Remove join results a local staging folder kept from earlier reads (Feast never does)."""
    import shutil
    import time

    root = Path(settings.feast.staging_location)
    if not settings.feast.staging_location.startswith("/") or not root.is_dir():
        return
    for child in root.iterdir():
        if child.is_dir() and time.time() - child.stat().st_mtime > older_than_s:
            shutil.rmtree(child, ignore_errors=True)
