"""Join keys. The event is permanently cold, so most signal hangs off entities that persist."""

from __future__ import annotations

from feast import Entity, ValueType

# The person asking for a feed; profile, affinities and travel tolerance hang off it.
user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING, description="A platform user.")

# One occurrence at one place and time; carries content, calendar and live RSVP dynamics.
event = Entity(name="event", join_keys=["event_id"], value_type=ValueType.STRING, description="One event.")

# Runs many events: the collaborative signal an event inherits on day one.
organizer = Entity(
    name="organizer",
    join_keys=["organizer_id"],
    value_type=ValueType.STRING,
    description="The organizer running an event.",
)

# Outlives its events: attendance and no-show history by place.
venue = Entity(name="venue", join_keys=["venue_id"], value_type=ValueType.STRING, description="A venue.")

# Recurring events share an audience: history carried across instances.
series = Entity(
    name="series",
    join_keys=["series_id"],
    value_type=ValueType.STRING,
    description="A recurring series; each instance is its own event.",
)

# metro x category x hour-of-week cell, the finest level of the shrunken rate hierarchy.
market = Entity(
    name="market",
    join_keys=["market_key"],
    value_type=ValueType.STRING,
    description='A market cell, "metro|category|hour_of_week".',
)
