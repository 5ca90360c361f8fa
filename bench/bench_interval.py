"""Where the seconds of one hourly interval go: a platform hour, then ingest and features for it.

    python bench/bench_interval.py --home H [--hour 2026-11-01T00:00Z] [--turnout .venv/bin/turnout]

``H`` is a built home of a world with live platform days (``turnout simulate --platform-days N``,
then ingest, features, tower, index, materialize and both heads, as ``make demo`` builds one),
whose platform has not played ``--hour`` yet (default: its first hour). The home is copied; the
copy gets the real ``turnout serve --clock published`` on a free port, the hour is played against
it (``turnout platform``), the service is stopped, and then the hour's ``ingest`` and ``features``
work runs in one process exactly as the two DAG tasks run it, timed step by step (each DAG task
is a process of its own, so each also pays the Spark session start measured first). Prints a
Markdown table; ``--json`` adds the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
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


def measure(home: Path, hour: datetime) -> dict[str, Any]:
    """Ingest + features for ``hour`` in this process, on the copied home, step by step."""
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
    ingest = ingest_interval(settings, hour, end, "bench", progress=marks)
    marks.close()
    ingest_s = time.perf_counter() - t
    ingest_steps = marks.steps
    marks = Marks()
    t = time.perf_counter()
    features = update_features(settings, hour, end, "bench", progress=marks)
    marks.close()
    features_s = time.perf_counter() - t
    return {
        "spark_session_s": session,
        "ingest_s": ingest_s,
        "ingest_steps": ingest_steps,
        "features_s": features_s,
        "features_steps": marks.steps,
        "features_seconds": features["seconds"],
        "lines": sum(c["read"] for c in ingest["tables"].values()),
        "delivered": ingest["delivered"],
        "materialized_rows": features["materialize"]["rows"],
    }


def _grouped(steps: list[tuple[str, float]], name: Callable[[str], str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, seconds in steps:
        out[name(label)] = out.get(name(label), 0.0) + seconds
    return out


def table(result: dict[str, Any]) -> str:
    rows: list[tuple[str, float]] = [
        ("Spark session start (each DAG task pays it)", result["spark_session_s"])
    ]
    ingest = _grouped(
        result["ingest_steps"],
        lambda s: "read + gate the delivery, quarantine"
        if s.startswith(("start", "read")) else "bronze MERGEs" if s.startswith("bronze")
        else "silver MERGEs",
    )  # fmt: skip
    rows += [(f"ingest: {k}", v) for k, v in ingest.items()]
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
    total = result["spark_session_s"] * 2 + result["ingest_s"] + result["features_s"]
    lines = ["| step | seconds |", "| --- | ---: |"]
    lines += [f"| {name} | {s:.1f} |" for name, s in rows]
    lines.append(f"| **ingest + features, two task processes** | **{total:.1f}** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--hour", help="The hour to play and measure, UTC; default: the platform's first.")
    parser.add_argument("--turnout", default=str(REPO / ".venv" / "bin" / "turnout"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from simulator.platform import platform_start

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(args.home, home, symlinks=True)
        subprocess.run([args.turnout, "relocate"], env={**os.environ, "TURNOUT_HOME": str(home)}, check=True,
                       capture_output=True)  # fmt: skip
        first = platform_start(home / "simulator")
        if first is None:
            raise SystemExit(f"{args.home} has no live platform days (turnout simulate --platform-days N)")
        hour = datetime.fromisoformat(args.hour.replace("Z", "+00:00")) if args.hour else first
        played = play_hour(home, hour.astimezone(UTC), args.turnout)
        result = {"hour": hour.isoformat(), "played": played["totals"], **measure(home, hour.astimezone(UTC))}
    print(
        f"one interval, {hour.isoformat()}: {result['lines']} landing lines, delivered {result['delivered']}"
    )
    print(table(result))
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
