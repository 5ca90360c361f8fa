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

from serving.bench import run_bench


def print_table(report: dict) -> None:
    print("| stage | p50 ms | p99 ms |\n| --- | --- | --- |")
    for name, v in report["stages_ms"].items():
        print(f"| {name} | {v['p50']} | {v['p99']} |")
    print(f"| **total (feed path)** | **{report['p50_ms']}** | **{report['p99_ms']}** |")
    b = report["baseline_full_lightgbm_ms"]
    print(f"| stock LightGBM, both heads on all candidates (scoring only) | {b['p50']} | {b['p99']} |")
    f, u = report["baseline_feast_sdk_read_ms"], report["feast_user_read_ms"]
    if f is not None:
        print(
            f"| Feast SDK read: {f['rows_per_request']:,} candidates from every event view + the user row "
            f"(read only) | {f['p50']} | {f['p99']} |"
        )
        print(
            f"| Feast SDK read: the user row alone (the service's per-request read) | {u['p50']} | {u['p99']} |"
        )
    print(
        f"\n{report['requests']} requests, candidates p50 {report['candidates_p50']}, heads {report['heads']}, "
        f"{report['num_threads']} LightGBM thread(s); first-stage cut keeps "
        f"{report['cut_keeps_expected_attendance_top24']} of the full model's top-24 expected attendance"
    )
    if f is not None:
        print(
            f"Feast SDK read: {f['requests']} request(s) of {f['keys_per_request']:,} entity keys, "
            f"{f['mismatches']} of {f['values_checked']:,} values differ from the snapshot; user row alone: "
            f"{u['requests']} requests, {u['mismatches']} of {u['values_checked']:,} values differ"
        )


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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_bench(
        requests=args.requests,
        events=args.events,
        feast_requests=args.feast_requests,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    print_table(report)
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
