"""Serving latency on a dense synthetic metro (15,000-candidate cap reached), per stage, beside
stock LightGBM scoring every candidate with both heads.

    python bench/bench_serving.py --requests 200 [--json]

Same code as ``turnout bench-serving``; the last line with --json is
``{"requests", "candidates_p50", "p50_ms", "p99_ms", "stages_ms", ...}``.
"""

from __future__ import annotations

import argparse
import json

from serving.bench import run_bench


def print_table(report: dict) -> None:
    print("| stage | p50 ms | p99 ms |\n| --- | --- | --- |")
    for name, v in report["stages_ms"].items():
        print(f"| {name} | {v['p50']} | {v['p99']} |")
    print(f"| **total (feed path)** | **{report['p50_ms']}** | **{report['p99_ms']}** |")
    b = report["baseline_full_lightgbm_ms"]
    print(f"| stock LightGBM, both heads on all candidates (scoring only) | {b['p50']} | {b['p99']} |")
    print(
        f"\n{report['requests']} requests, candidates p50 {report['candidates_p50']}, heads {report['heads']}, "
        f"{report['num_threads']} LightGBM thread(s); first-stage cut keeps "
        f"{report['cut_keeps_expected_attendance_top24']} of the full model's top-24 expected attendance"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_bench(requests=args.requests, events=args.events)
    print_table(report)
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
