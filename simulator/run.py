"""Entry point: generate a world, write its landing files and its hidden ground truth.

Generation (``world``, ``activity``, ``landing``) is pure; this module is the only place that
touches the disk, and it returns a summary whose counts ingestion reconciles against:
``lines_written = generated + duplicates + malformed`` for every entity.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.activity import Activity, simulate_activity
from simulator.clock import HOUR, iso_instants
from simulator.config import SimulationConfig
from simulator.delivery import EntityDelivery, clear_landing, plan_delivery, split_delivery, write_delivery
from simulator.landing import landing_tables, make_id_table
from simulator.truth import write_truth
from simulator.world import World, build_world

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class EntitySummary:
    """What one entity's landing folder holds, split by clean records and injected dirt."""

    generated: int
    lines_written: int
    duplicates: int
    late: int
    malformed: dict[str, int]
    files: int
    # Lines due after the history's end, kept back for the live platform (``platform_days``).
    held_for_platform: int = 0

    @property
    def malformed_total(self) -> int:
        return sum(self.malformed.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "generated": self.generated,
            "lines_written": self.lines_written,
            "duplicates": self.duplicates,
            "late": self.late,
            "malformed": dict(self.malformed),
            "malformed_total": self.malformed_total,
            "files": self.files,
            "held_for_platform": self.held_for_platform,
        }


@dataclass(frozen=True)
class SimulationSummary:
    """The run's manifest: per-entity counts plus a few facts about the simulated behaviour."""

    seed: int
    config: dict[str, Any]
    window_start: str
    window_end: str
    delivered_first: str
    delivered_last: str
    entities: dict[str, EntitySummary]
    facts: dict[str, float | int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "config": self.config,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "delivered_first": self.delivered_first,
            "delivered_last": self.delivered_last,
            "entities": {name: e.to_dict() for name, e in self.entities.items()},
            "totals": {
                "generated": sum(e.generated for e in self.entities.values()),
                "lines_written": sum(e.lines_written for e in self.entities.values()),
                "duplicates": sum(e.duplicates for e in self.entities.values()),
                "late": sum(e.late for e in self.entities.values()),
                "malformed": sum(e.malformed_total for e in self.entities.values()),
            },
            "facts": dict(self.facts),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimulationSummary:
        """Read a ``manifest.json`` back (e.g. in ingestion tests)."""
        return cls(
            seed=int(data["seed"]),
            config=dict(data["config"]),
            window_start=str(data["window_start"]),
            window_end=str(data["window_end"]),
            delivered_first=str(data["delivered_first"]),
            delivered_last=str(data["delivered_last"]),
            entities={
                name: EntitySummary(
                    generated=int(e["generated"]),
                    lines_written=int(e["lines_written"]),
                    duplicates=int(e["duplicates"]),
                    late=int(e["late"]),
                    malformed={k: int(v) for k, v in e["malformed"].items()},
                    files=int(e["files"]),
                    held_for_platform=int(e.get("held_for_platform", 0)),
                )
                for name, e in data["entities"].items()
            },
            facts=dict(data.get("facts", {})),
        )


def behaviour_facts(world: World, activity: Activity) -> dict[str, float | int]:
    """Headline numbers to compare with the design (activity skew, funnel, supply events)."""
    n_users = len(world.users)
    requests_per_user = np.bincount(activity.requests["user"].to_numpy(), minlength=n_users)
    rsvps_per_user = np.bincount(activity.rsvps["user"].to_numpy(), minlength=n_users)
    active = requests_per_user > 0
    with_any = rsvps_per_user[active & (rsvps_per_user > 0)]
    im = activity.impressions
    at = activity.attendance
    ev = world.events
    seats = np.bincount(activity.rsvps["event"].to_numpy(), minlength=len(ev))
    free = ev["is_free"].to_numpy(bool)[at["event"].to_numpy()]
    happened = ~at["cancelled"].to_numpy(bool)
    attended = at["attended"].to_numpy(bool)
    return {
        "users": n_users,
        "monthly_active_users": int(active.sum()),
        "mau_share_without_rsvp": float(1 - (rsvps_per_user[active] > 0).mean()) if active.any() else 0.0,
        "median_rsvps_among_users_with_any": float(np.median(with_any)) if len(with_any) else 0.0,
        "p99_rsvps_among_users_with_any": float(np.quantile(with_any, 0.99)) if len(with_any) else 0.0,
        "requests": len(activity.requests),
        "impressions": len(im),
        "impressions_near_you": int((im["surface"] == 1).sum()),
        "exploration_impressions": int(im["is_exploration"].sum()),
        "impression_rsvp_rate": float((activity.rsvps["request"].to_numpy() >= 0).sum() / max(len(im), 1)),
        "max_p_rsvp": float(im["p_rsvp"].max()) if len(im) else 0.0,
        "rsvps": len(activity.rsvps),
        "organic_rsvps": int((activity.rsvps["request"].to_numpy() < 0).sum()),
        "attended": int(attended.sum()),
        "follow_through_free": float(attended[happened & free].mean()) if (happened & free).any() else 0.0,
        "follow_through_paid": float(attended[happened & ~free].mean()) if (happened & ~free).any() else 0.0,
        "follow_through_overall": float(attended[happened].mean()) if happened.any() else 0.0,
        "rsvp_share_free": float(free.mean()) if len(free) else 0.0,
        "ratings": len(activity.ratings),
        "events": len(ev),
        "series_event_share": float((ev["series"].to_numpy() >= 0).mean()),
        "cancelled_events": int((ev["cancelled_s"].to_numpy() >= 0).sum()),
        "sold_out_events": int((seats >= ev["capacity"].to_numpy()).sum()),
        "ambiguous_start_events": int(ev["start_ambiguous"].sum()),
        "friendships": len(world.friendships),
    }


def simulate(
    config: SimulationConfig,
    landing_root: Path,
    truth_root: Path,
    progress: Progress | None = None,
    *,
    overwrite: bool = False,
) -> SimulationSummary:
    """Generate one seeded history; write landing JSON lines and the parquet ground truth.

    ``progress(stage, done, total)`` is called as stages advance ("world", "activity",
    "landing", "truth"). An existing landing root is only replaced with ``overwrite=True``.
    """
    landing_root = Path(landing_root)
    truth_root = Path(truth_root)
    started = time.perf_counter()
    world_rng, activity_rng, dirt_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(3)
    )

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    report("world", 0, 1)
    world = build_world(config, world_rng)
    report("world", 1, 1)
    activity = simulate_activity(world, activity_rng, report)
    ids = make_id_table(world, activity)
    tables = landing_tables(world, activity, ids)
    log.info("generated in %.1fs", time.perf_counter() - started)

    clear_landing(landing_root, overwrite)
    landing_root.mkdir(parents=True, exist_ok=True)
    entities: dict[str, EntitySummary] = {}
    held: list[EntityDelivery] = []
    first_hour, last_hour = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for i, (name, table) in enumerate(tables.items()):
        delivery = plan_delivery(table, config, dirt_rng, world.start_s)
        if config.platform_days:
            # What is due from the history's end on is the live platform's to deliver, hour by hour.
            delivery, later = split_delivery(delivery, world.history_end_s // HOUR)
            held.append(later)
        files = write_delivery(delivery, landing_root, config.part_max_lines)
        if len(delivery.hours):
            first_hour = min(first_hour, int(delivery.hours.min()))
            last_hour = max(last_hour, int(delivery.hours.max()))
        entities[name] = EntitySummary(
            generated=delivery.generated,
            lines_written=len(delivery.lines),
            duplicates=delivery.duplicates,
            late=delivery.late,
            malformed=delivery.malformed,
            files=files,
            held_for_platform=len(held[-1].lines) if config.platform_days else 0,
        )
        if entities[name].lines_written + entities[name].held_for_platform != (
            delivery.generated + delivery.duplicates + entities[name].malformed_total
        ):
            raise AssertionError(f"{name}: line accounting does not add up")
        report("landing", i + 1, len(tables))

    write_truth(world, activity, ids, truth_root)
    if config.platform_days:
        from simulator.platform import start_platform

        start_platform(truth_root, held, world.history_end_s)
    report("truth", 1, 1)
    summary = SimulationSummary(
        seed=config.seed,
        config=config.to_dict(),
        window_start=str(iso_instants([world.start_s])[0]),
        window_end=str(iso_instants([world.history_end_s])[0]),
        delivered_first=str(iso_instants([first_hour * HOUR])[0]),
        delivered_last=str(iso_instants([last_hour * HOUR])[0]),
        entities=entities,
        facts=behaviour_facts(world, activity),
    )
    (truth_root / "manifest.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    log.info(
        "simulated %d impressions, %d RSVPs, %d landing lines in %.1fs",
        len(activity.impressions),
        len(activity.rsvps),
        sum(e.lines_written for e in entities.values()),
        time.perf_counter() - started,
    )
    return summary


def read_manifest(truth_root: Path) -> SimulationSummary:
    """The summary a previous ``simulate`` wrote."""
    return SimulationSummary.from_dict(json.loads((Path(truth_root) / "manifest.json").read_text()))


__all__ = ["EntitySummary", "SimulationSummary", "read_manifest", "simulate"]
