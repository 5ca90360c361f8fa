"""Simulation knobs: world size, the hidden behavioural parameters and the dirt to inject.

Every rate lives here, with the reason for its default, so a run is fully described by one
``SimulationConfig`` (it is also written to ``truth/params.json``). The defaults are a *demo*
calibration: RSVP probabilities are far above the production 0.128% so that 3,000 users over
28 days yield thousands of RSVPs, but bounded (``base_rsvp_rate * max_affinity * 11.2``, checked
below) so that even the 11.2x friend lift never needs a clip that would distort it.

Sizes (seed 7): the default 3,000 users x 28 days gives ~430k impressions, ~6.5k RSVPs and ~4k
attendances (~485k landing lines, ~140 MB); ``users=7000`` gives ~1.06M impressions. Impressions
scale linearly with ``users``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Metro:
    """A real metro: its center and the IANA zone its venues are in."""

    name: str
    lat: float
    lng: float
    timezone: str
    # Relative share of simulated users (roughly population-proportional).
    weight: float


METROS: dict[str, Metro] = {
    m.name: m
    for m in (
        Metro("nyc", 40.7128, -74.0060, "America/New_York", 0.30),
        Metro("sf", 37.7749, -122.4194, "America/Los_Angeles", 0.15),
        Metro("chicago", 41.8781, -87.6298, "America/Chicago", 0.17),
        Metro("london", 51.5074, -0.1278, "Europe/London", 0.22),
        Metro("berlin", 52.5200, 13.4050, "Europe/Berlin", 0.16),
        Metro("austin", 30.2672, -97.7431, "America/Chicago", 0.08),
        Metro("paris", 48.8566, 2.3522, "Europe/Paris", 0.18),
    )
}

# The design's distance bands (contracts.geo): 0-2 / 2-5 / 5-10 / 10-20 / 20-40 / 40+ miles.
DISTANCE_BAND_LABELS: tuple[str, ...] = ("0-2", "2-5", "5-10", "10-20", "20-40", "40+")
# No p_rsvp may exceed this, so the friend lift is never flattened by a clip.
P_RSVP_CEILING = 0.75


@dataclass(frozen=True)
class SimulationConfig:
    """Everything that determines one simulated history; same config + seed -> same bytes."""

    users: int = 3000
    days: int = 28
    seed: int = 7
    # Days after the history that the platform plays live, hour by hour (``simulator.platform``,
    # the ``platform`` DAG): the world spans them (users sign up, friendships form, events are
    # listed and cancelled), but no activity is simulated for them and none of their landing lines
    # is written up front; each platform hour delivers what that hour brings, and its users
    # respond to the feeds the running service returns.
    platform_days: int = 0
    # The 28-day window spans the EU (Oct 25) and US (Nov 1) DST fall-back nights.
    start: datetime = datetime(2026, 10, 12, tzinfo=UTC)
    metros: tuple[str, ...] = ("nyc", "sf", "chicago", "london", "berlin")

    # --- supply -------------------------------------------------------------------------------
    # Events starting per metro-day, per 1,000 users in the metro: a catalog dense enough that
    # most impressions are local, thin enough that popular events collect several RSVPs so
    # friends overlap on events (the social signal exists).
    events_per_1000_users_per_day: float = 12.0
    venues_per_1000_users: float = 40.0
    # Share of venues placed in neighbourhoods where users live (the rest follow the city's
    # core/suburb/exurb rings), so most impressions are local and a few are 40+ miles away.
    venues_near_people_share: float = 0.85
    organizers_per_1000_users: float = 30.0
    # Share of organizers created recently (cold supply: the exploration slot's other half).
    new_organizer_share: float = 0.15
    # Design: about 22% of events are instances of a recurring series.
    series_event_share: float = 0.22
    # Design: about 2% of events are cancelled.
    cancellation_rate: float = 0.02
    # Share of events that are free (free events are RSVPed ``free_rsvp_boost`` times more
    # often, which makes RSVPs about 55% free / 45% paid as in the design's funnel).
    free_event_share: float = 0.45
    free_rsvp_boost: float = 1.3
    # Share of events with a tiny capacity (classes, workshops): these are the ones that sell out.
    small_capacity_share: float = 0.12
    # Events whose start_local is deliberately in the DST fall-back repeated hour, per metro.
    dst_ambiguous_events_per_metro: int = 2
    # Share of events that get a second version (edited description) during the window.
    event_update_rate: float = 0.04
    # Events are listed this far ahead at most by the logging policy (design: 21 days).
    horizon_days: int = 21

    # --- demand -------------------------------------------------------------------------------
    # Mean home-feed requests per user-day. Each user's rate is lognormal(request_rate_sigma)
    # around it, times ``casual_activity_factor`` for casual users (below): heavy-tailed
    # activity, many users load the feed about once a month, a few daily.
    requests_per_user_day: float = 0.22
    request_rate_sigma: float = 0.6
    # Per-user RSVP propensity (a multiplier on p_rsvp), lognormal with this sigma, mean 1.
    propensity_sigma: float = 0.45
    # Regulars are keen too: correlation of the log propensity with the log request rate.
    propensity_request_correlation: float = 0.6
    # Share of casual users: their feed-request rate and RSVP propensity are these fractions of
    # a regular's (one look a month, rarely a commitment).
    casual_user_share: float = 0.6
    casual_activity_factor: float = 0.1
    casual_propensity_factor: float = 0.4
    # Share of users who signed up inside the window (their history starts at signup).
    new_user_share: float = 0.08
    # Share of users who picked categories at onboarding (design: onboarding matters).
    onboarding_share: float = 0.35
    # Share of users who get a second profile version (e.g. onboarding done later).
    user_update_rate: float = 0.05
    # Friend graph: median friendship stubs per user (the degree ends up about twice this),
    # the mean size of the neighbourhood/interest communities friends cluster in, and the share
    # of stubs that land inside the user's own community.
    friend_stubs_median: float = 8.0
    community_size: int = 30
    friend_in_community_share: float = 0.8

    # --- ground truth of behaviour ----------------------------------------------------------
    # p_rsvp = base_rsvp_rate * saturate(affinity) * distance factor * friend lift, where the
    # affinity (propensity x taste x event factors x lead time) is about 1 for a typical pair.
    base_rsvp_rate: float = 0.032
    # Design table: relative RSVP rate by distance band (normalised to 0-2 miles = 1.00).
    distance_band_factors: tuple[float, ...] = (1.00, 0.61, 0.33, 0.14, 0.045, 0.011)
    # Design table: lift for 0 / 1 / 2 / 3+ friends who RSVPed before the impression instant.
    friend_lifts: tuple[float, ...] = (1.0, 4.7, 7.9, 11.2)
    # Soft ceiling on user x event affinity (see ``model.saturate``); with the base rate it bounds
    # every p_rsvp by base_rsvp_rate * max_affinity * max(friend_lifts).
    max_affinity: float = 2.0
    # Follow-through intercepts (logit) for paid and free RSVPs at 0-2 miles, tuned so that the
    # overall follow-through lands near the design's 0.88 (paid) and 0.41 (free).
    attend_logit_paid: float = 2.45
    attend_logit_free: float = -0.15
    # Follow-through drops with distance (logit shift per band): the flake-on-a-long-drive effect.
    attend_distance_logit: tuple[float, ...] = (0.0, -0.15, -0.35, -0.6, -0.9, -1.2)
    # Share of attendees who answer the post-event rating survey (design: 12%).
    rating_response_rate: float = 0.12
    # RSVPs that do not come from a logged impression (search, shared links), per user-day.
    organic_rsvps_per_user_day: float = 0.004

    # --- logging policy (policy-v0) ---------------------------------------------------------
    model_version: str = "policy-v0"
    slots_per_request: int = 25
    # Share of Thursday-Sunday requests that also carry the "near you this weekend" module.
    near_you_module_rate: float = 0.35
    near_you_slots: int = 5
    near_you_radius_km: float = 10.0
    # An organizer is "cold" for the exploration slot while its events have collected fewer
    # RSVPs than this (no history a model could learn from). When no cold organizer has an
    # eligible event, the slot falls back to a uniformly random one.
    cold_organizer_max_rsvps: int = 10
    # Score = popularity - distance_penalty * log1p(km / 2) - lead_penalty * days + Gumbel noise.
    policy_distance_penalty: float = 2.0
    policy_lead_penalty: float = 0.06
    policy_noise: float = 1.0
    # policy-v0 also surfaces what friends are going to (score += boost * log1p(friends going
    # at the start of the day)); the ground truth lift is per impression, so this selection
    # does not bias the lift measured against the truth, it only makes it measurable.
    policy_friend_boost: float = 2.0

    # --- dirt ---------------------------------------------------------------------------------
    duplicate_rate: float = 0.01  # share of records delivered twice (byte-identical)
    late_rate: float = 0.02  # share of records delivered hours-days late
    malformed_rate: float = 0.005  # malformed lines per clean record (each with a fresh key)
    # Landing files are split into parts of at most this many lines.
    part_max_lines: int = 100_000

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.users < 10:
            problems.append("users must be >= 10")
        if self.days < 1:
            problems.append("days must be >= 1")
        if self.platform_days < 0:
            problems.append("platform_days must be >= 0")
        if self.start.tzinfo is None or self.start.utcoffset() != UTC.utcoffset(None):
            problems.append("start must be timezone-aware UTC")
        unknown = [m for m in self.metros if m not in METROS]
        if unknown or not self.metros:
            problems.append(f"unknown metros {unknown}; known: {sorted(METROS)}")
        if len(self.distance_band_factors) != len(DISTANCE_BAND_LABELS):
            problems.append("distance_band_factors needs one factor per band")
        if len(self.attend_distance_logit) != len(DISTANCE_BAND_LABELS):
            problems.append("attend_distance_logit needs one value per band")
        if len(self.friend_lifts) != 4:
            problems.append("friend_lifts needs 4 values (0, 1, 2, 3+ friends)")
        for name in (
            "duplicate_rate",
            "late_rate",
            "malformed_rate",
            "cancellation_rate",
            "free_event_share",
            "series_event_share",
            "onboarding_share",
            "new_user_share",
            "rating_response_rate",
            "near_you_module_rate",
            "base_rsvp_rate",
            "small_capacity_share",
            "event_update_rate",
            "user_update_rate",
            "friend_in_community_share",
            "new_organizer_share",
            "venues_near_people_share",
            "propensity_request_correlation",
            "casual_user_share",
            "casual_activity_factor",
            "casual_propensity_factor",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                problems.append(f"{name} must be in [0, 1], got {value}")
        if not 1 <= self.slots_per_request <= 100:
            problems.append("slots_per_request must be in 1..100 (landing position bound)")
        if self.part_max_lines < 1:
            problems.append("part_max_lines must be >= 1")
        ceiling = self.base_rsvp_rate * self.max_affinity * max(self.friend_lifts, default=1.0)
        if ceiling > P_RSVP_CEILING:
            problems.append(
                f"base_rsvp_rate * max_affinity * max(friend_lifts) = {ceiling:.2f} > "
                f"{P_RSVP_CEILING}: p_rsvp must stay well below 1 so lifts are not clipped"
            )
        if problems:
            raise ValueError("invalid SimulationConfig: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (datetimes as ISO strings)."""
        out = asdict(self)
        out["start"] = self.start.strftime("%Y-%m-%dT%H:%M:%SZ")
        out["metros"] = list(self.metros)
        for key, value in list(out.items()):
            if isinstance(value, tuple):
                out[key] = list(value)
        return out
