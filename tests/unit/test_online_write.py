"""Materialization's columnar output equals Feast's own, value for value and byte for byte.

``pipelines.online_write`` replaces Feast's conversion (``feast.utils._convert_arrow_to_proto``)
and, for SQLite, the store's writes. Every view of ``features/`` gets a table of its own columns
with missing values of each kind (None, NaN, empty strings, a missing embedding) and keys that
repeat; both conversions must return the same tuples, and both SQLite writes the same rows.
(Whole materializations through both engines, to SQLite and Redis, are the integration test's.)
"""

from __future__ import annotations

import math
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from feast import FeatureView, RepoConfig
from feast.infra.online_stores.sqlite import SqliteOnlineStore
from feast.utils import _convert_arrow_to_proto
from feast.value_type import ValueType

import features.views
from pipelines.online_write import _sqlite_rows, _write_sqlite, to_online_rows

VIEWS = [v for v in vars(features.views).values() if isinstance(v, FeatureView)]
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _value(value_type: ValueType, rng: random.Random) -> Any:
    roll = rng.random()
    if value_type == ValueType.DOUBLE:
        return (
            None if roll < 0.1 else math.nan if roll < 0.2 else 0.0 if roll < 0.3 else rng.uniform(-1e6, 1e6)
        )
    if value_type == ValueType.INT64:
        return None if roll < 0.1 else 0 if roll < 0.2 else rng.randrange(-(2**40), 2**40)
    if value_type == ValueType.STRING:
        return None if roll < 0.1 else "" if roll < 0.2 else f"s{rng.randrange(10**6)}"
    if value_type == ValueType.FLOAT_LIST:
        return None if roll < 0.2 else [rng.uniform(-1, 1) for _ in range(4)]
    raise AssertionError(f"no generator for {value_type}: add one, the views use it")


def _table(view: FeatureView, rows: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    arrow = {
        "DOUBLE": pa.float64(),
        "INT64": pa.int64(),
        "STRING": pa.string(),
        "FLOAT_LIST": pa.list_(pa.float32()),
    }
    columns: dict[str, pa.Array] = {}
    for field in [*view.entity_columns, *view.features]:
        value_type = field.dtype.to_value_type()
        if field in view.entity_columns:  # never missing; a quarter of the keys come twice
            values: list[Any] = [f"{field.name}-{i % (rows * 3 // 4)}" for i in range(rows)]
        else:
            values = [_value(value_type, rng) for _ in range(rows)]
        columns[field.name] = pa.array(values, arrow[value_type.name])
    stamps = [T0 + timedelta(seconds=rng.randrange(10**6)) for _ in range(rows)]
    source = view.batch_source
    columns[source.timestamp_field] = pa.array(stamps, pa.timestamp("us", tz="UTC"))
    columns[source.created_timestamp_column] = pa.array(
        [t + timedelta(hours=1) for t in stamps], pa.timestamp("us", tz="UTC")
    )
    return pa.table(columns)


@pytest.mark.parametrize("view", VIEWS, ids=[v.name for v in VIEWS])
def test_the_columnar_conversion_equals_feasts(view: FeatureView) -> None:
    table = _table(view, rows=400, seed=len(view.name))
    join_keys = {e.name: e.dtype.to_value_type() for e in view.entity_columns}

    ours = to_online_rows(table, view, join_keys)
    feasts = _convert_arrow_to_proto(table, view, join_keys)

    assert len(ours) == len(feasts) == 400
    for (key, values, event_ts, created_ts), (f_key, f_values, f_event_ts, f_created_ts) in zip(
        ours, feasts, strict=True
    ):
        assert key == f_key
        assert list(values) == list(f_values)  # the view's feature order
        assert {k: v.SerializeToString() for k, v in values.items()} == {
            k: v.SerializeToString() for k, v in f_values.items()
        }
        assert (event_ts, created_ts) == (f_event_ts, f_created_ts)
        assert type(event_ts) is type(f_event_ts)


def test_every_row_of_a_table_in_several_chunks_is_converted() -> None:
    """Feast's converter reads only a table's first record batch (feast 0.67: 10 of these 30
    rows; the local engine's pandas filter happens to hand it one batch); this one reads all."""
    view = features.views.market_rates
    join_keys = {e.name: e.dtype.to_value_type() for e in view.entity_columns}
    whole = _table(view, rows=30, seed=1)
    chunked = pa.concat_tables([whole.slice(0, 10), whole.slice(10)])
    assert chunked.column(0).num_chunks == 2

    assert to_online_rows(chunked, view, join_keys) == to_online_rows(whole, view, join_keys)


def _online_store(path: Any) -> tuple[SqliteOnlineStore, RepoConfig]:
    config = RepoConfig(
        project="t",
        provider="local",
        registry=str(path / "registry.db"),
        online_store={"type": "sqlite", "path": str(path / "online.db")},
        entity_key_serialization_version=3,
    )
    store = SqliteOnlineStore()
    store.update(config, [], VIEWS, [], [], partial=False)
    return store, config


@pytest.mark.parametrize("view", VIEWS, ids=[v.name for v in VIEWS])
def test_the_sqlite_rows_written_equal_what_feasts_store_writes(view: FeatureView, tmp_path: Any) -> None:
    table = _table(view, rows=400, seed=len(view.name))
    join_keys = {e.name: e.dtype.to_value_type() for e in view.entity_columns}
    written = {}
    for who in ("feast", "ours"):
        store, config = _online_store(tmp_path / who)
        if who == "feast":
            rows = _convert_arrow_to_proto(table, view, join_keys)
            store.online_write_batch(config, view, rows, progress=None)
        else:
            _write_sqlite(store, config, view, _sqlite_rows(table, view, join_keys, version=3))
        with sqlite3.connect(tmp_path / who / "online.db") as db:
            written[who] = db.execute(
                f'SELECT * FROM "t_{view.name}" ORDER BY entity_key, feature_name'
            ).fetchall()
    assert written["ours"] == written["feast"]
    assert len(written["ours"]) == 300 * len(view.features)  # each repeated key's last row
