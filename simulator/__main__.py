"""``python -m simulator LANDING TRUTH [--users N --days D --seed S]`` for quick runs.

The project CLI owns the user-facing command; this is a thin developer entry point that prints
the manifest totals and the behaviour facts.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from simulator.config import SimulationConfig
from simulator.run import simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator")
    parser.add_argument("landing_root", type=Path)
    parser.add_argument("truth_root", type=Path)
    parser.add_argument("--users", type=int, default=SimulationConfig.users)
    parser.add_argument("--days", type=int, default=SimulationConfig.days)
    parser.add_argument("--seed", type=int, default=SimulationConfig.seed)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started = time.perf_counter()
    summary = simulate(
        SimulationConfig(users=args.users, days=args.days, seed=args.seed),
        args.landing_root,
        args.truth_root,
        overwrite=args.overwrite,
    )
    out = summary.to_dict()
    out["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps({k: out[k] for k in ("totals", "facts", "elapsed_s")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
