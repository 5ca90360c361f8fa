"""The serving benchmark: a dense metro where the 15,000-candidate cap binds, N feed requests
through the real request path, beside two baselines run on the same requests in the same run:

* **stock LightGBM** scoring every candidate with both full heads (scoring only);
* **the Feast SDK read path**: the candidates' rows of every event view, read per request
  through ``serving.live.build_event_snapshot`` (``read_online_view`` per view, as the service
  builds its snapshot), plus the user's row as the service reads it, from a local SQLite
  online store made as the project makes one (``load_settings("local")`` on a temporary home,
  ``apply_definitions``) and filled with the synthetic world's rows. The values read back are
  compared with the snapshot the feed path serves from; ``mismatches`` counts the differences.
  The user-row read alone is timed over more requests: the service does it on every request,
  while the feed path's ``user`` stage here reads an in-memory dict.

Heads are synthetic but shaped like the issue's measurement (300 trees, depth 8, on the real
services' model columns: 116 for p_rsvp_v1, 33 for p_attend_v1), so tree-scoring cost is
representative.

    python bench/bench_serving.py --requests 200 [--feast-requests 3] [--json]

The same code as ``turnout bench serving``; the last line with --json is ``{"requests",
"candidates_p50", "p50_ms", "p99_ms", "stages_ms", "baseline_full_lightgbm_ms",
"baseline_feast_sdk_read_ms", "feast_user_read_ms", ...}``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from models.compiled import FIRST_STAGE_TREES, MANIFEST_FILE
from models.heads import Head
from serving.config import ServingConfig
from serving.features import UserRow, assemble, zone_offsets_min
from serving.feed import FeedRequest, serve_feed, weekend_mask
from serving.rank import prefilter
from serving.snapshot import EventSnapshot
from serving.state import ServingState
from serving.synthetic import (
    CENTER,
    MARKET,
    ORGANIZER,
    SERIES,
    VENUE,
    World,
    make_head,
    make_snapshot,
    make_state,
    make_world,
)

if TYPE_CHECKING:
    from feast import FeatureStore, FeatureView

    from conf import Settings

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
# The heads' shape: 300 trees each (no early stopping), of 255 leaves to depth 8 (``stress``, the
# budget's case) or of the 31 leaves ``models.heads.DEFAULT_PARAMS`` trains (``trained``; turnout's
# early stopping usually keeps fewer than 300 trees).
HEAD_SHAPES: dict[str, dict[str, Any]] = {
    "stress": {"num_leaves": 255, "max_depth": 8, "min_data_in_leaf": 20},
    "trained": {},
}
# The entity stats the synthetic catalog draws per event, by the key the online store holds them under.
ENTITY_STATS = {"organizer_id": ORGANIZER, "venue_id": VENUE, "series_id": SERIES, "market_key": MARKET}
# What the published catalog holds per live event (``published.catalog``) that the snapshot reads.
CATALOG_COLUMNS = (
    "event_id",
    "organizer_id",
    "venue_id",
    "series_id",
    "category",
    "metro",
    "timezone",
    "capacity",
    "venue_lat",
    "venue_lng",
    "start_ts",
)
# Online rows are stamped just before the served instant: inside every view's TTL, never after now.
STAMP_LAG = timedelta(minutes=1)


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def with_entity_keys(world: World, seed: int = 0) -> World:
    """The world with venue, series, market and H3 cell keys, and each entity's stats equal
    across its events.

    The synthetic catalog draws organizer, venue, series and market stats per event, but the
    online store holds one row per key: every key here gets the stats of its first event, and the
    snapshot is rebuilt from that catalog, so the feed path and the Feast read see the same values.
    """
    import h3

    from published.geo_index import GeoParams

    rng = np.random.default_rng(seed + 200)
    catalog = world.catalog.copy()
    n = len(catalog)
    catalog["venue_id"] = [f"v{v:05d}" for v in rng.integers(0, max(4, n // 4), n)]
    catalog["series_id"] = [f"s{s:05d}" for s in rng.integers(0, max(4, n // 3), n)]
    catalog["market_key"] = (
        catalog["metro"] + "|" + catalog["category"] + "|" + catalog["hour_of_week"].astype(str)
    )
    params = GeoParams()
    for name, resolution in (("cell5", params.h3_resolution), ("cell7", params.travel_resolution)):
        catalog[name] = [
            h3.latlng_to_cell(a, b, resolution)
            for a, b in zip(catalog["venue_lat"], catalog["venue_lng"], strict=True)
        ]
    catalog["tower_version"] = world.snapshot.tower_version
    for key, columns in ENTITY_STATS.items():
        catalog[columns] = catalog.groupby(key, sort=False)[columns].transform("first")
    return replace(world, catalog=catalog, snapshot=make_snapshot(catalog, world.now))


def run_bench(
    requests: int = 200,
    events: int = 20_000,
    baseline_requests: int = 20,
    feast_requests: int = 3,
    feast_user_requests: int = 50,
    seed: int = 0,
    progress: Progress | None = None,
    compiled_cache: Path | None = None,
    http_requests: int = 100,
    head_shape: str = "stress",
) -> dict[str, Any]:
    """Serve ``requests`` feeds and time both baselines on the first of the same requests.

    With ``compiled_cache`` the heads are compiled as registration compiles them (kept there by
    model hash: the first run pays about a minute per head) and the feed path scores with native
    code; the same requests are then served again with LightGBM's own predictor, for the ratio.
    ``http_requests`` of the same requests are also timed from a client through the real app
    (uvicorn on loopback: routing, validation, JSON). ``feast_requests=0`` skips the Feast
    baseline (its keys are then None). ``progress`` hears
    about slow steps (default: the log).
    """
    say = progress or log.info
    t0 = time.perf_counter()
    say(f"building a synthetic metro of {events:,} events and two 300-tree heads...")
    world = with_entity_keys(make_world(n_events=events, n_users=500, seed=seed), seed)
    heads = (
        make_head("rsvp", rows=12_000, rounds=300, params=HEAD_SHAPES[head_shape], seed=1),
        make_head("attend", rows=12_000, rounds=300, params=HEAD_SHAPES[head_shape], seed=2),
    )
    plain_heads = heads
    # The cut before the distilled first stage: the p_rsvp head's own first 30 trees.
    first_trees = replace(heads[0], first_stage=None)
    if compiled_cache is not None:
        heads = (_compiled(heads[0], compiled_cache, say), _compiled(heads[1], compiled_cache, say))
    setup_s = time.perf_counter() - t0
    config = ServingConfig()
    state = make_state(world, heads, config=config)
    rng = np.random.default_rng(seed)
    users = list(world.users)
    reqs = [
        FeedRequest(
            str(rng.choice(users)),
            world.now,
            CENTER[0] + float(rng.normal(0, 0.01)),
            CENTER[1] + float(rng.normal(0, 0.01)),
            f"bench{i}",
        )
        for i in range(requests)
    ]
    backend = state.models.current.scorer.backend() if state.models.current else "none"
    say(f"serving {requests} feed requests (trees scored by {backend})...")
    totals, candidates, stages = _serve_all(state, reqs)
    lightgbm_path: dict[str, Any] | None = None
    if heads is not plain_heads:
        say(f"the same {requests} requests with LightGBM's own predictor...")
        lightgbm_path = _path_report(*_serve_all(make_state(world, plain_heads, config=config), reqs))

    # Baseline: stock LightGBM, both full heads over every eligible candidate, same requests.
    say(f"stock LightGBM, both heads on every candidate, {min(baseline_requests, requests)} requests...")
    snap = world.snapshot
    columns = sorted({*heads[0].columns, *heads[1].columns, "is_free", "history_depth"})
    full_ms: list[float] = []
    kept_share: dict[str, list[float]] = {"now": [], "first_30_trees": [], "weekend": []}
    tree_ns: dict[str, list[float]] = {}
    for req in reqs[:baseline_requests]:
        assert req.lat is not None and req.lng is not None
        rows = _candidate_rows(state, world, req)
        user = world.users[req.user_id]
        offsets = zone_offsets_min(snap.zones, req.now.timestamp())
        x = pd.DataFrame(
            assemble(
                snap, rows, columns, user, req.lat, req.lng, req.now.timestamp(), np.zeros(len(rows)), offsets
            ),
            columns=columns,
        )
        t = time.perf_counter()
        full = plain_heads[0].predict(x, config.num_threads) * plain_heads[1].predict(x, config.num_threads)
        full_ms.append((time.perf_counter() - t) * 1000)
        # What the first-stage cut costs: the full model's expected attendance of its own top 24
        # with and without the cut (model-estimated, not ground truth); and of the weekend
        # module's top 6 among its own candidates.
        weekend = _weekend(state, world, config, req)
        keep = config.prefilter_keep
        kept = prefilter(x, plain_heads[0], keep, 1, also=weekend, also_keep=config.weekend_keep)
        kept_share["now"].append(_kept_share(full, kept, 24))
        kept_share["first_30_trees"].append(_kept_share(full, prefilter(x, first_trees, keep, 1), 24))
        kept_share["weekend"].append(_kept_share(full, kept, 6, among=weekend))
        for name, cost in row_tree_ns(heads[0], plain_heads[0], x, kept, config).items():
            tree_ns.setdefault(name, []).append(cost)

    feast: dict[str, Any] = {
        "baseline_feast_sdk_read_ms": None,
        "feast_user_read_ms": None,
        "feast_store": None,
    }
    if feast_requests > 0:
        feast = feast_read_baseline(world, state, reqs, feast_requests, feast_user_requests, say)
    http = None
    if http_requests > 0:
        say(f"the first {min(http_requests, requests)} requests again through HTTP (uvicorn on loopback)...")
        http = http_latency(state, reqs[:http_requests])

    return {
        "requests": requests,
        "candidates_p50": int(np.percentile(candidates, 50)),
        "p50_ms": _pct(totals, 50),
        "p99_ms": _pct(totals, 99),
        "stages_ms": {k: {"p50": _pct(v, 50), "p99": _pct(v, 99)} for k, v in stages.items()},
        "baseline_full_lightgbm_ms": {
            "p50": _pct(full_ms, 50),
            "p99": _pct(full_ms, 99),
            "requests": len(full_ms),
        },
        **feast,
        "cut_keeps_expected_attendance": {
            k: {"min": round(min(v), 4), "mean": round(float(np.mean(v)), 4)} for k, v in kept_share.items()
        },
        "http_ms": http,
        "ns_per_row_tree": {k: round(float(np.median(v)), 1) for k, v in tree_ns.items()},
        "scoring": backend,
        "feed_path_lightgbm_predictor": lightgbm_path,
        "heads": {
            h.name: {"trees": h.booster.num_trees(), "columns": len(h.columns), "shape": head_shape}
            for h in heads
        },
        "first_stage": {"columns": len(heads[0].first_stage_columns()), "trees": _first_trees(heads[0])},
        "num_threads": config.num_threads,
        "setup_s": round(setup_s, 1),
    }


def _first_trees(head: Head) -> int:
    return head.first_stage.booster.num_trees() if head.first_stage is not None else FIRST_STAGE_TREES


def _kept_share(full: np.ndarray, kept: np.ndarray, k: int, among: np.ndarray | None = None) -> float:
    """The full model's expected attendance of its best ``k`` (of the rows ``among`` marks) with
    the cut, over the same without it."""
    rows = np.arange(len(full)) if among is None else np.flatnonzero(among)
    best = np.sort(full[rows])[::-1][:k].sum()
    best_cut = np.sort(full[np.intersect1d(rows, kept)])[::-1][:k].sum()
    return float(best_cut / best) if best > 0 else 1.0


def _weekend(state: ServingState, world: World, config: ServingConfig, req: FeedRequest) -> np.ndarray:
    """Which of the request's candidates (``_candidate_rows``) the weekend module ranks."""
    assert req.lat is not None and req.lng is not None
    got = world.index.query(req.lat, req.lng, req.now)
    rows = state.index_rows(world.index)[got.positions]
    return weekend_mask(world.snapshot, rows, got.distance_km, req.now, config.weekend_radius_km)


def _path_report(totals: list[float], _: list[int], stages: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "p50_ms": _pct(totals, 50),
        "p99_ms": _pct(totals, 99),
        "stages_ms": {k: {"p50": _pct(v, 50), "p99": _pct(v, 99)} for k, v in stages.items()},
    }


def _serve_all(
    state: ServingState, reqs: list[FeedRequest]
) -> tuple[list[float], list[int], dict[str, list[float]]]:
    """Each request's total, candidate count and per-stage times (after one warm-up request)."""
    totals: list[float] = []
    candidates: list[int] = []
    stages: dict[str, list[float]] = {}
    serve_feed(state, reqs[0])  # warm caches (zone offsets, numpy paths)
    for req in reqs:
        result = serve_feed(state, req)
        totals.append(result.stages_ms["total"])
        candidates.append(result.candidates)
        for name, ms in result.stages_ms.items():
            if name != "total":
                stages.setdefault(name, []).append(ms)
    return totals, candidates, stages


def http_latency(state: ServingState, reqs: list[FeedRequest]) -> dict[str, float | int]:
    """Client-side latency of ``reqs`` through the app served by uvicorn on a loopback port."""
    import socket
    import threading

    import httpx
    import uvicorn

    from serving.app import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(state), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    times: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 30
            while not server.started:
                if time.monotonic() > deadline:
                    raise RuntimeError("uvicorn did not start within 30 s")
                time.sleep(0.05)
            for i, req in enumerate([reqs[0], *reqs]):  # the first one warms up
                params = {"user_id": req.user_id, "lat": req.lat, "lng": req.lng, "now": req.now.isoformat()}
                t = time.perf_counter()
                response = client.get("/v1/feed", params=params)
                elapsed = (time.perf_counter() - t) * 1000
                response.raise_for_status()
                if i:
                    times.append(elapsed)
    finally:
        server.should_exit = True
        thread.join(10)
    return {"p50": _pct(times, 50), "p99": _pct(times, 99), "requests": len(times)}


def row_tree_ns(
    head: Head, plain: Head, x: pd.DataFrame, kept: np.ndarray, config: ServingConfig
) -> dict[str, float]:
    """Nanoseconds per row and tree of the p_rsvp head's two forests (the first stage on every
    candidate, the full forest on the survivors), as scored by ``head`` and by LightGBM's own
    predictor (``plain``), on one thread of scoring each."""
    first = x[head.first_stage_columns()].to_numpy()
    survivors = x.iloc[kept]
    trees = head.booster.num_trees()
    out = {}
    for backend, h in (("compiled", head), ("lightgbm", plain)):
        if backend == "compiled" and not h.compiled:
            continue
        t = time.perf_counter()
        h.first_stage_raw(first, config.num_threads)
        out[f"first_stage_{backend}"] = (time.perf_counter() - t) * 1e9 / (len(first) * _first_trees(h))
        t = time.perf_counter()
        h.raw(survivors, config.num_threads)
        out[f"full_forest_{backend}"] = (time.perf_counter() - t) * 1e9 / (len(survivors) * trees)
    return out


def _compiled(head: Head, cache: Path, say: Progress) -> Head:
    """``head`` with its trees compiled (reused from ``cache`` when this model was compiled before)."""
    directory = cache / f"{head.name}-{head.model_sha256()[:16]}"
    manifest = directory / MANIFEST_FILE
    if not manifest.exists():
        say(
            f"compiling the {head.name} head's {head.booster.num_trees()} trees (once; cached in {directory})..."
        )
        head.compile_to(directory)
    compiled, why = head.with_compiled(manifest)
    if why:
        say(f"compiled {head.name} head not used: {why}")
    return compiled


def _candidate_rows(state: ServingState, world: World, req: FeedRequest) -> np.ndarray:
    """Snapshot rows of the request's retrieved candidates (the cap applied), as the feed gets them."""
    assert req.lat is not None and req.lng is not None
    got = world.index.query(req.lat, req.lng, req.now)
    rows: np.ndarray = state.index_rows(world.index)[got.positions]
    return rows


# ---- the Feast SDK read path ---------------------------------------------------------------------


@contextmanager
def _quiet_feast() -> Iterator[None]:
    """Feast warns on every Spark source it builds that the API is experimental; once is enough.

    Feast's modules reset the RuntimeWarning filter when imported, so they are imported first.
    """
    import feast.infra.offline_stores.contrib.spark_offline_store.spark  # noqa: F401

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The spark data source API", category=RuntimeWarning)
        warnings.filterwarnings(
            "ignore", message="On demand feature view is an experimental", category=RuntimeWarning
        )
        yield


def apply_feature_repo(settings: Settings) -> dict[str, Any]:
    """``features/`` applied to ``settings``' registry by the project's own ``apply_definitions``.

    That starts Spark (the offline store's session); a session started here is stopped again so
    the timings that follow share the cores with nothing but the bench.
    """
    from pyspark.sql import SparkSession

    from pipelines.features.definitions import apply_definitions

    running = SparkSession.getActiveSession() is not None
    report = apply_definitions(settings)
    started = SparkSession.getActiveSession()
    if not running and started is not None:
        started.stop()
    return report


def online_frame(source: pd.DataFrame, view: FeatureView, stamp: pd.Timestamp) -> pd.DataFrame:
    """``source``'s rows as ``write_to_online_store`` takes them for ``view``: the view's key and
    fields, each in its Field's type, stamped ``stamp`` (event time and creation).

    Int64 fields go through pandas' nullable Int64, which refuses a fractional value: Feast would
    silently truncate it. An ``Array(Float32)`` field ``name`` is gathered from ``name_0..name_k``.
    """
    from feast.value_type import ValueType

    out = pd.DataFrame({c.name: source[c.name].astype(str).to_numpy() for c in view.entity_columns})
    for field in view.features:
        kind = field.dtype.to_value_type()
        if kind == ValueType.FLOAT_LIST:
            spread = [c for c in source.columns if c.startswith(f"{field.name}_")]
            spread.sort(key=lambda c: int(c.rsplit("_", 1)[1]))
            vectors = list(source[spread].to_numpy(np.float32))
            out[field.name] = pd.Series(vectors, index=out.index, dtype=object)
            continue
        values = source[field.name]
        if kind == ValueType.INT64:
            out[field.name] = values.astype("Int64").to_numpy()
        elif kind == ValueType.DOUBLE:
            out[field.name] = values.astype(float).to_numpy()
        elif kind == ValueType.STRING:
            out[field.name] = [None if pd.isna(v) else str(v) for v in values]
        else:
            raise TypeError(f"{view.name}.{field.name}: no synthetic values for {field.dtype}")
    out["event_timestamp"] = stamp
    out["created"] = stamp
    return out


def users_frame(world: World) -> pd.DataFrame:
    """The world's users as ``user_features`` rows (metro and home cell added)."""
    import h3

    from published.geo_index import GeoParams

    resolution = GeoParams().travel_resolution
    rows = [
        {
            "user_id": uid,
            "metro": "nyc",
            "home_cell7": h3.latlng_to_cell(row.values["home_lat"], row.values["home_lng"], resolution),
            **row.values,
        }
        for uid, row in world.users.items()
    ]
    return pd.DataFrame(rows)


def write_world_online(store: FeatureStore, world: World) -> dict[str, int]:
    """Every event view, keyed view and ``user_features`` filled from the world; rows per view."""
    from serving.live import EVENT_VIEWS, KEYED_VIEWS, USER_VIEW

    stamp = pd.Timestamp(world.now - STAMP_LAG)
    sources: dict[str, pd.DataFrame] = {name: world.catalog for name in EVENT_VIEWS}
    for name, key in KEYED_VIEWS.items():
        sources[name] = world.catalog.drop_duplicates(key)
    sources[USER_VIEW] = users_frame(world)
    written: dict[str, int] = {}
    for name, source in sources.items():
        frame = online_frame(source, store.get_feature_view(name), stamp)
        store.write_to_online_store(name, frame)
        written[name] = len(frame)
    return written


def catalog_events(catalog: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """What the published catalog hands ``build_event_snapshot`` for these synthetic rows."""
    frame = catalog.iloc[rows][list(CATALOG_COLUMNS)].reset_index(drop=True)
    frame["rsvps_so_far"] = catalog["rsvp_count"].to_numpy()[rows]
    return frame


def snapshot_mismatches(expected: EventSnapshot, got: EventSnapshot) -> tuple[int, int]:
    """``(values checked, values that differ)`` between ``got`` and the same events of
    ``expected``: every feature of ``expected`` (one it lacks counts as a mismatch on every row)
    and the organizer's event count. NaN equals NaN (both missing)."""
    rows = expected.rows_for(got.event_id)
    if (rows < 0).any():
        raise ValueError(f"{int((rows < 0).sum())} events read back that the snapshot does not hold")
    names = [n for n in expected.feature_names if n in got.feature_names]
    lacking = len(expected.feature_names) - len(names)
    a = np.column_stack(
        [expected.features[rows][:, expected.column_positions(names)], expected.org_event_count[rows]]
    )
    b = np.column_stack([got.features[:, got.column_positions(names)], got.org_event_count])
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return int(a.size) + lacking * len(rows), int((~same).sum()) + lacking * len(rows)


def user_mismatches(expected: UserRow, got: UserRow | None) -> tuple[int, int]:
    """``(values checked, values that differ)`` over ``expected``'s features."""
    checked = len(expected.values)
    if got is None:
        return checked, checked
    return checked, sum(got.values.get(k) != v for k, v in expected.values.items())


def feast_read_baseline(
    world: World,
    state: ServingState,
    reqs: list[FeedRequest],
    n_requests: int,
    user_requests: int,
    say: Progress,
) -> dict[str, Any]:
    """The Feast SDK read path on the first ``n_requests`` requests, from a throwaway local store."""
    say("importing feast...")
    with _quiet_feast(), tempfile.TemporaryDirectory(prefix="turnout-bench-feast-") as home:
        from conf import load_settings
        from features.views import EMBEDDING_DIM
        from published.feature_store import OnlineView, open_online_store
        from serving.live import EVENT_VIEWS, KEYED_VIEWS, USER_VIEW, build_event_snapshot

        settings = load_settings("local", home=home, environ={})
        say(f"applying features/ to a local Feast store in {home} (starts Spark once)...")
        t = time.perf_counter()
        apply_feature_repo(settings)
        apply_s = time.perf_counter() - t
        store = open_online_store(settings)  # as serving opens it: no Spark
        say(f"writing {len(world.catalog):,} events and {len(world.users):,} users to the online store...")
        t = time.perf_counter()
        written = write_world_online(store, world)
        write_s = time.perf_counter() - t

        user_names = frozenset(f.name for f in store.get_feature_view(USER_VIEW).features)
        tower = world.snapshot.tower_version
        user_view = OnlineView.of(store, USER_VIEW)

        class Users:  # the service's per-request read (serving.live.LiveSources.get), on this store
            @staticmethod
            def get(user_id: str, at: Any) -> UserRow:
                columns = user_view.read(store, "user_id", [user_id], at)
                return UserRow(user_id, {k: v[0] for k, v in columns.items()}, world.users[user_id].friends)

        users = Users()
        now = world.now
        first = catalog_events(world.catalog, _candidate_rows(state, world, reqs[0])[:100])
        build_event_snapshot(store, first, now, EMBEDDING_DIM, tower, user_names)  # warm the registry cache
        users.get(reqs[0].user_id, now)

        read_ms: list[float] = []
        rows_read: list[int] = []
        keys_read: list[int] = []
        checked = mismatched = 0
        for i, req in enumerate(reqs[:n_requests]):
            rows = _candidate_rows(state, world, req)
            frame = catalog_events(world.catalog, rows)
            say(f"reading {len(frame):,} candidates through the Feast SDK, request {i + 1}/{n_requests}...")
            t = time.perf_counter()
            snapshot = build_event_snapshot(store, frame, now, EMBEDDING_DIM, tower, user_names)
            user = users.get(req.user_id, now)
            read_ms.append((time.perf_counter() - t) * 1000)
            rows_read.append(len(frame))
            # Entity keys the SDK serialized: each event once per event view, each distinct
            # organizer, venue, series and market once, and the user.
            keyed = world.catalog.iloc[rows]
            keys_read.append(
                len(EVENT_VIEWS) * len(frame) + sum(keyed[k].nunique() for k in KEYED_VIEWS.values()) + 1
            )
            c, m = snapshot_mismatches(world.snapshot, snapshot)
            cu, mu = user_mismatches(world.users[req.user_id], user)
            checked, mismatched = checked + c + cu, mismatched + m + mu

        say(f"reading the user row alone through the Feast SDK, {user_requests} requests...")
        user_ms: list[float] = []
        user_checked = user_mismatched = 0
        for req in (reqs * (user_requests // max(1, len(reqs)) + 1))[:user_requests]:
            t = time.perf_counter()
            user = users.get(req.user_id, now)
            user_ms.append((time.perf_counter() - t) * 1000)
            c, m = user_mismatches(world.users[req.user_id], user)
            user_checked, user_mismatched = user_checked + c, user_mismatched + m

    return {
        "baseline_feast_sdk_read_ms": {
            "p50": _pct(read_ms, 50),
            "p99": _pct(read_ms, 99),
            "requests": len(read_ms),
            "rows_per_request": int(np.percentile(rows_read, 50)),
            "keys_per_request": int(np.percentile(keys_read, 50)),
            "values_checked": checked,
            "mismatches": mismatched,
        },
        "feast_user_read_ms": {
            "p50": _pct(user_ms, 50) if user_ms else None,
            "p99": _pct(user_ms, 99) if user_ms else None,
            "requests": len(user_ms),
            "values_checked": user_checked,
            "mismatches": user_mismatched,
        },
        "feast_store": {"apply_s": round(apply_s, 1), "write_s": round(write_s, 1), "rows_written": written},
    }


TABLE_COLUMNS = ("stage", "p50 ms", "p99 ms", "p50 ms, LightGBM predictor", "p99 ms, LightGBM predictor")


def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """The report as rows of (what, p50, p99, p50 with LightGBM's predictor, p99 with it): the
    per-stage feed path, then the baselines (their times in the first pair)."""
    lgb_path = report.get("feed_path_lightgbm_predictor") or {}
    lgb_stages = lgb_path.get("stages_ms", {})

    def other(name: str, q: str) -> str:
        v = lgb_stages.get(name)
        return f"{v[q]:.2f}" if v else "-"

    rows: list[tuple[str, ...]] = [
        (name, f"{v['p50']:.2f}", f"{v['p99']:.2f}", other(name, "p50"), other(name, "p99"))
        for name, v in report["stages_ms"].items()
    ]
    rows.append(
        (
            "**total (feed path)**",
            f"**{report['p50_ms']:.2f}**",
            f"**{report['p99_ms']:.2f}**",
            f"{lgb_path['p50_ms']:.2f}" if lgb_path else "-",
            f"{lgb_path['p99_ms']:.2f}" if lgb_path else "-",
        )
    )
    h = report.get("http_ms")
    if h:
        rows.append(
            (f"through HTTP: uvicorn on loopback, client-side ({h['requests']} of the requests)",
             f"{h['p50']:.2f}", f"{h['p99']:.2f}", "", "")
        )  # fmt: skip
    b = report["baseline_full_lightgbm_ms"]
    rows.append(
        ("baseline: stock LightGBM, both heads on every candidate (scoring only)", f"{b['p50']:.2f}",
         f"{b['p99']:.2f}", "", "")
    )  # fmt: skip
    f, u = report["baseline_feast_sdk_read_ms"], report["feast_user_read_ms"]
    if f is not None:
        rows.append(
            (f"baseline: Feast SDK read of {f['rows_per_request']:,} candidates from every event view + the "
             "user row (read only)", f"{f['p50']:.2f}", f"{f['p99']:.2f}", "", "")
        )  # fmt: skip
        rows.append(
            ("Feast SDK read of the user row alone (the service's per-request read)", f"{u['p50']:.2f}",
             f"{u['p99']:.2f}", "", "")
        )  # fmt: skip
    return rows


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the table leaves out: sizes, the cut's cost, the Feast read's correctness."""
    cut, first = report["cut_keeps_expected_attendance"], report["first_stage"]
    lines = [
        f"{report['requests']} requests, candidates p50 {report['candidates_p50']:,}, heads {report['heads']}, "
        f"trees scored by {report['scoring']}, {report['num_threads']} scoring thread(s). First stage: "
        f"{first['trees']} trees on {first['columns']} columns. Of the full model's expected attendance, "
        f"the cut keeps {cut['now']} of its top 24 (by the head's first 30 trees: {cut['first_30_trees']}) and {cut['weekend']} of the "
        "weekend module's top 6"
    ]
    ns = report["ns_per_row_tree"]
    if "first_stage_compiled" in ns:
        lines.append(
            f"Tree walking, ns per row and tree (median of the baseline's requests): the first stage "
            f"{ns['first_stage_compiled']} compiled, {ns['first_stage_lightgbm']} with LightGBM's predictor; "
            f"p_rsvp's full forest on the survivors {ns['full_forest_compiled']} compiled, "
            f"{ns['full_forest_lightgbm']} with LightGBM's. lleaves publishes ~3.2 (31.88 us for a batch of "
            f"100 rows of its NYC-taxi model: LightGBM's default 100 trees of 31 leaves, on an i7-4770)"
        )
    f, u = report["baseline_feast_sdk_read_ms"], report["feast_user_read_ms"]
    if f is not None:
        lines.append(
            f"Feast SDK read: {f['requests']} request(s) of {f['keys_per_request']:,} entity keys, "
            f"{f['mismatches']} of {f['values_checked']:,} values differ from the snapshot; user row alone: "
            f"{u['requests']} requests, {u['mismatches']} of {u['values_checked']:,} values differ"
        )
    return lines


def print_table(report: dict) -> None:
    print("| " + " | ".join(TABLE_COLUMNS) + " |")
    print("| --- |" + " ---: |" * (len(TABLE_COLUMNS) - 1))
    for row in table_rows(report):
        print("| " + " | ".join(row) + " |")
    print("\n" + "\n".join(summary_lines(report)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument(
        "--feast-requests",
        type=int,
        default=3,
        help="requests also read through the Feast SDK (~5 s each at 15,000 candidates; 0 skips it)",
    )
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="score with LightGBM's predictor only (default: compile the heads as registration does, "
        "cached under $TURNOUT_HOME/cache/compiled, and serve the same requests both ways)",
    )
    parser.add_argument(
        "--heads",
        choices=sorted(HEAD_SHAPES),
        default="stress",
        help="stress: 300 trees of 255 leaves each (the budget's case); trained: 300 of 31, as turnout trains",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from conf import load_settings

    report = run_bench(
        requests=args.requests,
        events=args.events,
        feast_requests=args.feast_requests,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
        compiled_cache=None if args.no_compile else load_settings().home / "cache" / "compiled",
        head_shape=args.heads,
    )
    print_table(report)
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
