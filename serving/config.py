"""Serving knobs in one frozen object, so the app, the tests and the benchmark share defaults.

These are the request path's product knobs, the same in every deployment. What differs per
deployment (the capacity counter's backend, the refresh intervals) is ``settings.serving``.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.compiled import FIRST_STAGE_KEEP


@dataclass(frozen=True)
class ServingConfig:
    feed_size: int = 25  # the home feed; the last slot is the exploration slot
    weekend_size: int = 6  # "near you this weekend"
    weekend_radius_km: float = 16.09  # 10 miles: "near you" is closer than the feed's 25 miles
    max_per_organizer: int = 2
    # MMR trade-off: 1.0 is pure score, 0.0 pure novelty. Similarity is 1 for the same organizer,
    # 0.5 for the same category (organizers mostly stick to a category, so organizer dominates).
    mmr_lambda: float = 0.8
    mmr_pool: int = 300  # MMR looks at the best this-many by score; the 25 come from well inside it
    # The funnel: the p_rsvp head's first stage ranks every candidate, and only the best
    # ``prefilter_keep`` go on to both full heads (design/large-scale-recsys.md), with the best
    # ``weekend_keep`` of the weekend module's candidates (it ranks among those alone).
    prefilter_keep: int = FIRST_STAGE_KEEP
    weekend_keep: int = 60
    # Organizers with at most this many completed events count as cold for the exploration slot.
    cold_organizer_max_events: int = 2
    # LightGBM threads per request: 1 keeps a 2-core box serving two requests at once.
    num_threads: int = 1
    # A user row older than this is treated as missing (Feast does not apply TTL online).
    max_online_age_hours: int = 48
    user_cache_size: int = 50_000  # last good user rows, served when the online store is down
