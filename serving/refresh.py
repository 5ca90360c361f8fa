"""Background refresh while the service runs: the dependency checks on a fast beat (a fault, and
its recovery, shows within seconds), the champions when an alias moves, and on a slower beat the
published index pointer and the event snapshot from the online store.

One daemon thread per process, started and stopped with the app (``create_app(..., refresher=)``).
Each refresh is ``ServingState.refresh_models`` / ``refresh_snapshot``: a failure keeps the last
good model or snapshot serving and shows in ``/healthz``; requests never wait on a refresh (a new
snapshot or model is built aside and swapped in by one assignment).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from serving.state import ServingState

log = logging.getLogger(__name__)


@dataclass
class RefreshStats:
    """What /healthz shows about the refresher: when each refresh last ran and how often."""

    model_runs: int = 0
    snapshot_runs: int = 0
    check_runs: int = 0
    last_model_at: float | None = None
    last_snapshot_at: float | None = None
    last_check_at: float | None = None
    errors: list[str] = field(default_factory=list)


class BackgroundRefresher:
    """Calls ``state.check_dependencies()`` every ``check_every_s``, ``state.refresh_models()`` every
    ``model_every_s`` and ``state.refresh_index()`` then ``state.refresh_snapshot()`` every
    ``snapshot_every_s`` seconds (0: never) on a daemon thread."""

    def __init__(
        self, state: ServingState, model_every_s: float, snapshot_every_s: float, check_every_s: float = 0.0
    ) -> None:
        self.state = state
        self.model_every_s = model_every_s
        self.snapshot_every_s = snapshot_every_s
        self.check_every_s = check_every_s
        self.stats = RefreshStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if (
            self._thread is not None
            or max(self.model_every_s, self.snapshot_every_s, self.check_every_s) <= 0
        ):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="turnout-refresh", daemon=True)
        self._thread.start()
        log.info(
            "background refresh: models every %ss, snapshot every %ss",
            self.model_every_s,
            self.snapshot_every_s,
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        started = time.monotonic()

        def first(every: float) -> float:
            return started + every if every > 0 else float("inf")

        next_check, next_model = first(self.check_every_s), first(self.model_every_s)
        next_snapshot = first(self.snapshot_every_s)
        while not self._stop.wait(max(0.0, min(next_check, next_model, next_snapshot) - time.monotonic())):
            now = time.monotonic()
            if now >= next_check:
                self._once("check", self.state.check_dependencies)
                next_check = time.monotonic() + self.check_every_s
            if now >= next_model:
                self._once("model", self.state.refresh_models)
                next_model = time.monotonic() + self.model_every_s
            if now >= next_snapshot:
                self._once("index", self.state.refresh_index)
                self._once("snapshot", self.state.refresh_snapshot)
                next_snapshot = time.monotonic() + self.snapshot_every_s

    def _once(self, what: str, refresh: Callable[[], object]) -> None:
        t = time.perf_counter()
        try:
            refresh()
        except Exception as e:  # the state's own methods catch dependency failures; this is a bug
            log.exception("%s refresh raised", what)
            self.stats.errors = [*self.stats.errors[-9:], f"{what}: {e}"]
        if what == "check":
            self.stats.check_runs += 1
            self.stats.last_check_at = time.time()
        elif what == "model":
            self.stats.model_runs += 1
            self.stats.last_model_at = time.time()
        elif what == "snapshot":
            self.stats.snapshot_runs += 1
            self.stats.last_snapshot_at = time.time()
        log.debug("%s refresh took %.0f ms", what, (time.perf_counter() - t) * 1000)
