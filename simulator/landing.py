"""World + activity -> clean landing records, exactly in the shape ``landing_schema`` defines.

Pure: returns one DataFrame per entity whose columns are the schema fields in schema order and
whose values are already JSON-ready (instants as ``...Z`` strings, local times without offset,
optional fields as ``None``). ``delivery`` decides when each line arrives and adds the dirt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.landing import ATTENDANCE_SOURCES, CATEGORIES, ENTITIES, EXPLORATION_KINDS, SURFACES
from simulator.activity import Activity
from simulator.clock import iso_instants, iso_local
from simulator.world import World, make_ids

IntArray = npt.NDArray[np.int64]


@dataclass
class LandingTable:
    """Clean records of one entity and the instant each one happened (its on-time delivery)."""

    entity: str
    frame: pd.DataFrame
    version_s: IntArray


@dataclass
class Ids:
    """String ids of every row-addressed thing, shared by landing files and ground truth."""

    users: npt.NDArray[np.object_]
    events: npt.NDArray[np.object_]
    organizers: npt.NDArray[np.object_]
    venues: npt.NDArray[np.object_]
    series: npt.NDArray[np.object_]
    requests: npt.NDArray[np.object_]
    impressions: npt.NDArray[np.object_]
    rsvps: npt.NDArray[np.object_]


def make_id_table(world: World, activity: Activity) -> Ids:
    return Ids(
        users=world.users["user_id"].to_numpy(),
        events=world.events["event_id"].to_numpy(),
        organizers=world.organizers["organizer_id"].to_numpy(),
        venues=world.venues["venue_id"].to_numpy(),
        series=world.series["series_id"].to_numpy(),
        requests=make_ids("r", len(activity.requests), 8),
        impressions=make_ids("i", len(activity.impressions), 10),
        rsvps=make_ids("rv", len(activity.rsvps), 8),
    )


def _optional(ids: npt.NDArray[np.object_], idx: IntArray) -> npt.NDArray[np.object_]:
    """ids[idx] where idx >= 0, else None (an absent optional reference)."""
    out = np.full(len(idx), None, dtype=object)
    has = idx >= 0
    out[has] = ids[idx[has]]
    return out


def _table(entity: str, columns: dict[str, object], version_s: IntArray) -> LandingTable:
    fields = ENTITIES[entity].field_names
    if tuple(columns) != fields:
        raise AssertionError(f"{entity}: columns {tuple(columns)} != schema {fields}")
    frame = pd.DataFrame(columns)
    order = np.argsort(np.asarray(version_s), kind="stable")
    return LandingTable(
        entity=entity,
        frame=frame.iloc[order].reset_index(drop=True),
        version_s=np.asarray(version_s, dtype=np.int64)[order],
    )


def landing_tables(world: World, activity: Activity, ids: Ids) -> dict[str, LandingTable]:
    """Every entity's clean records, ordered by the instant that versions them."""
    metros = np.asarray(world.config.metros, dtype=object)
    cats = np.asarray(CATEGORIES, dtype=object)
    out: dict[str, LandingTable] = {}

    # users: the signup version plus later profile edits (same user_id, later updated_at).
    u = world.users
    # Users who skipped onboarding: most exports omit the list (null), some send [].
    onboarding = _object_array(
        [
            lst if lst is not None else ([] if empty else None)
            for lst, empty in zip(u["onboarding"], u["skipped_as_empty"], strict=True)
        ]
    )
    upd = world.user_updates
    uidx = np.concatenate([np.arange(len(u)), upd["user"].to_numpy(np.int64)])
    updated = np.concatenate([u["signup_s"].to_numpy(np.int64), upd["updated_s"].to_numpy(np.int64)])
    out["users"] = _table(
        "users",
        {
            "user_id": ids.users[uidx],
            "metro": metros[u["metro"].to_numpy()[uidx]],
            "home_lat": u["home_lat"].to_numpy()[uidx],
            "home_lng": u["home_lng"].to_numpy()[uidx],
            "signup_at": iso_instants(u["signup_s"].to_numpy()[uidx]),
            "onboarding_categories": np.concatenate([onboarding, _object_array(list(upd["onboarding"]))]),
            "updated_at": iso_instants(updated),
        },
        updated,
    )

    fr = world.friendships
    out["friendships"] = _table(
        "friendships",
        {
            "user_id": ids.users[fr["a"].to_numpy()],
            "friend_id": ids.users[fr["b"].to_numpy()],
            "created_at": iso_instants(fr["created_s"].to_numpy()),
        },
        fr["created_s"].to_numpy(np.int64),
    )

    org = world.organizers
    out["organizers"] = _table(
        "organizers",
        {
            "organizer_id": ids.organizers,
            "name": org["name"].to_numpy(),
            "metro": metros[org["metro"].to_numpy()],
            "created_at": iso_instants(org["created_s"].to_numpy()),
        },
        org["created_s"].to_numpy(np.int64),
    )

    v = world.venues
    out["venues"] = _table(
        "venues",
        {
            "venue_id": ids.venues,
            "name": v["name"].to_numpy(),
            "metro": metros[v["metro"].to_numpy()],
            "lat": v["lat"].to_numpy(),
            "lng": v["lng"].to_numpy(),
            "timezone": v["timezone"].to_numpy(),
            "created_at": iso_instants(v["created_s"].to_numpy()),
        },
        v["created_s"].to_numpy(np.int64),
    )

    s = world.series
    out["series"] = _table(
        "series",
        {
            "series_id": ids.series,
            "organizer_id": ids.organizers[s["organizer"].to_numpy(np.int64)],
            "title": s["title"].to_numpy(),
            "recurrence": s["recurrence"].to_numpy(),
            "created_at": iso_instants(s["created_s"].to_numpy()),
        },
        s["created_s"].to_numpy(np.int64),
    )

    ev = world.events
    eu = world.event_updates
    eidx = np.concatenate([np.arange(len(ev)), eu["event"].to_numpy(np.int64)])
    e_updated = np.concatenate([ev["created_s"].to_numpy(np.int64), eu["updated_s"].to_numpy(np.int64)])
    tz = world.venues["timezone"].to_numpy()[ev["venue"].to_numpy()]
    out["events"] = _table(
        "events",
        {
            "event_id": ids.events[eidx],
            "organizer_id": ids.organizers[ev["organizer"].to_numpy(np.int64)[eidx]],
            "venue_id": ids.venues[ev["venue"].to_numpy(np.int64)[eidx]],
            "series_id": _optional(ids.series, ev["series"].to_numpy(np.int64)[eidx]),
            "category": cats[ev["category"].to_numpy()[eidx]],
            "title": ev["title"].to_numpy()[eidx],
            "description": np.concatenate([ev["description"].to_numpy(), eu["description"].to_numpy()]),
            "start_local": iso_local(ev["start_local_s"].to_numpy()[eidx]),
            "timezone": tz[eidx],
            "duration_minutes": ev["duration_minutes"].to_numpy(np.int64)[eidx],
            "is_free": ev["is_free"].to_numpy(bool)[eidx],
            "price_cents": ev["price_cents"].to_numpy(np.int64)[eidx],
            "capacity": ev["capacity"].to_numpy(np.int64)[eidx],
            "created_at": iso_instants(ev["created_s"].to_numpy()[eidx]),
            "updated_at": iso_instants(e_updated),
        },
        e_updated,
    )

    cancelled = np.nonzero(ev["cancelled_s"].to_numpy() >= 0)[0]
    c_at = ev["cancelled_s"].to_numpy(np.int64)[cancelled]
    out["event_cancellations"] = _table(
        "event_cancellations",
        {
            "event_id": ids.events[cancelled],
            "cancelled_at": iso_instants(c_at),
            "reason": ev["cancel_reason"].to_numpy()[cancelled],
        },
        c_at,
    )

    im = activity.impressions
    kind = im["kind"].to_numpy(np.int64)
    kinds = np.asarray(EXPLORATION_KINDS, dtype=object)
    out["impressions"] = _table(
        "impressions",
        {
            "impression_id": ids.impressions,
            "request_id": ids.requests[im["request"].to_numpy(np.int64)],
            "user_id": ids.users[im["user"].to_numpy(np.int64)],
            "event_id": ids.events[im["event"].to_numpy(np.int64)],
            "position": im["position"].to_numpy(np.int64),
            "surface": np.asarray(SURFACES, dtype=object)[im["surface"].to_numpy(np.int64)],
            "model_version": np.full(len(im), world.config.model_version, dtype=object),
            "is_exploration": im["is_exploration"].to_numpy(bool),
            "exploration_kind": np.where(kind >= 0, kinds[np.maximum(kind, 0)], None),
            "served_at": iso_instants(im["served_s"].to_numpy()),
        },
        im["served_s"].to_numpy(np.int64),
    )

    rs = activity.rsvps
    out["rsvps"] = _table(
        "rsvps",
        {
            "rsvp_id": ids.rsvps,
            "user_id": ids.users[rs["user"].to_numpy(np.int64)],
            "event_id": ids.events[rs["event"].to_numpy(np.int64)],
            "request_id": _optional(ids.requests, rs["request"].to_numpy(np.int64)),
            "rsvp_at": iso_instants(rs["rsvp_s"].to_numpy()),
        },
        rs["rsvp_s"].to_numpy(np.int64),
    )

    at = activity.attendance
    out["attendance"] = _table(
        "attendance",
        {
            "user_id": ids.users[at["user"].to_numpy(np.int64)],
            "event_id": ids.events[at["event"].to_numpy(np.int64)],
            "attended": at["attended"].to_numpy(bool),
            "source": np.asarray(ATTENDANCE_SOURCES, dtype=object)[at["source"].to_numpy(np.int64)],
            "observed_at": iso_instants(at["observed_s"].to_numpy()),
        },
        at["observed_s"].to_numpy(np.int64),
    )

    ra = activity.ratings
    out["ratings"] = _table(
        "ratings",
        {
            "user_id": ids.users[ra["user"].to_numpy(np.int64)],
            "event_id": ids.events[ra["event"].to_numpy(np.int64)],
            "rating": ra["rating"].to_numpy(np.int64),
            "rated_at": iso_instants(ra["rated_s"].to_numpy()),
        },
        ra["rated_s"].to_numpy(np.int64),
    )

    cs = activity.capacity_snapshots
    out["capacity_snapshots"] = _table(
        "capacity_snapshots",
        {
            "event_id": ids.events[cs["event"].to_numpy(np.int64)],
            "seats_taken": cs["seats_taken"].to_numpy(np.int64),
            "capacity": cs["capacity"].to_numpy(np.int64),
            "snapshot_at": iso_instants(cs["snapshot_s"].to_numpy()),
        },
        cs["snapshot_s"].to_numpy(np.int64),
    )
    missing = set(ENTITIES) - set(out)
    if missing:
        raise AssertionError(f"no landing table for {sorted(missing)}")
    return {name: out[name] for name in ENTITIES}


def _object_array(values: list[object]) -> npt.NDArray[np.object_]:
    """A 1-d object array of arbitrary objects (lists stay lists, not a 2-d array)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # per user, not per impression
        out[i] = value
    return out
