"""One feature service per model head; training and serving both read the same service.

A service is a model's input contract: add or change a feature by publishing ``<head>_v<N+1>``
beside the old one, never by editing a published version (models carry its schema hash).
Keys that only route a lookup (ids, cells, market_key) and raw positions or instants stay out:
every model input is a plain number (design: "70 hand-built numbers").
"""

from __future__ import annotations

from feast import FeatureService

from features import crosses, views

_USER_HISTORY = ["history_depth", "attended_count", "attend_rate_shrunk", "travel_tolerance_km", "onboarded"]
_EVENT_STATIC = [
    "is_free",
    "price_cents",
    "capacity",
    "hour_of_week",
    "week_of_year",
    "days_to_nearest_holiday",
]

# Head 1, same-day label "did they RSVP": taste (affinities, market rate, content) matters most.
p_rsvp_v1 = FeatureService(
    name="p_rsvp_v1",
    features=[
        views.user_features[[*_USER_HISTORY, *views.AFFINITY_FEATURES]],
        views.event_features[_EVENT_STATIC],
        views.event_dynamics,
        views.organizer_stats,
        views.venue_stats,
        views.series_stats,
        views.market_rates,
        views.social,
        views.event_embeddings[["embedding"]],
        crosses.request_crosses,
        crosses.category_affinity,
    ],
    description="Inputs of the p_rsvp head (RSVP given impression).",
    tags={"head": "p_rsvp", "version": "1"},
)

# Head 2, "did they show up given an RSVP" (label ~9 days later): reliability signals matter most,
# so taste features stay out and the no-show history of every persistent entity stays in.
p_attend_v1 = FeatureService(
    name="p_attend_v1",
    features=[
        views.user_features[_USER_HISTORY],
        views.event_features[_EVENT_STATIC],
        views.event_dynamics,
        views.organizer_stats,
        views.venue_stats,
        views.series_stats,
        views.social,
        crosses.request_crosses,
    ],
    description="Inputs of the p_attend_given_rsvp head (attendance given RSVP).",
    tags={"head": "p_attend", "version": "1"},
)

FEATURE_SERVICES: tuple[FeatureService, ...] = (p_rsvp_v1, p_attend_v1)
