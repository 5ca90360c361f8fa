"""Benchmark the geo-time index against a brute-force numpy scan, in one run.

    python bench/bench_index.py [--events 1000000] [--queries 300] [--seed 0]

World: ``--events`` live events starting uniformly over the next 90 days. A fifth of them sit in
one dense metro (New York, ~20 km spread), dense enough that the 15,000 in-radius cap binds
within the 21-day window; the rest are spread over 80 ordinary metros. Users are placed around
the dense center (and around an ordinary metro for the second query row). Every index answer is
checked against the scan's answer before any number is printed.

Rows: build (arrays from a frame: H3 cells, sort, CSR), validation (``check_structure``, what
publication runs), write (the ``.npy`` files); then query latency per case, index vs scan, and
the scan/index ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.geo import chord_sq, unit_vectors
from contracts.instants import MICROS_PER_SECOND, to_micros
from published.geo_index import GeoIndex, GeoParams, build_geo_index, check_structure
from published.index_store import write_geo_index

NOW = datetime(2026, 11, 6, 18, 0, tzinfo=UTC)
DENSE = (40.7128, -74.0060)


def make_events(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_dense = n // 5
    lat = np.empty(n)
    lng = np.empty(n)
    lat[:n_dense] = DENSE[0] + rng.normal(0, 0.18, n_dense)
    lng[:n_dense] = DENSE[1] + rng.normal(0, 0.24, n_dense)
    centers_lat = np.degrees(np.arcsin(rng.uniform(-0.8, 0.9, 80)))
    centers_lng = rng.uniform(-180, 180, 80)
    which = rng.integers(0, 80, n - n_dense)
    lat[n_dense:] = centers_lat[which] + rng.normal(0, 0.2, n - n_dense)
    lng[n_dense:] = centers_lng[which] + rng.normal(0, 0.2, n - n_dense) / np.cos(
        np.radians(centers_lat[which])
    )
    lng = (lng + 540) % 360 - 180
    start = to_micros(NOW) + rng.integers(60, 90 * 24 * 60, n) * 60_000_000
    ids = np.char.add("e", np.arange(n).astype(np.str_))
    frame = pd.DataFrame({"event_id": ids, "start_us": start, "lat": np.clip(lat, -89.9, 89.9), "lng": lng})
    frame.attrs["ordinary_center"] = (float(centers_lat[0]), float(centers_lng[0]))
    return frame


def percentiles(samples: list[float]) -> tuple[float, float]:
    arr = np.asarray(samples) * 1000.0
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def scan(
    xyz: np.ndarray,
    start: np.ndarray,
    rank: np.ndarray,
    ids: np.ndarray,
    lat: float,
    lng: float,
    now: datetime,
    params: GeoParams,
) -> np.ndarray:
    """The best brute force numpy offers: one pass over every event, integer ranks for the order."""
    now_us = to_micros(now)
    end_us = now_us + params.horizon_days * 86_400 * MICROS_PER_SECOND
    point = unit_vectors([lat], [lng])[0]
    hit = np.flatnonzero(
        (start > now_us) & (start <= end_us) & (chord_sq(xyz, point) <= params.chord_limit_sq)
    )
    if len(hit) > params.max_candidates:
        hit = hit[np.argpartition(rank[hit], params.max_candidates - 1)[: params.max_candidates]]
    out: np.ndarray = ids[hit[np.argsort(rank[hit])]]
    return out


def run_queries(
    index: GeoIndex,
    center: tuple[float, float],
    spread: float,
    n: int,
    n_scan: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    # The scan gets the same precomputed arrays (unit vectors, ranks), in event order.
    order = np.argsort(index.rank)
    xyz = np.ascontiguousarray(index.xyz[order])
    start, rank, ids = index.start_us[order], index.rank[order], index.event_ids[order]
    t_index: list[float] = []
    t_scan: list[float] = []
    sizes, truncated = [], 0
    for q in range(n):
        lat, lng = center[0] + rng.normal(0, spread), center[1] + rng.normal(0, spread)
        now = NOW + timedelta(minutes=float(rng.uniform(0, 60)))
        t0 = time.perf_counter()
        got = index.query(lat, lng, now)
        t_index.append(time.perf_counter() - t0)
        sizes.append(got.in_radius)
        truncated += got.truncated
        if q < n_scan:
            t0 = time.perf_counter()
            want = scan(xyz, start, rank, ids, lat, lng, now, index.params)
            t_scan.append(time.perf_counter() - t0)
            if not np.array_equal(got.event_ids, want):
                raise SystemExit(f"index and scan disagree at ({lat}, {lng})")
    i50, i99 = percentiles(t_index)
    s50, s99 = percentiles(t_scan)
    return {
        "index_p50": i50,
        "index_p99": i99,
        "scan_p50": s50,
        "scan_p99": s99,
        "in_radius_median": float(np.median(sizes)),
        "truncated_share": truncated / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--scan-queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    events = make_events(args.events, args.seed)
    params = GeoParams()
    t0 = time.perf_counter()
    index = build_geo_index(events, NOW, params)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    check = check_structure(index)
    t_check = time.perf_counter() - t0
    assert check.ok, check.problems
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_geo_index(Path(tmp), index, {})
        t_write = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6

    rng = np.random.default_rng(args.seed + 1)
    dense = run_queries(index, DENSE, 0.08, args.queries, args.scan_queries, rng)
    ordinary = run_queries(index, events.attrs["ordinary_center"], 0.08, args.queries, args.scan_queries, rng)

    print(
        f"geo-time index benchmark: {args.events:,} live events, {len(index.cells):,} res-5 cells, "
        f"{size_mb:.0f} MB on disk, cap {params.max_candidates:,}, radius {params.radius_km} km, "
        f"horizon {params.horizon_days} d"
    )
    print()
    print(f"{'step':<34}{'seconds':>10}")
    print(f"{'build (cells, sort, CSR)':<34}{t_build:>10.2f}")
    print(f"{'validate (check_structure)':<34}{t_check:>10.2f}")
    print(f"{'write .npy + checksums':<34}{t_write:>10.2f}")
    print()
    header = (
        f"{'query case':<26}{'in-radius':>10}{'capped':>8}{'index p50':>11}{'index p99':>11}"
        f"{'scan p50':>10}{'scan p99':>10}{'ratio p50':>11}{'ratio p99':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, r in (("dense metro (cap binds)", dense), ("ordinary metro", ordinary)):
        print(
            f"{name:<26}{r['in_radius_median']:>10,.0f}{r['truncated_share']:>8.0%}"
            f"{r['index_p50']:>9.2f}ms{r['index_p99']:>9.2f}ms{r['scan_p50']:>8.1f}ms{r['scan_p99']:>8.1f}ms"
            f"{r['scan_p50'] / r['index_p50']:>10.1f}x{r['scan_p99'] / r['index_p99']:>10.1f}x"
        )
    print()
    print(
        f"index: {args.queries} queries per case; scan: the first {args.scan_queries} of them, "
        "each answer checked equal to the index's."
    )


if __name__ == "__main__":
    main()
