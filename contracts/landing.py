"""The landing schema: what a platform export (or the simulator) delivers, entity by entity.

This module is the one place the landing contract is written down; the simulator writes it,
ingestion parses and validates it, and ``docs/landing-schema.md`` is generated from it.

Layout: ``<landing root>/<entity>/delivered=<YYYY-MM-DDTHH>/part-<n>.jsonl``. One JSON object per
line, UTF-8. ``delivered`` is the UTC hour the file arrived in; an hourly ingest run reads exactly
the files delivered in its interval. Files are append-only: a correction is a new record with the
same id delivered later, never an edit of an old file.

Field kinds:

* ``string``, ``int``, ``double``, ``bool``: JSON scalars.
* ``instant``: a UTC instant as ISO-8601 with an explicit ``Z`` or offset
  (``2026-11-01T05:30:00Z``). Bare local times are never instants.
* ``local_datetime``: a wall-clock time without offset (``2026-11-01T01:30:00``), only ever
  next to the IANA zone it is in (``timezone``). Ingestion turns it into an instant by the
  written policy ``LOCAL_TIME_POLICY`` below.
* ``zone``: an IANA zone id (``America/New_York``).
* ``string_list``: a JSON array of strings.
* ``id``: a JSON string naming a record, matching ``ID_PATTERN``: letters and digits, then also
  ``.``, ``_``, ``:`` or ``-``, at most 128 characters. No spaces, slashes, quotes, control,
  zero-width or bidi characters: an id is never text a person typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FieldKind = Literal[
    "string", "id", "int", "double", "bool", "instant", "local_datetime", "zone", "string_list"
]
# What every id (users, events, requests, ...) looks like, in landing files and in API requests.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

CATEGORIES: tuple[str, ...] = (
    "music",
    "nightlife",
    "food_drink",
    "arts",
    "theatre",
    "comedy",
    "sports",
    "fitness",
    "outdoors",
    "tech",
    "business",
    "education",
    "family",
    "community",
    "markets",
    "wellness",
)
SURFACES: tuple[str, ...] = ("home_feed", "near_you_this_weekend")
EXPLORATION_KINDS: tuple[str, ...] = ("random", "cold_organizer")
ATTENDANCE_SOURCES: tuple[str, ...] = ("ticket_scan", "geofence")
RECURRENCES: tuple[str, ...] = ("weekly", "biweekly", "monthly")

# How a venue-local wall-clock time becomes a UTC instant (applied by ingestion):
LOCAL_TIME_POLICY = (
    "A `local_datetime` that occurs twice (the repeated hour when clocks go back) resolves to the "
    "EARLIER instant, the first occurrence, while daylight time is still in effect: an organizer "
    "typing 01:30 on fall-back night means the first 01:30 far more often than the second, and an "
    "early reading never makes a user arrive after the doors opened. Silver records "
    "`<field>_was_ambiguous` so the choice stays visible. A `local_datetime` that never occurs (the "
    "skipped hour when clocks go forward) is quarantined as `nonexistent_local_time:<field>`: there "
    "is no honest instant to guess. The bare local time is dropped after resolution; only the UTC "
    "instant and the zone are stored."
)


@dataclass(frozen=True)
class LandingField:
    name: str
    kind: FieldKind
    required: bool = True
    # Inclusive numeric bounds, or the allowed values of a string field.
    min: float | None = None
    max: float | None = None
    allowed: tuple[str, ...] | None = None
    doc: str = ""


@dataclass(frozen=True)
class LandingEntity:
    name: str
    key: tuple[str, ...]
    # The instant that orders versions of the same key (latest wins in silver).
    version_field: str
    fields: tuple[LandingField, ...]
    doc: str = ""
    field_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_names", tuple(f.name for f in self.fields))


F = LandingField

ENTITIES: dict[str, LandingEntity] = {
    e.name: e
    for e in (
        LandingEntity(
            "users",
            key=("user_id",),
            version_field="updated_at",
            doc="One row per user version; the latest updated_at wins.",
            fields=(
                F("user_id", "id"),
                F("metro", "string", doc="metro id, e.g. 'nyc'"),
                F("home_lat", "double", min=-90, max=90),
                F("home_lng", "double", min=-180, max=180),
                F("signup_at", "instant"),
                F(
                    "onboarding_categories",
                    "string_list",
                    required=False,
                    doc="categories picked at onboarding; empty or absent if skipped",
                ),
                F("updated_at", "instant"),
            ),
        ),
        LandingEntity(
            "friendships",
            key=("user_id", "friend_id"),
            version_field="created_at",
            doc="An undirected friendship, delivered once with user_id < friend_id.",
            fields=(
                F("user_id", "id"),
                F("friend_id", "id"),
                F("created_at", "instant"),
            ),
        ),
        LandingEntity(
            "organizers",
            key=("organizer_id",),
            version_field="created_at",
            fields=(
                F("organizer_id", "id"),
                F("name", "string"),
                F("metro", "string"),
                F("created_at", "instant"),
            ),
        ),
        LandingEntity(
            "venues",
            key=("venue_id",),
            version_field="created_at",
            fields=(
                F("venue_id", "id"),
                F("name", "string"),
                F("metro", "string"),
                F("lat", "double", min=-90, max=90),
                F("lng", "double", min=-180, max=180),
                F("timezone", "zone"),
                F("created_at", "instant"),
            ),
        ),
        LandingEntity(
            "series",
            key=("series_id",),
            version_field="created_at",
            doc="A recurring series (e.g. a weekly run club); each instance is its own event.",
            fields=(
                F("series_id", "id"),
                F("organizer_id", "id"),
                F("title", "string"),
                F("recurrence", "string", allowed=RECURRENCES),
                F("created_at", "instant"),
            ),
        ),
        LandingEntity(
            "events",
            key=("event_id",),
            version_field="updated_at",
            doc="The organizer enters the start as a venue-local wall-clock time; ingestion "
            "resolves it to a UTC instant with the venue zone.",
            fields=(
                F("event_id", "id"),
                F("organizer_id", "id"),
                F("venue_id", "id"),
                F("series_id", "id", required=False),
                F("category", "string", allowed=CATEGORIES),
                F("title", "string"),
                F("description", "string", required=False),
                F("start_local", "local_datetime"),
                F("timezone", "zone"),
                F("duration_minutes", "int", min=1, max=7 * 24 * 60),
                F("is_free", "bool"),
                F("price_cents", "int", min=0, max=10_000_000),
                F("capacity", "int", min=1, max=1_000_000),
                F("created_at", "instant"),
                F("updated_at", "instant"),
            ),
        ),
        LandingEntity(
            "event_cancellations",
            key=("event_id",),
            version_field="cancelled_at",
            fields=(
                F("event_id", "id"),
                F("cancelled_at", "instant"),
                F("reason", "string", required=False),
            ),
        ),
        LandingEntity(
            "impressions",
            key=("impression_id",),
            version_field="served_at",
            doc="One event shown in one feed response, as logged by the serving path.",
            fields=(
                F("impression_id", "id"),
                F("request_id", "id"),
                F("user_id", "id"),
                F("event_id", "id"),
                F("position", "int", min=1, max=100),
                F("surface", "string", allowed=SURFACES),
                F("model_version", "string"),
                F("is_exploration", "bool"),
                F("exploration_kind", "string", required=False, allowed=EXPLORATION_KINDS),
                F("served_at", "instant"),
            ),
        ),
        LandingEntity(
            "rsvps",
            key=("rsvp_id",),
            version_field="rsvp_at",
            fields=(
                F("rsvp_id", "id"),
                F("user_id", "id"),
                F("event_id", "id"),
                F(
                    "request_id",
                    "id",
                    required=False,
                    doc="the feed request whose impression led to it, if any",
                ),
                F("rsvp_at", "instant"),
            ),
        ),
        LandingEntity(
            "attendance",
            key=("user_id", "event_id"),
            version_field="observed_at",
            doc="Whether an RSVPed user showed up; observed 7-17 days after the recommendation.",
            fields=(
                F("user_id", "id"),
                F("event_id", "id"),
                F("attended", "bool"),
                F("source", "string", allowed=ATTENDANCE_SOURCES),
                F("observed_at", "instant"),
            ),
        ),
        LandingEntity(
            "ratings",
            key=("user_id", "event_id"),
            version_field="rated_at",
            doc="Post-event survey answer (about 12% of attendees answer).",
            fields=(
                F("user_id", "id"),
                F("event_id", "id"),
                F("rating", "int", min=1, max=5),
                F("rated_at", "instant"),
            ),
        ),
        LandingEntity(
            "capacity_snapshots",
            key=("event_id", "snapshot_at"),
            version_field="snapshot_at",
            doc="The booking counter for an event at an instant (the authoritative seats taken).",
            fields=(
                F("event_id", "id"),
                F("seats_taken", "int", min=0, max=1_000_000),
                F("capacity", "int", min=1, max=1_000_000),
                F("snapshot_at", "instant"),
            ),
        ),
    )
}


def delivered_partition(hour_iso: str) -> str:
    """The folder name for files delivered in one UTC hour, e.g. ``delivered=2026-11-01T13``."""
    return f"delivered={hour_iso[:13]}"


def render_markdown() -> str:
    """The landing schema as Markdown (``docs/landing-schema.md`` is this output)."""
    lines = [
        "# Landing schema",
        "",
        "Generated from `contracts/landing.py` (`turnout schema > docs/landing-schema.md`).",
        "",
        (__doc__ or "").strip(),
        "",
        "## Local time policy",
        "",
        LOCAL_TIME_POLICY,
        "",
    ]
    for e in ENTITIES.values():
        lines += [f"## `{e.name}`", ""]
        if e.doc:
            lines += [e.doc, ""]
        lines += [
            f"Key: `{', '.join(e.key)}`; versions ordered by `{e.version_field}`.",
            "",
            "| field | kind | required | constraint | note |",
            "| --- | --- | --- | --- | --- |",
        ]
        for f in e.fields:
            if f.allowed:
                constraint = "one of " + ", ".join(f"`{a}`" for a in f.allowed)
            elif f.kind == "id":
                constraint = f"matches `{ID_PATTERN}`"
            elif f.min is not None or f.max is not None:
                constraint = f"{f.min:g} .. {f.max:g}" if f.min is not None and f.max is not None else ""
            else:
                constraint = ""
            lines.append(
                f"| `{f.name}` | {f.kind} | {'yes' if f.required else 'no'} | {constraint} | {f.doc} |"
            )
        lines.append("")
    return "\n".join(lines)
