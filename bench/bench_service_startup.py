"""How long `turnout serve` takes to answer, and how much memory its process tree holds.

    python bench/bench_service_startup.py --home .turnout --now 2026-11-09T00:00Z [--runs 3]
        [--turnout .venv/bin/turnout] [--user-id u0000001]

Starts the real command on a free loopback port against a built home (``make demo``), and per
run measures the seconds until ``/healthz`` answers and until a first feed is served, then the
resident memory of the server and every process it started (a JVM, if any), and whether one of
them is a JVM. ``--turnout`` points at another checkout's command to compare two versions on the
same home in the same run. Prints a Markdown table; ``--json`` adds the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


def _is_jvm(pid: int) -> bool:
    try:
        return "libjvm.so" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def one_run(turnout: str, home: Path, now: str, user_id: str, timeout_s: float) -> dict[str, Any]:
    import httpx

    port = _free_port()
    env = {**os.environ, "TURNOUT_HOME": str(home)}
    env.pop("TURNOUT_PROFILE", None)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [turnout, "serve", "--now", now, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        healthy_s = feed_s = None
        while time.perf_counter() - started < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"`turnout serve` exited with {proc.returncode}")
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                healthy_s = time.perf_counter() - started
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        if healthy_s is None:
            raise RuntimeError(f"no answer within {timeout_s:.0f} s")
        response = httpx.get(f"{base}/v1/feed", params={"user_id": user_id}, timeout=60)
        feed_s = time.perf_counter() - started
        pids = _tree(proc.pid)
        return {
            "healthz_s": round(healthy_s, 2),
            "first_feed_s": round(feed_s, 2),
            "feed_status": response.status_code,
            "rss_mib": round(_rss_mib(pids), 1),
            "processes": len(pids),
            "jvm": any(_is_jvm(p) for p in pids),
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a TURNOUT_HOME built by `make demo`")
    parser.add_argument("--now", default="2026-11-09T00:00Z")
    parser.add_argument("--turnout", action="append", help="a turnout command (repeat to compare)")
    parser.add_argument("--user-id", default="u0000001")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    commands = args.turnout or [str(Path(sys.executable).with_name("turnout"))]
    results: dict[str, list[dict[str, Any]]] = {}
    for command in commands:
        for i in range(args.runs):
            print(f"{command}: run {i + 1}/{args.runs}...", file=sys.stderr, flush=True)
            results.setdefault(command, []).append(
                one_run(command, args.home, args.now, args.user_id, args.timeout)
            )
    print(
        "| command | runs | /healthz answers, s (median) | first feed, s (median) | RSS of the process tree, MiB | JVM |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for command, runs in results.items():
        print(
            f"| `{command}` | {len(runs)} | {statistics.median(r['healthz_s'] for r in runs):.1f} | "
            f"{statistics.median(r['first_feed_s'] for r in runs):.1f} | "
            f"{statistics.median(r['rss_mib'] for r in runs):,.0f} | {'yes' if runs[0]['jvm'] else 'no'} |"
        )
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
