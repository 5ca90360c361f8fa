"""The hidden ground truth: written next to the landing data, queried by evaluation.

Offline evaluation can ask "what was the real probability?" for any (user, event, instant),
including pairs the logging policy never showed, which no logged metric can answer.

Files under ``truth_root``:

* ``users.parquet``: home, propensity, request rate, follow-through reliability, one
  ``taste_<category>`` column per category, final onboarding list.
* ``events.parquet``: venue position, true start/end instants (``start_ambiguous`` marks a
  start_local in a repeated DST hour, resolved to its first occurrence), cancellation,
  appeal, organizer and series quality, metro x category x hour-of-week factor.
* ``organizers.parquet``, ``series.parquet``: quality and reliability the events inherit.
* ``metro_category_hour.parquet``: the metro x category x hour-of-week taste table.
* ``impressions.parquet``: per impression the friends-going count and p_rsvp it was sampled with.
* ``attendance.parquet``: per RSVP the p_attend_given_rsvp it was sampled with.
* ``friendships.parquet``, ``rsvps.parquet``: who is friends with whom since when, and every
  accepted RSVP with its instant (what "friends going" and the booking counters are made of).
* ``params.json`` / ``params.parquet``: the configuration and model constants.
* ``manifest.json``: the run summary (written by ``run.simulate``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.geo import DISTANCE_BAND_EDGES_MILES, haversine_km
from contracts.instants import parse_instant
from contracts.landing import CATEGORIES
from simulator.activity import Activity
from simulator.clock import DAY, index_seconds, iso_local
from simulator.config import DISTANCE_BAND_LABELS, SimulationConfig
from simulator.landing import Ids
from simulator.model import (
    apply_friend_lift,
    attend_probability,
    rsvp_probability_without_friends,
)
from simulator.world import World

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

TASTE_PREFIX = "taste_"


def _ts(seconds: npt.ArrayLike) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(np.asarray(seconds, dtype=np.int64), unit="s", utc=True))


def _cancel_ts(seconds: npt.ArrayLike) -> pd.DatetimeIndex:
    secs = np.asarray(seconds, dtype=np.int64)
    vals = pd.to_datetime(np.where(secs >= 0, secs, 0), unit="s", utc=True)
    return pd.DatetimeIndex(vals.where(secs >= 0))


def model_params(config: SimulationConfig) -> dict[str, Any]:
    """Everything ``GroundTruth`` needs besides the tables, JSON-ready."""
    return {
        "config": config.to_dict(),
        "distance_band_edges_miles": list(DISTANCE_BAND_EDGES_MILES),
        "distance_band_labels": list(DISTANCE_BAND_LABELS),
        "lead_factor": "0.55 + 0.75 * exp(-lead_days / 6)",
        "friends_going_definition": (
            "friends whose friendship created_at <= t and whose rsvp_at < t for the same event"
        ),
        "ambiguous_start_local_resolution": "first occurrence (the pre-transition offset)",
        "p_rsvp_zero_when": "t < event created_at, t >= event start, or t >= cancelled_at",
        "p_attend_zero_when": "the event was cancelled",
    }


def write_truth(world: World, activity: Activity, ids: Ids, truth_root: Path) -> None:
    """Persist the latent world (parquet) and the parameters (JSON + parquet)."""
    truth_root.mkdir(parents=True, exist_ok=True)
    cfg = world.config
    metros = np.asarray(cfg.metros, dtype=object)
    cats = np.asarray(CATEGORIES, dtype=object)

    u = world.users
    onboarding = u["onboarding"].to_numpy().copy()
    upd = world.user_updates.sort_values("updated_s", kind="stable")
    for user, lst in zip(upd["user"], upd["onboarding"], strict=True):  # few hundred rows
        onboarding[user] = lst
    users = pd.DataFrame(
        {
            "user_id": ids.users,
            "metro": metros[u["metro"].to_numpy()],
            "home_lat": u["home_lat"].to_numpy(),
            "home_lng": u["home_lng"].to_numpy(),
            "community": u["community"].to_numpy(),
            "signup_at": _ts(u["signup_s"].to_numpy()),
            "propensity": u["propensity"].to_numpy(),
            "request_rate_per_day": u["request_rate"].to_numpy(),
            "reliability": u["reliability"].to_numpy(),
            "onboarding_categories": onboarding,
        }
    )
    for c, cat in enumerate(CATEGORIES):
        users[f"{TASTE_PREFIX}{cat}"] = world.taste[:, c]
    users.to_parquet(truth_root / "users.parquet", index=False)

    ev = world.events
    venue = ev["venue"].to_numpy()
    series_idx = ev["series"].to_numpy()
    series_id = np.full(len(ev), None, dtype=object)
    series_id[series_idx >= 0] = ids.series[series_idx[series_idx >= 0]]
    events = pd.DataFrame(
        {
            "event_id": ids.events,
            "organizer_id": ids.organizers[ev["organizer"].to_numpy()],
            "venue_id": ids.venues[venue],
            "series_id": series_id,
            "metro": metros[ev["metro"].to_numpy()],
            "category": cats[ev["category"].to_numpy()],
            "lat": world.venues["lat"].to_numpy()[venue],
            "lng": world.venues["lng"].to_numpy()[venue],
            "timezone": world.venues["timezone"].to_numpy()[venue],
            "start_local": iso_local(ev["start_local_s"].to_numpy()),
            "start_ambiguous": ev["start_ambiguous"].to_numpy(bool),
            "start_at": _ts(ev["start_s"].to_numpy()),
            "end_at": _ts(ev["end_s"].to_numpy()),
            "created_at": _ts(ev["created_s"].to_numpy()),
            "cancelled_at": _cancel_ts(ev["cancelled_s"].to_numpy()),
            "is_free": ev["is_free"].to_numpy(bool),
            "price_cents": ev["price_cents"].to_numpy(),
            "capacity": ev["capacity"].to_numpy(),
            "hour_of_week": ev["hour_of_week"].to_numpy(),
            "appeal": ev["appeal"].to_numpy(),
            "organizer_quality": ev["organizer_quality"].to_numpy(),
            "series_quality": ev["series_quality"].to_numpy(),
            "quality": ev["quality"].to_numpy(),
            "mch_factor": ev["mch_factor"].to_numpy(),
            "event_factor": ev["event_factor"].to_numpy(),
            "attend_offset": ev["attend_offset"].to_numpy(),
        }
    )
    events.to_parquet(truth_root / "events.parquet", index=False)

    org = world.organizers
    pd.DataFrame(
        {
            "organizer_id": ids.organizers,
            "metro": metros[org["metro"].to_numpy()],
            "created_at": _ts(org["created_s"].to_numpy()),
            "is_new": org["is_new"].to_numpy(bool),
            "primary_category": cats[org["primary_category"].to_numpy()],
            "quality": org["quality"].to_numpy(),
            "reliability": org["reliability"].to_numpy(),
            "activity": org["activity"].to_numpy(),
        }
    ).to_parquet(truth_root / "organizers.parquet", index=False)

    se = world.series
    pd.DataFrame(
        {
            "series_id": ids.series,
            "organizer_id": ids.organizers[se["organizer"].to_numpy(np.int64)],
            "recurrence": se["recurrence"].to_numpy(),
            "category": cats[se["category"].to_numpy(np.int64)],
            "quality": se["quality"].to_numpy(np.float64),
            "reliability": se["reliability"].to_numpy(np.float64),
        }
    ).to_parquet(truth_root / "series.parquet", index=False)

    n_m, n_c, n_h = world.mch.shape
    pd.DataFrame(
        {
            "metro": np.repeat(metros, n_c * n_h),
            "category": np.tile(np.repeat(cats, n_h), n_m),
            "hour_of_week": np.tile(np.arange(n_h), n_m * n_c),
            "factor": world.mch.ravel(),
        }
    ).to_parquet(truth_root / "metro_category_hour.parquet", index=False)

    im = activity.impressions
    pd.DataFrame(
        {
            "impression_id": ids.impressions,
            "friends_going": im["friends_going"].to_numpy(np.int64),
            "p_rsvp": im["p_rsvp"].to_numpy(np.float64),
        }
    ).to_parquet(truth_root / "impressions.parquet", index=False)
    at = activity.attendance
    pd.DataFrame(
        {
            "user_id": ids.users[at["user"].to_numpy(np.int64)],
            "event_id": ids.events[at["event"].to_numpy(np.int64)],
            "p_attend_given_rsvp": np.where(at["cancelled"].to_numpy(bool), 0.0, at["p_attend"].to_numpy()),
        }
    ).to_parquet(truth_root / "attendance.parquet", index=False)

    fr = world.friendships
    pd.DataFrame(
        {
            "user_id": ids.users[fr["a"].to_numpy(np.int64)],
            "friend_id": ids.users[fr["b"].to_numpy(np.int64)],
            "created_at": _ts(fr["created_s"].to_numpy()),
        }
    ).to_parquet(truth_root / "friendships.parquet", index=False)
    rs = activity.rsvps
    pd.DataFrame(
        {
            "user_id": ids.users[rs["user"].to_numpy(np.int64)],
            "event_id": ids.events[rs["event"].to_numpy(np.int64)],
            "rsvp_at": _ts(rs["rsvp_s"].to_numpy()),
        }
    ).to_parquet(truth_root / "rsvps.parquet", index=False)

    params = model_params(cfg)
    (truth_root / "params.json").write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    flat = _flatten(params["config"])
    pd.DataFrame({"name": list(flat), "value": [json.dumps(v) for v in flat.values()]}).to_parquet(
        truth_root / "params.parquet", index=False
    )


def _flatten(values: dict[str, Any]) -> dict[str, Any]:
    """Lists become name_0, name_1, ... so every parameter is one row."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, list):
            for i, item in enumerate(value):
                out[f"{key}_{i}"] = item
        else:
            out[key] = value
    return out


def _as_utc_seconds(at: Any, n: int) -> IntArray:
    """datetime64 (naive = UTC), tz-aware pandas values or ISO strings -> epoch seconds."""
    arr = np.asarray(at)
    if arr.dtype.kind == "M":
        secs = arr.astype("datetime64[s]").astype(np.int64)
    else:
        secs = index_seconds(pd.DatetimeIndex(pd.to_datetime(np.atleast_1d(arr), utc=True)))
    out: IntArray = np.broadcast_to(np.atleast_1d(secs), (n,)).astype(np.int64)
    return out


@dataclass
class GroundTruth:
    """Vectorized access to the true behavioural probabilities of one simulated world."""

    config: SimulationConfig
    users: pd.DataFrame
    events: pd.DataFrame
    _user_index: pd.Index
    _event_index: pd.Index
    _taste: FloatArray
    _event_cat: IntArray
    _start_s: IntArray
    _created_s: IntArray
    _cancel_s: IntArray

    @classmethod
    def load(cls, truth_root: Path) -> GroundTruth:
        params = json.loads((Path(truth_root) / "params.json").read_text())
        config = _config_from_dict(params["config"])
        users = pd.read_parquet(Path(truth_root) / "users.parquet")
        events = pd.read_parquet(Path(truth_root) / "events.parquet")
        taste = users[[f"{TASTE_PREFIX}{c}" for c in CATEGORIES]].to_numpy(np.float64)
        cat_index = {c: i for i, c in enumerate(CATEGORIES)}
        cancel = events["cancelled_at"]
        return cls(
            config=config,
            users=users,
            events=events,
            _user_index=pd.Index(users["user_id"]),
            _event_index=pd.Index(events["event_id"]),
            _taste=taste,
            _event_cat=np.asarray(events["category"].map(cat_index), dtype=np.int64),
            _start_s=_seconds(events["start_at"]),
            _created_s=_seconds(events["created_at"]),
            _cancel_s=np.where(cancel.isna(), np.iinfo(np.int64).max, _seconds(cancel)),
        )

    def _rows(self, user_ids: npt.ArrayLike, event_ids: npt.ArrayLike) -> tuple[IntArray, IntArray]:
        ui = self._user_index.get_indexer(pd.Index(np.asarray(user_ids, dtype=object)))
        ei = self._event_index.get_indexer(pd.Index(np.asarray(event_ids, dtype=object)))
        if (ui < 0).any():
            raise KeyError(f"unknown user ids, e.g. {np.asarray(user_ids)[ui < 0][:3].tolist()}")
        if (ei < 0).any():
            raise KeyError(f"unknown event ids, e.g. {np.asarray(event_ids)[ei < 0][:3].tolist()}")
        return ui.astype(np.int64), ei.astype(np.int64)

    def _distance(
        self, ui: IntArray, ei: IntArray, lat: npt.ArrayLike | None, lng: npt.ArrayLike | None
    ) -> FloatArray:
        if (lat is None) != (lng is None):
            raise ValueError("pass both lat and lng, or neither")
        src_lat = self.users["home_lat"].to_numpy()[ui] if lat is None else np.asarray(lat, float)
        src_lng = self.users["home_lng"].to_numpy()[ui] if lng is None else np.asarray(lng, float)
        return haversine_km(
            src_lat, src_lng, self.events["lat"].to_numpy()[ei], self.events["lng"].to_numpy()[ei]
        )

    def p_rsvp(
        self,
        user_ids: npt.ArrayLike,
        event_ids: npt.ArrayLike,
        at: Any,
        friends_going: npt.ArrayLike,
        lat: npt.ArrayLike | None = None,
        lng: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """P(RSVP | the user sees the event at ``at`` from home, or from (lat, lng))."""
        ui, ei = self._rows(user_ids, event_ids)
        at_s = _as_utc_seconds(at, len(ui))
        cfg = self.config
        p0 = rsvp_probability_without_friends(
            cfg.base_rsvp_rate,
            cfg.max_affinity,
            self.users["propensity"].to_numpy()[ui],
            self._taste[ui, self._event_cat[ei]],
            self.events["event_factor"].to_numpy()[ei],
            (self._start_s[ei] - at_s) / DAY,
            self._distance(ui, ei, lat, lng),
            cfg.distance_band_factors,
        )
        friends = np.broadcast_to(np.asarray(friends_going), ui.shape)
        p = apply_friend_lift(p0, friends, cfg.friend_lifts)
        live = (at_s >= self._created_s[ei]) & (at_s < self._start_s[ei]) & (at_s < self._cancel_s[ei])
        out: FloatArray = np.where(live, p, 0.0)
        return out

    def p_attend_given_rsvp(
        self,
        user_ids: npt.ArrayLike,
        event_ids: npt.ArrayLike,
        lat: npt.ArrayLike | None = None,
        lng: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """P(attend | RSVP); 0 for cancelled events. Distance is from home unless given."""
        ui, ei = self._rows(user_ids, event_ids)
        cfg = self.config
        p = attend_probability(
            self.events["is_free"].to_numpy(bool)[ei],
            self.users["reliability"].to_numpy()[ui],
            self.events["attend_offset"].to_numpy()[ei],
            self._distance(ui, ei, lat, lng),
            cfg.attend_logit_paid,
            cfg.attend_logit_free,
            cfg.attend_distance_logit,
        )
        cancelled = self._cancel_s[ei] < np.iinfo(np.int64).max
        out: FloatArray = np.where(cancelled, 0.0, p)
        return out


def _seconds(values: pd.Series) -> IntArray:
    return index_seconds(pd.DatetimeIndex(values))


def _config_from_dict(values: dict[str, Any]) -> SimulationConfig:
    kwargs = dict(values)
    start = parse_instant(str(kwargs["start"]))
    kwargs["start"] = start.astimezone(UTC)
    for key, value in list(kwargs.items()):
        if isinstance(value, list):
            kwargs[key] = tuple(value)
    return SimulationConfig(**kwargs)
