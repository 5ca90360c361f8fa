"""The feed's response, as plain dataclasses: what the API returns and a client parses.

Kept apart from the request path so a client (``turnout feed --server``) imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FeedItem:
    event_id: str
    position: int
    score: float | None  # calibrated P(attend) = p_rsvp * p_attend_given_rsvp; None on popularity
    p_rsvp: float | None
    p_attend_given_rsvp: float | None
    distance_km: float
    friends_going: int
    is_exploration: bool
    exploration_kind: str | None
    category: str
    organizer_id: str
    starts_at: str  # UTC
    starts_at_local: str  # the venue's wall clock, with its offset
    timezone: str


@dataclass
class FeedResult:
    request_id: str
    user_id: str
    served_at: str
    model_version: str
    served_by: str
    location_source: str  # gps | home
    events: list[FeedItem]
    near_you_this_weekend: list[FeedItem]
    candidates: int  # retrieved, in radius and window, before the hard filters
    eligible: int  # after the hard filters
    scored: int  # rows both full heads scored
    stages_ms: dict[str, float] = field(default_factory=dict)
