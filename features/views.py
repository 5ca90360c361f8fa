"""Feature views over the gold tables. Feature names are defined here and nowhere else.

Each schema starts with the view's join keys, so entity columns are declared rather than
inferred (inference at apply time would mutate the objects and read the gold tables).

TTL is how far back the offline point-in-time join looks for a row; Feast does not filter
online reads by it, so serving must apply the same age limit itself (a view's ``ttl`` is in
the registry). Each TTL is the longest gap between two rows of one entity after which the
last value is no longer the truth.
"""

from __future__ import annotations

from datetime import timedelta

from feast import FeatureView, Field
from feast.types import Array, Float32, Float64, Int64, String

from contracts.landing import CATEGORIES
from features import entities, sources


def affinity_feature(category: str) -> str:
    """The user_features column holding the user's shrunken affinity for ``category``."""
    return f"aff_{category}"


AFFINITY_FEATURES: tuple[str, ...] = tuple(affinity_feature(c) for c in CATEGORIES)
EMBEDDING_DIM = 64

# A profile moves only when the user's history does; a user silent for a quarter is closer to
# new than to their old profile, and cold-start defaults beat a stale one.
user_features = FeatureView(
    name="user_features",
    entities=[entities.user],
    ttl=timedelta(days=90),
    schema=[
        Field(name="user_id", dtype=String),
        Field(name="metro", dtype=String),
        Field(name="home_lat", dtype=Float64),
        Field(name="home_lng", dtype=Float64),
        Field(name="home_cell7", dtype=String),
        Field(name="history_depth", dtype=Int64),
        Field(name="attended_count", dtype=Int64),
        Field(name="attend_rate_shrunk", dtype=Float64),
        Field(name="travel_tolerance_km", dtype=Float64),
        Field(name="onboarded", dtype=Int64),
        *[Field(name=name, dtype=Float64) for name in AFFINITY_FEATURES],
    ],
    source=sources.user_features_source,
    online=True,
    description="User profile: history depth, shrunken attend rate and affinities, travel tolerance.",
)

# Written at creation and on edits; an event is listed at most a few months ahead, and a row
# must stay visible from creation until its last label (attendance, about 9 days after start).
event_features = FeatureView(
    name="event_features",
    entities=[entities.event],
    ttl=timedelta(days=180),
    schema=[
        Field(name="event_id", dtype=String),
        Field(name="organizer_id", dtype=String),
        Field(name="venue_id", dtype=String),
        Field(name="series_id", dtype=String),
        Field(name="metro", dtype=String),
        Field(name="category", dtype=String),
        Field(name="is_free", dtype=Int64),
        Field(name="price_cents", dtype=Int64),
        Field(name="capacity", dtype=Int64),
        Field(name="start_ts", dtype=Float64),
        Field(name="hour_of_week", dtype=Int64),
        Field(name="week_of_year", dtype=Int64),
        Field(name="days_to_nearest_holiday", dtype=Int64),
        Field(name="venue_lat", dtype=Float64),
        Field(name="venue_lng", dtype=Float64),
        Field(name="cell5", dtype=String),
        Field(name="cell7", dtype=String),
        Field(name="market_key", dtype=String),
    ],
    source=sources.event_features_source,
    online=True,
    description="Static event attributes, and the keys of the entities an event inherits from.",
)

# Fast-moving: a count or velocity older than two days describes a different moment. Equal to
# serving's max_online_age_hours (48), so training and serving agree on what is missing.
event_dynamics = FeatureView(
    name="event_dynamics",
    entities=[entities.event],
    ttl=timedelta(hours=48),
    schema=[
        Field(name="event_id", dtype=String),
        Field(name="rsvp_count", dtype=Int64),
        Field(name="fill_rate", dtype=Float64),
        Field(name="rsvp_velocity_6h", dtype=Float64),
    ],
    source=sources.event_dynamics_source,
    online=True,
    description="RSVP count, fill rate (damped above 0.9) and RSVP velocity over 6 h.",
)

# Persistent entities move only when one of their events completes (a monthly organizer: every
# ~30 days); their last rates stay the best estimate for half a year.
organizer_stats = FeatureView(
    name="organizer_stats",
    entities=[entities.organizer],
    ttl=timedelta(days=180),
    schema=[
        Field(name="organizer_id", dtype=String),
        Field(name="org_event_count", dtype=Int64),
        Field(name="org_attend_rate", dtype=Float64),
        Field(name="org_noshow_rate", dtype=Float64),
        Field(name="org_rating_mean", dtype=Float64),
        Field(name="org_rating_count", dtype=Int64),
    ],
    source=sources.organizer_stats_source,
    online=True,
    description="Organizer attendance, no-show and rating history.",
)

# Same cadence as organizers: a venue's rates change when an event there completes.
venue_stats = FeatureView(
    name="venue_stats",
    entities=[entities.venue],
    ttl=timedelta(days=180),
    schema=[
        Field(name="venue_id", dtype=String),
        Field(name="venue_attend_rate", dtype=Float64),
        Field(name="venue_noshow_rate", dtype=Float64),
        Field(name="venue_rating_mean", dtype=Float64),
        Field(name="venue_rating_count", dtype=Int64),
    ],
    source=sources.venue_stats_source,
    online=True,
    description="Venue attendance, no-show and rating history.",
)

# A series updates once per instance (weekly to monthly); half a year covers several instances.
series_stats = FeatureView(
    name="series_stats",
    entities=[entities.series],
    ttl=timedelta(days=180),
    schema=[
        Field(name="series_id", dtype=String),
        Field(name="series_instances", dtype=Int64),
        Field(name="series_attend_rate", dtype=Float64),
        Field(name="series_noshow_rate", dtype=Float64),
        Field(name="series_rating_mean", dtype=Float64),
    ],
    source=sources.series_stats_source,
    online=True,
    description="Series outcome rates, decayed with a half-life of 8 instances.",
)

# Refit as impressions accrue; a month-old market rate has missed a season turning.
market_rates = FeatureView(
    name="market_rates",
    entities=[entities.market],
    ttl=timedelta(days=30),
    schema=[
        Field(name="market_key", dtype=String),
        Field(name="market_rsvp_rate", dtype=Float64),
        Field(name="market_impressions", dtype=Int64),
    ],
    source=sources.market_rates_source,
    online=True,
    description="RSVP rate shrunk up metro x category x hour-of-week -> metro x hour -> hour -> global.",
)

# A count of friends going holds until the event is over; events are listed months ahead.
social = FeatureView(
    name="social",
    entities=[entities.user, entities.event],
    ttl=timedelta(days=180),
    schema=[
        Field(name="user_id", dtype=String),
        Field(name="event_id", dtype=String),
        Field(name="friends_going", dtype=Int64),
        Field(name="friends_going_bucket", dtype=Int64),
    ],
    source=sources.social_source,
    online=True,
    description="Friends who RSVPed to the event by the row's instant (bucket 0/1/2/3+).",
)

# Computed once per event at creation, like event_features.
event_embeddings = FeatureView(
    name="event_embeddings",
    entities=[entities.event],
    ttl=timedelta(days=180),
    schema=[
        Field(name="event_id", dtype=String),
        Field(name="tower_version", dtype=String),
        Field(name="embedding", dtype=Array(Float32)),
    ],
    source=sources.event_embeddings_source,
    online=True,
    description=f"Content-tower embedding ({EMBEDDING_DIM} floats) and the tower version that made it.",
)

FEATURE_VIEWS: tuple[FeatureView, ...] = (
    user_features,
    event_features,
    event_dynamics,
    organizer_stats,
    venue_stats,
    series_stats,
    market_rates,
    social,
    event_embeddings,
)
