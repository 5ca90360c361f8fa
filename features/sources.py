"""Where feature values come from: the gold Delta tables, and what the request itself carries.

Every gold row is stamped with ``event_timestamp`` (the instant its value became known) and
``created`` (when it was written). Feast's point-in-time join keys on the first and uses the
second to break ties; ``pipelines.features.store`` also asks it to hide rows created after the
label instant (see ``historical_features``).

Gold paths are templates: ``{lake}`` stands for ``settings.lake.root`` and is bound when the
definitions are applied, so the same declarations serve ``local`` and ``cluster``. An unbound
template fails loudly (no such path) instead of reading something relative to the cwd.
"""

from __future__ import annotations

from feast import Field, RequestSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.table_format import DeltaFormat
from feast.types import Float64, Int64

LAKE_ROOT_PLACEHOLDER = "{lake}"
GOLD_LAYER = "gold"
EVENT_TIMESTAMP = "event_timestamp"
CREATED = "created"


def gold_source(table: str, description: str) -> SparkSource:
    """A Spark source over ``gold.<table>`` (Delta), path bound to the lake root at apply time."""
    return SparkSource(
        name=f"{GOLD_LAYER}_{table}",
        path=f"{LAKE_ROOT_PLACEHOLDER}/{GOLD_LAYER}/{table}",
        table_format=DeltaFormat(),
        timestamp_field=EVENT_TIMESTAMP,
        created_timestamp_column=CREATED,
        description=description,
        tags={"layer": GOLD_LAYER, "table": table},
    )


# Profile, shrunken category affinities and travel tolerance, re-stamped when a user's history moves.
user_features_source = gold_source("user_features", "Per-user profile and shrunken rates.")

# Static event attributes: written at creation and on edits.
event_features_source = gold_source("event_features", "Per-event content, price, calendar and place.")

# RSVP count, damped fill rate and 6 h velocity: the fast-moving event signal.
event_dynamics_source = gold_source("event_dynamics", "Per-event RSVP dynamics.")

# Attendance, no-show and rating history of the organizer an event inherits from.
organizer_stats_source = gold_source("organizer_stats", "Per-organizer outcome rates.")

# Attendance, no-show and rating history of the venue.
venue_stats_source = gold_source("venue_stats", "Per-venue outcome rates.")

# Decayed (half-life 8 instances) outcome rates of the series.
series_stats_source = gold_source("series_stats", "Per-series decayed outcome rates.")

# RSVP rate shrunk up metro x category x hour-of-week -> metro x hour -> hour -> global.
market_rates_source = gold_source("market_rates", "Shrunken RSVP rate per market cell.")

# Friends who RSVPed to the event by the row's instant: the surviving collaborative signal.
social_source = gold_source("social", "Friends going, per (user, event).")

# Content-tower vectors, written by the index stage once per event.
event_embeddings_source = gold_source("event_embeddings", "Content-tower embedding per event.")

GOLD_SOURCES: tuple[SparkSource, ...] = (
    user_features_source,
    event_features_source,
    event_dynamics_source,
    organizer_stats_source,
    venue_stats_source,
    series_stats_source,
    market_rates_source,
    social_source,
    event_embeddings_source,
)

# Known only when the feed is requested: where the user is and when they ask. request_ts is UTC
# epoch seconds (like event start_ts); request_utc_offset_min is the offset of the request's metro
# zone at that instant, so hour-of-week is local like the event's own hour_of_week.
request_context = RequestSource(
    name="request_context",
    schema=[
        Field(name="request_lat", dtype=Float64),
        Field(name="request_lng", dtype=Float64),
        Field(name="request_ts", dtype=Float64),
        Field(name="request_utc_offset_min", dtype=Int64),
    ],
    description="Per-request inputs: location, instant (UTC epoch s) and the metro's UTC offset.",
)
