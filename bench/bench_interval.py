"""Where the seconds of hourly intervals go: platform hours, then ingest and features for each.

    python bench/bench_interval.py --home H [--hour 2026-11-01T00:00Z] [--hours 2] [--baseline DIR]

``H`` is a built home of a world with live platform days (``turnout simulate --platform-days N``,
then ingest, features, tower, index, materialize and both heads, as ``make demo`` builds one),
whose platform has not played ``--hour`` yet (default: its first hour). The home is copied; the
copy gets the real ``turnout serve --clock published`` on a free port, ``--hours`` consecutive
hours are played against it (``turnout platform``), the service is stopped, and then each hour's
``ingest`` and ``features`` work runs exactly as the two DAG tasks run it, hour after hour, each
task in a fresh process of its own with its own JVM, timed step by step after the Spark session
start it pays. The first hour after a home built by the CLI is not
a steady state (its gold was written by one backfill); the later hours are.

``--baseline DIR`` (a source tree, e.g. ``git worktree add /tmp/base <rev>``) measures a second
copy of the played home with that code, alternating hour by hour with this tree's, so the two
share the machine's state; the table then has both columns and their ratio.
Prints a Markdown table per hour; ``--json`` adds the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Marks:
    """Progress callbacks turned into (label, seconds since the previous mark)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.label = "start"
        self.steps: list[tuple[str, float]] = []

    def __call__(self, label: str, done: int = 0, total: int = 0) -> None:
        now = time.perf_counter()
        self.steps.append((self.label, now - self.last))
        self.label, self.last = label, now

    def close(self) -> None:
        self("end")


def play_hour(home: Path, hour: datetime, turnout: str) -> dict[str, Any]:
    """The hour, played against the real service on the copied home."""
    import httpx

    port = _free_port()
    env = {**os.environ, "TURNOUT_HOME": str(home)}
    env.pop("TURNOUT_PROFILE", None)
    serve = subprocess.Popen(
        [turnout, "serve", "--clock", "published", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                raise RuntimeError("turnout serve did not come up")
            time.sleep(1)
        played = subprocess.run(
            [turnout, "platform", "--start", hour.isoformat(), "--end", (hour + timedelta(hours=1)).isoformat(),
             "--feed-url", f"http://127.0.0.1:{port}", "--json"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return dict(json.loads(played.stdout.strip().splitlines()[-1]))
    finally:
        os.killpg(serve.pid, 15)
        serve.wait(60)


def measure(home: Path, hour: datetime, task: str) -> dict[str, Any]:
    """One DAG task's work for ``hour`` (``ingest`` or ``features``) in this process, on the
    copied home, step by step, after timing the Spark session it starts."""
    os.environ["TURNOUT_HOME"] = str(home)
    from conf import load_settings
    from pipelines.features.run import update_features
    from pipelines.ingest.run import ingest_interval
    from pipelines.spark import get_spark

    settings = load_settings()
    end = hour + timedelta(hours=1)
    t = time.perf_counter()
    get_spark(settings)
    session = time.perf_counter() - t
    marks = Marks()
    t = time.perf_counter()
    if task == "ingest":
        ingest = ingest_interval(settings, hour, end, "bench", progress=marks)
        marks.close()
        return {
            "ingest_session_s": session,
            "ingest_s": time.perf_counter() - t,
            "ingest_steps": marks.steps,
            "lines": sum(c["read"] for c in ingest["tables"].values()),
            "delivered": ingest["delivered"],
        }
    features = update_features(settings, hour, end, "bench", progress=marks)
    marks.close()
    return {
        "features_session_s": session,
        "features_s": time.perf_counter() - t,
        "features_steps": marks.steps,
        "features_seconds": features["seconds"],
        "materialized_rows": features["materialize"]["rows"],
        "gold_written": features["gold"]["tables"],
    }


def _grouped(steps: list[tuple[str, float]], name: Callable[[str], str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, seconds in steps:
        out[name(label)] = out.get(name(label), 0.0) + seconds
    return out


def _rows(result: dict[str, Any]) -> list[tuple[str, float]]:
    rows: list[tuple[str, float]] = [("ingest: Spark session start", result["ingest_session_s"])]
    ingest = _grouped(
        result["ingest_steps"],
        lambda s: "silver MERGEs" if s.startswith("silver") else "bronze MERGEs"
        if s.startswith("bronze") else "read + gate the delivery, quarantine",
    )  # fmt: skip
    rows += [(f"ingest: {k}", v) for k, v in ingest.items()]
    rows.append(("features: Spark session start", result["features_session_s"]))
    gold = _grouped(
        result["features_steps"],
        lambda s: "gold: compute and fit"
        if s == "start" else "gold: travel time" if s == "gold travel_time"
        else "gold: MERGE per table" if s.startswith("gold ") else "validate + apply + materialize",
    )  # fmt: skip
    rows += [(f"features {k}", v) for k, v in gold.items() if not k.startswith("validate")]
    fs = result["features_seconds"]
    rows += [
        ("features: great-expectations suites (9 gold tables)", fs["validate_gold"]),
        ("features: feast apply (only when definitions changed)", fs["apply_definitions"]),
        (f"features: materialize ({result['materialized_rows']} keys)", fs["materialize"]),
    ]
    total = sum(result[k] for k in ("ingest_session_s", "ingest_s", "features_session_s", "features_s"))
    return [*rows, ("**ingest + features, two task processes**", total)]


def table(runs: dict[str, dict[str, Any]]) -> str:
    """One column of seconds per measured tree (and their ratio when there are two)."""
    names = list(runs)
    columns = {name: dict(_rows(r)) for name, r in runs.items()}
    steps = list(dict.fromkeys(step for c in columns.values() for step in c))
    ratio = len(names) == 2
    head = ["step", *(f"{n}: s" for n in names), *(["ratio"] if ratio else [])]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for step in steps:
        cells = [f"{columns[n][step]:.1f}" if step in columns[n] else "-" for n in names]
        if ratio:
            a, b = (columns[n].get(step) for n in names)
            cells.append(f"{a / b:.2f}" if a is not None and b else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure_in_process(home: Path, hour: datetime, code: Path) -> dict[str, Any]:
    """``measure`` of ``ingest``, then of ``features``, each in a fresh Python process that imports
    turnout from ``code``, as the two DAG tasks run (each starts its own JVM)."""
    env = {**os.environ, "TURNOUT_HOME": str(home), "PYTHONPATH": str(code)}
    env.pop("TURNOUT_PROFILE", None)
    result: dict[str, Any] = {}
    for task in ("ingest", "features"):
        out = subprocess.run(
            [sys.executable, str(REPO / "bench" / "bench_interval.py"), "--measure", str(home), hour.isoformat(), task],
            env=env, capture_output=True, text=True, cwd=code,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"measuring {task} for {hour} with {code} failed:\n{out.stderr[-4000:]}")
        result.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path)
    parser.add_argument(
        "--hour", help="The first hour to play and measure, UTC; default: the platform's first."
    )
    parser.add_argument("--hours", type=int, default=2, help="Consecutive hours to play and measure.")
    parser.add_argument("--baseline", type=Path, help="A source tree to measure alternately on a copy.")
    parser.add_argument("--turnout", default=str(REPO / ".venv" / "bin" / "turnout"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--measure", nargs=3, metavar=("HOME", "HOUR", "TASK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child process of measure_in_process
        home, hour = Path(args.measure[0]), datetime.fromisoformat(args.measure[1])
        print(json.dumps(measure(home, hour, args.measure[2]), default=str))
        return
    if args.home is None:
        parser.error("--home is required")
    from simulator.platform import platform_start

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(args.home, home, symlinks=True)
        subprocess.run([args.turnout, "relocate"], env={**os.environ, "TURNOUT_HOME": str(home)}, check=True,
                       capture_output=True)  # fmt: skip
        first = platform_start(home / "simulator")
        if first is None:
            raise SystemExit(f"{args.home} has no live platform days (turnout simulate --platform-days N)")
        start = datetime.fromisoformat(args.hour.replace("Z", "+00:00")) if args.hour else first
        hours = [start.astimezone(UTC) + timedelta(hours=i) for i in range(args.hours)]
        played = [play_hour(home, h, args.turnout)["totals"] for h in hours]
        codes = {"this tree": REPO}
        homes = {"this tree": home}
        if args.baseline:
            codes["baseline"] = args.baseline.resolve()
            homes["baseline"] = Path(tmp) / "baseline"
            shutil.copytree(home, homes["baseline"], symlinks=True)
            subprocess.run([args.turnout, "relocate"], env={**os.environ, "TURNOUT_HOME": str(homes["baseline"])},
                           check=True, capture_output=True)  # fmt: skip
        results = []
        for i, hour in enumerate(hours):
            # Alternate which tree goes first, so neither always runs on the warmer machine.
            order = list(codes) if i % 2 == 0 else list(reversed(codes))
            measured = {name: measure_in_process(homes[name], hour, codes[name]) for name in order}
            runs = {name: measured[name] for name in codes}  # this tree's column first
            results.append({"hour": hour.isoformat(), "played": played[i], "runs": runs})
            ours = runs["this tree"]
            print(
                f"\none interval, {hour.isoformat()}: {ours['lines']} landing lines, delivered {ours['delivered']}"
            )
            print(table(runs))
            updated = {
                n: {t: c["updated"] for t, c in r["gold_written"].items() if c["updated"]}
                for n, r in runs.items()
            }
            print(f"gold rows updated in place (restamped): {updated}", flush=True)
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
