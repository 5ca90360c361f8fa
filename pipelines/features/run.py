"""One interval of the features stage, in one Spark session: what the ``features`` DAG runs.

``update_features(settings, start, end, run_id)``: silver -> gold for the interval
(``jobs.build_gold``) -> every gold table's great-expectations suite as of ``end``
(``validation.validate_gold``; a broken table raises ``DataContractError`` and nothing reaches the
online store) -> ``feast apply`` when the definitions changed (``definitions.apply_definitions``) ->
incremental, forward-only materialization up to ``end`` (``materialize.materialize``).

One process for the four steps because each step's fixed cost on a small hourly interval is mostly
the engines starting (a Spark session, great-expectations, Feast), not the data: measured in
``bench/bench_interval.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from conf import Settings

Progress = Callable[[str, int, int], None]


def update_features(
    settings: Settings,
    start: datetime | None,
    end: datetime,
    run_id: str,
    progress: Progress | None = None,
    windows: Sequence[tuple[datetime | None, datetime]] | None = None,
) -> dict[str, Any]:
    """Gold -> validate -> apply -> materialize for [start, end); each step's report and seconds.

    ``windows`` (ordered, inside [start, end)): build gold once per window, as separate hourly
    runs would have, so each row's ``created`` is the end of the window it was written in, not
    the batch's. Asset-triggered runs pass one window per ingest run that triggered them.
    """
    from pipelines.features.definitions import apply_definitions
    from pipelines.features.jobs import build_gold, written_since
    from pipelines.features.materialize import materialize
    from pipelines.features.validation import validate_gold

    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        seconds[step] = round(time.perf_counter() - clock, 2)
        clock = time.perf_counter()

    golds = [build_gold(settings, lo, hi, run_id, progress=progress) for lo, hi in windows or [(start, end)]]
    # What the windows wrote together; the last window's fits and travel times.
    tables = {
        t: {k: sum(g["tables"][t][k] for g in golds) for k in c} for t, c in golds[-1]["tables"].items()
    }
    gold = {**golds[-1], "tables": tables, "windows": len(golds)}
    lap("build_gold")
    if progress:
        progress("validate gold", 0, 1)
    validation = validate_gold(settings, end, since=written_since(start))  # what the run may have written
    lap("validate_gold")
    applied = apply_definitions(settings)
    lap("apply_definitions")
    if progress:
        progress("materialize", 0, 1)
    online = materialize(settings, end=end)
    lap("materialize")
    return {
        "run_id": run_id,
        "start": None if start is None else start.isoformat(),
        "end": end.isoformat(),
        "gold": gold,
        "validation": validation,
        "apply": applied,
        "materialize": online,
        "seconds": seconds,
    }
