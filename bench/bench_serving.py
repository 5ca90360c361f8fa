"""Serving latency on a dense synthetic metro (15,000-candidate cap reached), per stage, beside
stock LightGBM scoring every candidate with both heads and the Feast SDK read path, in one run.

    python bench/bench_serving.py --requests 200 [--feast-requests 3] [--json]

Same code as ``turnout bench-serving``; the last line with --json is
``{"requests", "candidates_p50", "p50_ms", "p99_ms", "stages_ms", "baseline_full_lightgbm_ms",
"baseline_feast_sdk_read_ms", "feast_user_read_ms", ...}``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from conf import load_settings
from serving.bench import run_bench, summary_lines, table_rows


def print_table(report: dict) -> None:
    print("| stage | p50 ms | p99 ms | p50 ms, LightGBM predictor | p99 ms, LightGBM predictor |")
    print("| --- | ---: | ---: | ---: | ---: |")
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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_bench(
        requests=args.requests,
        events=args.events,
        feast_requests=args.feast_requests,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
        compiled_cache=None if args.no_compile else load_settings().home / "cache" / "compiled",
    )
    print_table(report)
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
