"""Training-set build and head training on a built history (e.g. the ~1M-impression one).

    python bench/bench_training.py --home /tmp/bench3 [--heads rsvp attend] [--as-of ISO]

``--home`` is a TURNOUT_HOME with silver + gold built and ``features/`` applied (``bench_features.py
--history --home DIR`` builds the ~1M-impression one; ``make demo`` builds the 430k one).

Per head it times (1) the whole training-set build (labels on Spark + Feast's point-in-time join on
the Spark offline store + the Delta write), (2) a plain pandas ``merge_asof`` of the same entity
rows against the same gold tables (the baseline: one view at a time, on the driver; on-demand
crosses left out), with the share of values on which the two agree, and (3) the LightGBM fit
alone and the whole ``train_head`` (fit, calibration, leak diagnostic, MLflow, registry).
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
    ``created <= T`` within the view's TTL is the newest row whose ``max(event_timestamp, created)``
    is ``<= T`` (gold's ``created`` never decreases with ``event_timestamp``).
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
        gold = gold.drop(columns=["event_timestamp", "created"]).sort_values("available_at")
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


def bench_head(settings: Settings, head: str, as_of: datetime) -> dict[str, Any]:
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

    t0 = time.perf_counter()
    built = build_training_set(settings, head, as_of)
    build_s = time.perf_counter() - t0
    frame, version = read_training_set(settings, head, built.version)
    described = training_set_description(settings, head, version)

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
        "build_s": build_s,
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
        "| head | rows | training-set build (Spark labels + Feast PIT join + Delta) | pandas merge_asof, same rows | values equal | LightGBM fit | fit rows/s | whole train_head |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| p_{r['head']} | {r['rows']:,} | {r['build_s']:.0f} s ({r['rows'] / r['build_s']:,.0f} rows/s) "
            f"| {r['pandas_asof_s']:.0f} s | {r['agreement']:.2%} | {r['fit_s']:.1f} s ({r['trees']} trees, "
            f"{r['columns']} cols) | {r['train_rows'] / r['fit_s']:,.0f} | {r['train_head_s']:.0f} s |"
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(home=args.home)
    if args.as_of:
        as_of = parse_instant(args.as_of)
    else:
        import json

        manifest = json.loads((args.home / "simulator" / "manifest.json").read_text())
        as_of = datetime.fromisoformat(manifest["window_end"]).astimezone(UTC)
    results = [bench_head(settings, head, as_of) for head in args.heads]
    print(f"as of {as_of.isoformat()}, home {args.home}")
    print(table(results))
    for r in results:
        print(f"p_{r['head']}: promoted={r['promoted']} ({r['reason']})")


if __name__ == "__main__":
    main()
