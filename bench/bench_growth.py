"""How the batch side's cost grows with the history: 1x, 3x, 10x the ~1M-impression world.

    python bench/bench_growth.py [--scales 1 3 10] [--users 7000] [--days 28] [--root DIR]
                                 [--timeout-min 90]

For each scale, a process of its own (so one size's memory never carries into the next, and a
size that breaks leaves the others' rows) simulates ``users x scale`` users over ``days`` days
and runs the real jobs on it, timing each stage and sampling the memory (PSS) of its whole
process tree (Python, Spark's JVM, its Python workers) every 0.2 s:

  simulate -> landing -> bronze -> silver -> gold -> apply + embeddings (random vectors, as
  ``bench_features.py --history``) -> materialize every view to SQLite (the default offline
  store) -> the p_rsvp training set as of the history's end -> LightGBM on it

Prints one table: rows, seconds, rows/s and peak memory per stage and size, and each stage's
rows/s against the first size's. A size that is killed (out of memory) or runs past
``--timeout-min`` is reported at the stage it was in. ``--training-only`` re-runs the last two
stages on the homes a run left, e.g. with the cluster profile's downsampling:
``TURNOUT__TRAINING__NEGATIVE_KEEP_RATE=0.02 python bench/bench_growth.py --root DIR --training-only``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARK = "GROWTH "  # a stage's JSON line on the child's stdout


class PeakMemory:
    """The largest memory of this process and its descendants since the last ``reset``.

    Proportional set size, not RSS: Spark's Python workers are forked and share pages with their
    parent, and summed RSS counted those pages once per worker (it reported 26.9 GiB on this
    23 GiB machine).
    """

    def __init__(self, every_s: float = 0.2) -> None:
        import psutil

        self._me = psutil.Process()
        self.peak = 0
        threading.Thread(target=self._sample, args=(every_s,), daemon=True).start()

    def now(self) -> int:
        import psutil

        total = 0
        for p in [self._me, *self._me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a worker that ended since the listing
                total += p.memory_full_info().pss
        return total

    def reset(self) -> None:
        self.peak = self.now()

    def _sample(self, every_s: float) -> None:
        while True:
            self.peak = max(self.peak, self.now())
            time.sleep(every_s)


def window_end(home: Path) -> datetime:
    """The simulated history's end, from the simulator's manifest."""
    from contracts.instants import parse_instant

    return parse_instant(json.loads((home / "simulator" / "manifest.json").read_text())["window_end"])


def one_size(home: Path, users: int, days: int, training_only: bool = False) -> None:
    """Every stage on one world, a JSON line per stage as it starts and as it ends.

    ``training_only``: the last two stages, on a home an earlier run built (its lake, Feast
    registry and online store), e.g. to measure ``TURNOUT__TRAINING__NEGATIVE_KEEP_RATE``.
    """
    import logging

    logging.basicConfig(level=logging.WARNING)
    from bench.bench_features import add_random_embeddings
    from conf import load_settings
    from contracts.instants import parse_instant
    from pipelines.features import definitions
    from pipelines.features.jobs import build_gold
    from pipelines.features.materialize import materialize
    from pipelines.ingest.run import build_silver, ingest_bronze
    from simulator import SimulationConfig, simulate

    settings = load_settings("local", home=home)  # TURNOUT__* variables override it
    memory = PeakMemory()
    found: dict[str, Any] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[dict[str, Any]]:
        print(MARK + json.dumps({"stage": name, "started": True}), flush=True)
        memory.reset()
        out: dict[str, Any] = {"rows": 0}
        t = time.perf_counter()
        yield out
        seconds = time.perf_counter() - t
        memory.peak = max(memory.peak, memory.now())
        line = {"stage": name, "seconds": seconds, "peak_bytes": memory.peak, **out}
        print(MARK + json.dumps(line), flush=True)

    if not training_only:
        with stage("simulate (landing lines)") as s:
            summary = simulate(
                SimulationConfig(users=users, days=days), Path(settings.landing.root), home / "simulator"
            )
            s["rows"] = lines = sum(e.lines_written for e in summary.entities.values())
            s["impressions"] = found["impressions"] = summary.entities["impressions"].generated
        with stage("landing -> bronze (lines)") as s:
            ingest_bronze(settings, None, None, run_id="growth")
            s["rows"] = lines
        with stage("bronze -> silver (rows)") as s:
            silver = build_silver(settings, None, None, run_id="growth")
            s["rows"] = sum(v["rows"] for v in silver["tables"].values())
        end = (parse_instant(summary.delivered_last) + timedelta(hours=1)).astimezone(UTC)
        with stage("silver -> gold (rows written)") as s:
            gold = build_gold(settings, None, end, run_id="growth")
            s["rows"] = sum(v["inserted"] for v in gold["tables"].values())
    history_end = window_end(home)
    if not training_only:
        with stage("feast apply + embeddings (rows)") as s:
            definitions.apply_definitions(settings)
            s["rows"] = add_random_embeddings(settings, history_end)
        with stage("materialize, 9 views to SQLite (rows)") as s:
            s["rows"] = materialize(settings, history_end)["rows"]
    from models.heads import fit_booster
    from pipelines.training.sets import (
        build_training_set,
        read_training_set,
        split_training_set,
        training_set_description,
    )

    with stage("p_rsvp training set (rows)") as s:
        built = build_training_set(settings, "rsvp", history_end)
        s["rows"] = built.rows
        s["parts"] = {k: round(v, 1) for k, v in built.seconds.items()}
    with stage("read it + LightGBM fit (training rows)") as s:
        frame, version = read_training_set(settings, "rsvp", built.version)
        split = split_training_set(settings, frame, training_set_description(settings, "rsvp", version))
        x, y = frame[built.columns], frame["label"].to_numpy()
        cfg = settings.training
        fit_booster(
            x[split.train], y[split.train], x[split.calibration], y[split.calibration],
            dict(cfg.lightgbm), cfg.seed, cfg.num_threads,
        )  # fmt: skip
        s["rows"] = int(split.train.sum())


def run_size(
    root: Path, scale: int, users: int, days: int, timeout_s: float, training_only: bool = False
) -> list[dict[str, Any]]:
    """``one_size`` in a child process; its stage lines, the last one marked if the child died."""
    home = root / f"x{scale}"
    args = [sys.executable, "-m", "bench.bench_growth", "--one", str(home), str(users * scale), str(days)]
    args += ["--training-only"] if training_only else []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = (root / f"x{scale}{'-training' if training_only else ''}.log").open("w")
    child = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    stages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    timer = threading.Timer(timeout_s, child.kill)
    timer.start()
    assert child.stdout is not None
    for raw in child.stdout:
        if raw.startswith(MARK):
            line = json.loads(raw[len(MARK) :])
            if line.get("started"):
                stages.append({"stage": line["stage"], "broke": "running"})
            else:
                stages[-1] = line
            print(f"  x{scale}: {_row(scale, stages[-1])}", file=sys.stderr, flush=True)
    code = child.wait()
    timer.cancel()
    if code != 0 and stages and "broke" in stages[-1]:
        why = "killed: out of time" if time.monotonic() >= deadline else f"exit {code}"
        if code == -9 and time.monotonic() < deadline:
            why = "killed (SIGKILL: out of memory?)"
        stages[-1]["broke"] = f"{why}; see {log.name}"
    return [{**s, "scale": scale, "users": users * scale} for s in stages]


def _row(scale: int, s: dict[str, Any]) -> str:
    if "broke" in s:
        return f"| {scale}x | {s['stage']} | {s['broke']} | | | |"
    rate = s["rows"] / s["seconds"] if s["seconds"] else float("nan")
    gib = s["peak_bytes"] / 2**30
    return f"| {scale}x | {s['stage']} | {s['rows']:,} | {s['seconds']:.1f} | {rate:,.0f} | {gib:.1f} |"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| size | stage | rows | seconds | rows/s | peak memory, GiB | rows/s vs 1st size |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    first: dict[str, float] = {}
    for s in results:
        row = _row(s["scale"], s)
        if "broke" not in s:
            rate = s["rows"] / s["seconds"]
            base = first.setdefault(s["stage"], rate)
            row += f" {rate / base:.2f}x |"
        else:
            row += " |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 3, 10])
    parser.add_argument(
        "--users", type=int, default=7000, help="users at 1x (7,000 x 28 days: ~1M impressions)"
    )
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--root", type=Path, help="where each size's home goes (default: a temp dir)")
    parser.add_argument("--timeout-min", type=float, default=90.0, help="per size")
    parser.add_argument(
        "--training-only",
        action="store_true",
        help="only the last two stages, on the homes an earlier run left under --root",
    )
    parser.add_argument("--one", nargs=3, metavar=("HOME", "USERS", "DAYS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_size(Path(args.one[0]), int(args.one[1]), int(args.one[2]), args.training_only)
        return
    if args.training_only and not args.root:
        parser.error("--training-only needs the --root of an earlier run")
    import tempfile

    root = args.root or Path(tempfile.mkdtemp(prefix="bench-growth-"))
    root.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for scale in args.scales:
        print(
            f"{scale}x: {args.users * scale:,} users x {args.days} days in {root / f'x{scale}'}",
            file=sys.stderr,
        )
        results += run_size(root, scale, args.users, args.days, args.timeout_min * 60, args.training_only)
        impressions = next(
            (s["impressions"] for s in results if s.get("scale") == scale and "impressions" in s), None
        )
        if impressions:
            print(f"{scale}x: {impressions:,} impressions", file=sys.stderr)
    print(table(results))
    name = "growth-training.json" if args.training_only else "growth.json"
    (root / name).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
