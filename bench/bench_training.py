"""Training-set build and head training on a built history (e.g. the ~1M-impression one).

    python bench/bench_training.py --home /tmp/bench3 [--heads rsvp attend] [--as-of ISO]

``--home`` is a TURNOUT_HOME with silver + gold built and ``features/`` applied (``bench_features.py
--history --home DIR`` builds the ~1M-impression one; ``make demo`` builds the 430k one).

Per head it times (1) the whole training-set build (labels on Spark, then Feast's point-in-time
join, the model columns and the Delta write as one Spark job) once with Feast's stock Spark offline store and once with the sorted one
(``pipelines/offline_store.py``), on the same inputs, and checks the two frames are equal; (2) a
plain pandas ``merge_asof`` of the same entity rows against the same gold tables (the baseline:
one view at a time, on the driver; on-demand crosses left out), with the share of values on which
it agrees; and (3) the LightGBM fit alone and the whole ``train_head`` (fit, calibration, leak
diagnostic, MLflow, registry).
"""

from __future__ import annotations

import argparse
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from conf import Settings, load_settings
from contracts.instants import parse_instant


def pandas_asof(settings: Settings, entity: pd.DataFrame, service_name: str) -> tuple[pd.DataFrame, float]:
    """The service's batch features for ``entity`` by ``merge_asof``, one gold table at a time.

    Feast's rule, rewritten for an as-of join: the newest row with ``event_timestamp <= T`` and
    ``created <= T`` within the view's TTL is the last row, ordered by ``max(event_timestamp,
    created)`` and then ``event_timestamp``, that is available by ``T`` (gold's ``created`` never
    decreases with ``event_timestamp``; rows of one batch share a ``created`` and the newest event
    among them wins).
    """
    from features.repo import FEATURE_SERVICES
    from features.views import FEATURE_VIEWS
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    service = {s.name: s for s in FEATURE_SERVICES}[service_name]
    views = {v.name: v for v in FEATURE_VIEWS}
    t0 = time.perf_counter()
    out = entity.sort_values("event_timestamp").reset_index()
    for projection in service.feature_view_projections:
        view = views.get(projection.name)
        if view is None:  # an on-demand view: computed from the joined columns, not a table
            continue
        keys = list(view.join_keys)
        names = [f.name for f in projection.features]
        gold = (
            spark.read.format("delta")
            .load(settings.lake.table_path("gold", view.name))
            .select(*keys, "event_timestamp", "created", *names)
            .toPandas()
        )
        gold["available_at"] = pd.Series(
            pd.to_datetime(np.maximum(gold["event_timestamp"], gold["created"])), index=gold.index
        ).dt.tz_localize("UTC")
        gold["_row_ts"] = gold["event_timestamp"]
        # Among rows available at the same instant (written by one batch), the newest event wins,
        # as in Feast's rule: a stable sort on (available_at, event_timestamp), merge_asof takes the last.
        gold = gold.sort_values(["available_at", "_row_ts"], kind="stable").drop(
            columns=["event_timestamp", "created"]
        )
        out = pd.merge_asof(
            out,
            gold.rename(columns={n: f"{view.name}__{n}" for n in names}),
            left_on="event_timestamp",
            right_on="available_at",
            by=keys,
            allow_exact_matches=True,
        )
        ttl = view.ttl.total_seconds() if view.ttl else 0
        if ttl:
            age = (
                out["event_timestamp"] - pd.to_datetime(out["_row_ts"]).dt.tz_localize("UTC")
            ).dt.total_seconds()
            stale = age > ttl
            for n in names:
                out.loc[stale, f"{view.name}__{n}"] = np.nan
        out = out.drop(columns=["available_at", "_row_ts"])
    return out.set_index("index").sort_index(), time.perf_counter() - t0


def agreement(training: pd.DataFrame, baseline: pd.DataFrame, columns: list[tuple[str, str]]) -> float:
    """Share of (row, feature) values equal in both (NaN == NaN), over plain numeric features."""
    equal = total = 0
    for view, name in columns:
        a = pd.to_numeric(training[name], errors="coerce").to_numpy(float)
        b = pd.to_numeric(baseline[f"{view}__{name}"], errors="coerce").to_numpy(float)
        same = np.isclose(a, b, equal_nan=True, rtol=1e-9, atol=1e-9)
        equal += int(same.sum())
        total += len(same)
    return equal / total if total else float("nan")


def with_offline_store(settings: Settings, store: str) -> Settings:
    return settings.model_copy(update={"feast": settings.feast.model_copy(update={"offline_store": store})})


STORES = {"stock": "spark", "sorted": "pipelines.offline_store.SortedSparkOfflineStore"}


def bench_head(settings: Settings, head: str, as_of: datetime, stores: list[str]) -> dict[str, Any]:
    """Build the head's training set with each offline store on the same inputs, check the frames
    agree, time a merge_asof of the same rows, then fit and train on the last build."""
    from features.repo import FEATURE_SERVICES
    from features.views import FEATURE_VIEWS
    from models.heads import SERVICE_OF_HEAD, fit_booster
    from pipelines.training.examples import KEY_COLUMNS
    from pipelines.training.sets import (
        build_training_set,
        read_training_set,
        split_training_set,
        training_set_description,
    )
    from pipelines.training.train import train_head

    builds: dict[str, Any] = {}
    frames: dict[str, pd.DataFrame] = {}
    for name in stores:
        t0 = time.perf_counter()
        built = build_training_set(with_offline_store(settings, STORES[name]), head, as_of)
        builds[name] = {"s": time.perf_counter() - t0, **built.seconds}
        frames[name], version = read_training_set(settings, head, built.version)
    frame = frames[stores[-1]]
    described = training_set_description(settings, head, version)
    same = None
    if len(frames) == 2:
        a, b = (frames[n].sort_values("example_id").reset_index(drop=True) for n in stores)
        same = bool(a.equals(b))

    service = {s.name: s for s in FEATURE_SERVICES}[SERVICE_OF_HEAD[head]]
    tables = {v.name for v in FEATURE_VIEWS}
    plain = [
        (p.name, f.name)
        for p in service.feature_view_projections
        if p.name in tables and p.name != "event_embeddings"
        for f in p.features
    ]
    baseline, pandas_s = pandas_asof(settings, frame[list(KEY_COLUMNS)], service.name)

    split = split_training_set(settings, frame, described)
    x, y = frame[built.columns], frame["label"].to_numpy()
    cfg = settings.training
    t0 = time.perf_counter()
    booster = fit_booster(
        x[split.train], y[split.train], x[split.calibration], y[split.calibration],
        dict(cfg.lightgbm), cfg.seed, cfg.num_threads,
    )  # fmt: skip
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = train_head(settings, head, training_set_version=version)
    train_s = time.perf_counter() - t0
    return {
        "head": head,
        "rows": len(frame),
        "train_rows": int(split.train.sum()),
        "columns": len(built.columns),
        "builds": builds,
        "frames_equal": same,
        "pandas_asof_s": pandas_s,
        "agreement": agreement(frame, baseline, plain),
        "fit_s": fit_s,
        "trees": booster.current_iteration(),
        "train_head_s": train_s,
        "promoted": report["promoted"],
        "reason": report["reason"],
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| head | rows | offline store | training-set build | rows/s | of which labels / join + write | "
        "pandas merge_asof, same rows | join + write / merge_asof | values equal to merge_asof |",
        "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        for name, b in r["builds"].items():
            lines.append(
                f"| p_{r['head']} | {r['rows']:,} | {name} | {b['s']:.0f} s | {r['rows'] / b['s']:,.0f} | "
                f"{b['labels']:.0f} / {b['join_and_write']:.0f} s | "
                f"{r['pandas_asof_s']:.1f} s | {b['join_and_write'] / r['pandas_asof_s']:.1f}x | "
                f"{r['agreement']:.2%} |"
            )
    lines += ["", "| head | frames of both stores equal | LightGBM fit | fit rows/s | whole train_head |",
              "| --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for r in results:
        lines.append(
            f"| p_{r['head']} | {'-' if r['frames_equal'] is None else 'yes' if r['frames_equal'] else 'NO'} | "
            f"{r['fit_s']:.1f} s ({r['trees']} trees, {r['columns']} cols) | {r['train_rows'] / r['fit_s']:,.0f} | "
            f"{r['train_head_s']:.0f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--home", type=Path, required=True, help="TURNOUT_HOME with silver, gold and feast applied"
    )
    parser.add_argument("--heads", nargs="+", default=["rsvp", "attend"], choices=["rsvp", "attend"])
    parser.add_argument("--as-of", help="train as of this instant (default: the simulated history's end)")
    parser.add_argument(
        "--stores", nargs="+", default=["stock", "sorted"], choices=list(STORES),
        help="offline stores to build with, in order (the last build is the one trained on)",
    )  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(home=args.home)
    if args.as_of:
        as_of = parse_instant(args.as_of)
    else:
        import json

        manifest = json.loads((args.home / "simulator" / "manifest.json").read_text())
        as_of = datetime.fromisoformat(manifest["window_end"]).astimezone(UTC)
    results = [bench_head(settings, head, as_of, args.stores) for head in args.heads]
    print(f"as of {as_of.isoformat()}, home {args.home}")
    print(table(results))
    for r in results:
        print(f"p_{r['head']}: promoted={r['promoted']} ({r['reason']})")


if __name__ == "__main__":
    main()
