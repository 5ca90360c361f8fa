"""Ordering after scoring: the cheap first stage, MMR with an organizer cap, the exploration slot.

All functions take arrays over the request's filtered candidates and return positions into them.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from models.heads import Head

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

EXPLORATION_KINDS: Final = ("random", "cold_organizer")


def prefilter(
    x: pd.DataFrame | F64,
    head: Head,
    keep: int,
    num_threads: int = 1,
    also: Bool | None = None,
    also_keep: int = 0,
) -> I64:
    """Positions of the best ``keep`` rows by ``head``'s first stage (``x``: a frame, or a matrix
    of ``head.first_stage_columns()`` in order), and of the best ``also_keep`` among the rows
    ``also`` marks (a module that ranks only those rows needs its own best, whatever the others').

    The first stage of the funnel: a small forest distilled from the p_rsvp head orders candidates
    roughly as the head does, at a fraction of the cost. Both full heads then score only the
    survivors. With ``keep`` or fewer rows nothing is cut. The bench and the evaluation measure
    what the cut loses at the top 25.
    """
    n = len(x)
    if n <= keep:
        return np.arange(n, dtype=np.int64)
    raw = head.first_stage_raw(x, num_threads)
    best = np.argpartition(-raw, keep - 1)[:keep]
    if also is not None and also_keep > 0:
        marked = np.flatnonzero(also)
        if len(marked) > also_keep:
            marked = marked[np.argpartition(-raw[marked], also_keep - 1)[:also_keep]]
        best = np.union1d(best, marked)
    return np.sort(best).astype(np.int64)


def mmr_select(
    score: F64,
    organizer: I64,
    category: I64,
    k: int,
    lam: float,
    max_per_organizer: int,
    pool: int,
    fill: bool = False,
) -> I64:
    """Greedy maximal marginal relevance over the best ``pool`` rows, at most ``max_per_organizer``.

    Each pick maximizes ``lam * score / max(score) - (1 - lam) * sim``, where ``sim`` is 1 when
    the organizer is already on the page and 0.5 when only the category is (organizer is the
    stronger redundancy: the same people, the same crowd). Ties go to the higher score, then to
    the earlier row, so the order is deterministic. With ``fill``, once no organizer with room is
    left, the cap is relaxed and the picking goes on in the same MMR order: a short metro still
    gets a full page, its repeats ranked last.
    """
    n = len(score)
    if n == 0 or k <= 0:
        return np.empty(0, dtype=np.int64)
    top = np.argsort(-score, kind="stable")[: max(pool, k)]
    s = score[top]
    rel = s / s.max() if s.max() > 0 else np.zeros_like(s)
    _, org = np.unique(organizer[top], return_inverse=True)
    _, cat = np.unique(category[top], return_inverse=True)
    org_count = np.zeros(org.max() + 1, dtype=np.int64)
    cat_seen = np.zeros(cat.max() + 1, dtype=bool)
    taken = np.zeros(len(top), dtype=bool)
    picks: list[int] = []
    capped = True
    while len(picks) < min(k, len(top)):
        used_org = org_count[org]
        sim = np.where(used_org > 0, 1.0, np.where(cat_seen[cat], 0.5, 0.0))
        value = lam * rel - (1 - lam) * sim
        value[taken | (capped & (used_org >= max_per_organizer))] = -np.inf
        best = int(np.argmax(value))
        if not np.isfinite(value[best]):
            if fill and capped:
                capped = False
                continue
            break
        taken[best] = True
        picks.append(best)
        org_count[org[best]] += 1
        cat_seen[cat[best]] = True
    return top[np.array(picks, dtype=np.int64)]


def pick_exploration(
    rng: np.random.Generator,
    eligible: Bool,
    cold: Bool,
) -> tuple[int, str] | None:
    """Slot 25: a coin flip between a uniformly random eligible event (the unbiased evaluation
    log) and a random cold organizer's event (the supply-ramp treatment). With no cold event on
    offer the random arm serves; with nothing eligible the slot is not filled."""
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return None
    kind = EXPLORATION_KINDS[int(rng.integers(2))]
    if kind == "cold_organizer":
        cold_candidates = np.flatnonzero(eligible & cold)
        if len(cold_candidates):
            return int(rng.choice(cold_candidates)), kind
        kind = "random"
    return int(rng.choice(candidates)), kind
