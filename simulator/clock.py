"""Time helpers: instants are int64 UTC seconds inside the simulator, ISO strings at the edge.

Venue wall-clock times go through pandas' tz database so DST gaps and repeated hours are
detected, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

HOUR = 3600
DAY = 86_400

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def iso_instants(seconds: npt.ArrayLike) -> npt.NDArray[np.object_]:
    """UTC seconds -> ``2026-11-01T05:30:00Z`` strings (the landing ``instant`` kind)."""
    secs = np.asarray(seconds, dtype=np.int64).astype("datetime64[s]")
    out: npt.NDArray[np.object_] = np.char.add(np.datetime_as_string(secs, unit="s"), "Z").astype(object)
    return out


def iso_local(seconds: npt.ArrayLike) -> npt.NDArray[np.object_]:
    """Naive wall-clock seconds -> ``2026-11-01T01:30:00`` (the ``local_datetime`` kind)."""
    secs = np.asarray(seconds, dtype=np.int64).astype("datetime64[s]")
    out: npt.NDArray[np.object_] = np.datetime_as_string(secs, unit="s").astype(object)
    return out


def index_seconds(idx: pd.DatetimeIndex) -> IntArray:
    """Epoch seconds of a (naive or tz-aware) DatetimeIndex; NaT becomes int64 min."""
    naive = idx.tz_convert(None) if idx.tz is not None else idx
    out: IntArray = naive.to_numpy().astype("datetime64[s]").astype(np.int64)
    return out


def utc_offsets(utc_seconds: IntArray, tz: str) -> IntArray:
    """The zone's UTC offset (seconds) at each instant."""
    idx = pd.DatetimeIndex(np.asarray(utc_seconds, dtype=np.int64).astype("datetime64[s]"))
    local = idx.tz_localize("UTC").tz_convert(tz).tz_localize(None)
    offsets: IntArray = index_seconds(local) - index_seconds(idx)
    return offsets


@dataclass(frozen=True)
class Localized:
    """Wall-clock times resolved in a zone; ``utc`` is -1 where the time does not exist."""

    utc: IntArray
    ambiguous: BoolArray
    nonexistent: BoolArray


def localize(local_seconds: IntArray, tz: str) -> Localized:
    """Resolve naive wall-clock seconds in ``tz``; repeated-hour times take the first (DST) pass.

    The simulated world needs one true instant per event; the platform only ever sees the wall
    clock and the zone, which is exactly the ambiguity ingestion has to resolve by policy.
    """
    local = np.asarray(local_seconds, dtype=np.int64)
    idx = pd.DatetimeIndex(local.astype("datetime64[s]"))
    first = idx.tz_localize(tz, ambiguous=np.ones(len(idx), dtype=bool), nonexistent="NaT")
    second = idx.tz_localize(tz, ambiguous=np.zeros(len(idx), dtype=bool), nonexistent="NaT")
    nonexistent: BoolArray = np.asarray(first.isna(), dtype=np.bool_)
    differs: BoolArray = np.asarray(first != second, dtype=np.bool_)
    ambiguous: BoolArray = ~nonexistent & differs
    utc = np.where(nonexistent, -1, index_seconds(first)).astype(np.int64)
    return Localized(utc=utc, ambiguous=ambiguous, nonexistent=nonexistent)


def to_local(utc_seconds: IntArray, tz: str) -> IntArray:
    """UTC seconds -> naive wall-clock seconds in ``tz``."""
    utc = np.asarray(utc_seconds, dtype=np.int64)
    return utc + utc_offsets(utc, tz)


@dataclass(frozen=True)
class Transition:
    """One DST switch: the UTC instant and the wall-clock hour that repeats or is skipped."""

    utc: int
    local_start: int  # naive local seconds where the repeated/skipped interval starts
    length: int  # seconds


def dst_transitions(tz: str, start_utc: int, end_utc: int) -> tuple[list[Transition], list[Transition]]:
    """Fall-back (repeated hour) and spring-forward (gap) transitions of ``tz`` in a range."""
    grid = np.arange(start_utc - start_utc % HOUR, end_utc + HOUR, HOUR, dtype=np.int64)
    offsets = utc_offsets(grid, tz)
    change = np.nonzero(np.diff(offsets) != 0)[0]
    fall: list[Transition] = []
    spring: list[Transition] = []
    for i in change:  # at most a few per year
        before, after = int(offsets[i]), int(offsets[i + 1])
        # Offsets change on the hour in every zone we simulate; refine to the exact second anyway.
        lo, hi = int(grid[i]), int(grid[i + 1])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(utc_offsets(np.array([mid], dtype=np.int64), tz)[0]) == before:
                lo = mid
            else:
                hi = mid
        if after < before:
            fall.append(Transition(utc=hi, local_start=hi + after, length=before - after))
        else:
            spring.append(Transition(utc=hi, local_start=hi + before, length=after - before))
    return fall, spring
