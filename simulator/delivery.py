"""When each landing line arrives, and the dirt a real export carries.

Counting contract (what ingestion reconciles against):

* ``generated``: clean records, each written exactly once as its own line (a late record is one
  of these, delivered in a later ``delivered=`` hour than its instant implies).
* ``duplicates``: extra lines that are byte-identical copies of a clean line, in the same or a
  later ``delivered=`` folder.
* ``malformed``: extra lines ingestion must quarantine, each broken in exactly one way (the
  reason) and carrying a fresh key no clean record uses, so it can never shadow a clean record.
  About ``malformed_rate`` per clean record, and at least one of each applicable reason when
  that stays under 2% of the entity's records.
* ``lines_written = generated + duplicates + sum(malformed.values())``.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.landing import ENTITIES, LandingEntity, LandingField, delivered_partition
from simulator.clock import DAY, HOUR, dst_transitions, iso_instants, iso_local
from simulator.config import SimulationConfig
from simulator.landing import LandingTable

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]

MALFORMED_REASONS: tuple[str, ...] = (
    "truncated_json",
    "missing_required_field",
    "wrong_type",
    "out_of_range",
    "not_allowed",
    "invalid_zone",
    "nonexistent_local_time",
    "instant_without_offset",
)
_INVALID_ZONES = ("Mars/Olympus", "America/Gotham", "Europe/Atlantis")
_NOT_ALLOWED = {
    "category": "karaoke",
    "surface": "sidebar",
    "exploration_kind": "epsilon_greedy",
    "source": "wifi_ping",
    "recurrence": "daily",
}
_WRONG_TYPE: dict[str, Any] = {
    "int": "many",
    "bool": "yes",
    "string": 12345,
    "id": 12345,
    "instant": 1_761_955_200,
    "local_datetime": 202611010130,
    "zone": 5,
    "string_list": "music,arts",
}


@dataclass
class EntityDelivery:
    """All lines of one entity with their delivered hour (epoch hours), and the dirt counts."""

    entity: str
    lines: npt.NDArray[np.object_]
    hours: IntArray
    generated: int
    duplicates: int
    late: int
    malformed: dict[str, int] = field(default_factory=dict)


def serialize(frame: pd.DataFrame) -> npt.NDArray[np.object_]:
    """One compact JSON object per row, keys in column order (deterministic bytes)."""
    if len(frame) == 0:
        return np.zeros(0, dtype=object)
    text = frame.to_json(orient="records", lines=True, double_precision=10)
    # pandas escapes "/" as "\/" (valid JSON, but noisy); every "/" in our data is escaped the
    # same way, so undoing it is exact.
    text = text.replace("\\/", "/")
    lines = text.splitlines()
    if len(lines) != len(frame):
        raise AssertionError(f"serialised {len(lines)} lines for {len(frame)} rows")
    return np.asarray(lines, dtype=object)


def applicable_reasons(entity: LandingEntity) -> tuple[str, ...]:
    """Malformation kinds this entity's schema can express."""
    non_key = [f for f in entity.fields if f.name not in entity.key]
    kinds = {f.kind for f in non_key}
    out = ["truncated_json"]
    if any(f.required for f in non_key):
        out.append("missing_required_field")
    if any(f.kind in _WRONG_TYPE or f.kind == "double" for f in non_key):
        out.append("wrong_type")
    if any(f.min is not None or f.max is not None for f in non_key):
        out.append("out_of_range")
    if any(f.allowed for f in non_key):
        out.append("not_allowed")
    if "zone" in kinds:
        out.append("invalid_zone")
    if "local_datetime" in kinds and "zone" in kinds:
        out.append("nonexistent_local_time")
    if "instant" in kinds:
        out.append("instant_without_offset")
    return tuple(r for r in MALFORMED_REASONS if r in out)


@lru_cache(maxsize=64)
def spring_forward_local(tz: str, around_s: int) -> str | None:
    """A wall-clock time that does not exist in ``tz`` (inside its spring-forward gap)."""
    _, spring = dst_transitions(tz, around_s - 400 * DAY, around_s + 400 * DAY)
    if not spring:
        return None
    tr = min(spring, key=lambda t: abs(t.utc - around_s))
    return str(iso_local(np.array([tr.local_start + tr.length // 2]))[0])


def _malform(
    record: dict[str, Any],
    entity: LandingEntity,
    reason: str,
    n: int,
    rng: np.random.Generator,
    around_s: int,
) -> str:
    """Break one record in exactly one way, after giving it a fresh key."""
    rec = dict(record)
    for i, name in enumerate(entity.key):
        fld = next(f for f in entity.fields if f.name == name)
        if fld.kind in ("string", "id"):
            # "a"/"b" suffixes keep user_id < friend_id for friendships.
            rec[name] = f"bad-{entity.name}-{n:07d}-{'ab'[i % 2]}"
    non_key = [f for f in entity.fields if f.name not in entity.key]

    def choose(candidates: list[LandingField]) -> LandingField:
        return candidates[int(rng.integers(0, len(candidates)))]

    if reason == "missing_required_field":
        del rec[choose([f for f in non_key if f.required]).name]
    elif reason == "wrong_type":
        fld = choose([f for f in non_key if f.kind in _WRONG_TYPE or f.kind == "double"])
        if fld.kind == "double":
            rec[fld.name] = f"{rec[fld.name]}"  # a number sent as a string
        else:
            rec[fld.name] = _WRONG_TYPE[fld.kind]
    elif reason == "out_of_range":
        fld = choose([f for f in non_key if f.min is not None or f.max is not None])
        above = fld.max is not None and (fld.min is None or rng.random() < 0.5)
        step: float = 1 if fld.kind == "int" else round(float(rng.uniform(0.5, 50.0)), 3)
        value = (fld.max + step) if above and fld.max is not None else (fld.min or 0) - step
        rec[fld.name] = int(value) if fld.kind == "int" else float(value)
    elif reason == "not_allowed":
        fld = choose([f for f in non_key if f.allowed])
        rec[fld.name] = _NOT_ALLOWED.get(fld.name, f"not_a_{fld.name}")
    elif reason == "invalid_zone":
        fld = choose([f for f in non_key if f.kind == "zone"])
        rec[fld.name] = _INVALID_ZONES[int(rng.integers(0, len(_INVALID_ZONES)))]
    elif reason == "nonexistent_local_time":
        local = next(f for f in non_key if f.kind == "local_datetime")
        zone = next(f for f in non_key if f.kind == "zone")
        gap = spring_forward_local(str(rec[zone.name]), around_s)
        if gap is None:  # a zone without DST: fall back to a well-known gap
            rec[zone.name], gap = "America/New_York", "2026-03-08T02:30:00"
        rec[local.name] = gap
    elif reason == "instant_without_offset":
        fld = choose([f for f in non_key if f.kind == "instant"])
        rec[fld.name] = str(rec[fld.name]).rstrip("Z")
    text = json.dumps(rec, separators=(",", ":"), ensure_ascii=True)
    if reason == "truncated_json":
        text = text[: int(rng.integers(1, len(text) - 1))]
    return text


def plan_delivery(
    table: LandingTable, config: SimulationConfig, rng: np.random.Generator, start_s: int
) -> EntityDelivery:
    """Assign delivered hours and add duplicates, late arrivals and malformed lines."""
    entity = ENTITIES[table.entity]
    clean = serialize(table.frame)
    n = len(clean)
    # An hourly export delivers the hour that just closed; history before the window arrives
    # with the first delivery.
    hours = np.maximum(table.version_s // HOUR + 1, start_s // HOUR).astype(np.int64)

    n_late = int(rng.binomial(n, config.late_rate)) if n else 0
    late_idx = rng.choice(n, size=n_late, replace=False) if n_late else np.zeros(0, np.int64)
    hours[late_idx] += np.round(np.exp(rng.uniform(np.log(2), np.log(96), n_late))).astype(np.int64)

    n_dup = int(rng.binomial(n, config.duplicate_rate)) if n else 0
    dup_idx = rng.choice(n, size=n_dup, replace=False) if n_dup else np.zeros(0, np.int64)
    dup_hours = hours[dup_idx] + np.where(rng.random(n_dup) < 0.5, 0, rng.integers(1, 49, n_dup))

    reasons = applicable_reasons(entity)
    n_bad = int(rng.binomial(n, config.malformed_rate)) if n else 0
    if config.malformed_rate > 0:
        # Every applicable kind at least once where that stays under 2% of the entity, so a
        # demo-size run exercises each quarantine path.
        n_bad = max(n_bad, min(len(reasons), int(0.02 * n)))
    templates = rng.integers(0, n, n_bad) if n_bad else np.zeros(0, np.int64)
    # Round-robin over a shuffled reason list: every kind shows up once there are enough lines.
    bad_reason: IntArray = rng.permutation(np.resize(np.arange(len(reasons)), n_bad))
    bad_lines = np.empty(n_bad, dtype=object)
    malformed = {r: 0 for r in reasons}
    records = table.frame.iloc[templates].to_dict(orient="records") if n_bad else []
    for k in range(n_bad):  # malformed lines are rare (0.5% of records)
        reason = reasons[int(bad_reason[k])]
        record = {str(key): _jsonable(value) for key, value in records[k].items()}
        bad_lines[k] = _malform(record, entity, reason, k, rng, start_s)
        malformed[reason] += 1
    bad_hours = np.maximum(table.version_s[templates] // HOUR + 1, start_s // HOUR)

    lines = np.concatenate([clean, clean[dup_idx], bad_lines])
    all_hours = np.concatenate([hours, dup_hours, bad_hours]).astype(np.int64)
    # Inside one delivered file, lines follow the time they describe (as an export would).
    sort_time = np.concatenate([table.version_s, table.version_s[dup_idx], table.version_s[templates]])
    tiebreak = np.arange(len(lines))
    order = np.lexsort((tiebreak, sort_time, all_hours))
    return EntityDelivery(
        entity=table.entity,
        lines=lines[order],
        hours=all_hours[order],
        generated=n,
        duplicates=n_dup,
        late=n_late,
        malformed=malformed,
    )


def split_delivery(delivery: EntityDelivery, from_hour: int) -> tuple[EntityDelivery, EntityDelivery]:
    """(lines delivered before ``from_hour``, lines from it on); the counts stay on the first part."""
    early = delivery.hours < from_hour
    now = EntityDelivery(
        entity=delivery.entity,
        lines=delivery.lines[early],
        hours=delivery.hours[early],
        generated=delivery.generated,
        duplicates=delivery.duplicates,
        late=delivery.late,
        malformed=delivery.malformed,
    )
    later = EntityDelivery(
        entity=delivery.entity, lines=delivery.lines[~early], hours=delivery.hours[~early], generated=0,
        duplicates=0, late=0,
    )  # fmt: skip
    return now, later


def _jsonable(value: Any) -> Any:
    """pandas/numpy scalars -> plain Python for json.dumps."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def hour_folders(hours: IntArray) -> list[str]:
    """``delivered=YYYY-MM-DDTHH`` for each epoch hour."""
    return [delivered_partition(str(iso)) for iso in iso_instants(np.asarray(hours) * HOUR)]


def write_delivery(delivery: EntityDelivery, landing_root: Path, part_max_lines: int) -> int:
    """Write one entity's lines into hourly ``delivered=`` folders; returns the file count."""
    base = landing_root / delivery.entity
    files = 0
    if len(delivery.lines) == 0:
        return 0
    bounds = np.flatnonzero(np.diff(delivery.hours)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(delivery.lines)]])
    names = hour_folders(delivery.hours[starts])
    for lo, hi, name in zip(starts, ends, names, strict=True):  # one iteration per delivered hour
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        for part, p_lo in enumerate(range(int(lo), int(hi), part_max_lines)):
            chunk = delivery.lines[p_lo : min(int(hi), p_lo + part_max_lines)]
            with open(folder / f"part-{part}.jsonl", "w", encoding="utf-8", newline="\n") as fh:
                fh.write("\n".join(chunk))
                fh.write("\n")
            files += 1
    return files


def clear_landing(landing_root: Path, overwrite: bool) -> None:
    """Refuse to mix two runs in one landing root unless asked to replace the old one."""
    existing = [landing_root / e for e in ENTITIES if (landing_root / e).exists()]
    if not existing:
        return
    if not overwrite:
        raise FileExistsError(
            f"{landing_root} already holds landing data ({existing[0].name}/...); "
            "pass overwrite=True to replace it"
        )
    for path in existing:
        shutil.rmtree(path)
