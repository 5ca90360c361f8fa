"""Instants: every time turnout stores or compares is a UTC instant (design: "Timezones").

One parser for every place an instant arrives as text (the CLI, the feed API, DAG run conf,
benches): ISO-8601 with an explicit offset, because a bare local time is ambiguous once a year.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

MICROS_PER_SECOND: Final = 1_000_000
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def parse_instant(text: str) -> datetime:
    """``2026-11-09T00:00Z`` / ``...+01:00`` -> an aware UTC ``datetime``.

    Raises ``ValueError`` naming the text when it is not ISO-8601 or has no UTC offset.
    """
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"{text!r} is not an ISO-8601 instant (e.g. 2026-11-09T18:30:00Z)") from e
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{text!r} has no UTC offset; a bare local time is ambiguous: add Z or +hh:mm")
    return as_utc(t)


def as_utc(t: datetime) -> datetime:
    """``t`` as a plain ``datetime`` in UTC; naive input is refused.

    Airflow hands tasks pendulum ``DateTime`` objects (a ``datetime`` subclass), and Spark's
    schema check rejects anything but the exact ``datetime`` type, so jobs normalize once here.
    """
    if t.tzinfo is None:
        raise ValueError(f"{t!r} is a naive datetime; instants must carry a UTC offset")
    u = t.astimezone(UTC)
    return datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, tzinfo=UTC)


def naive_utc(t: datetime) -> datetime:
    """The naive UTC wall clock Spark compares timestamps with (its session zone is UTC)."""
    return as_utc(t).replace(tzinfo=None)


def to_micros(t: datetime) -> int:
    """A tz-aware instant as integer microseconds since the epoch (UTC); naive input is refused."""
    if t.tzinfo is None:
        raise ValueError(f"{t!r} is a naive datetime; instants must carry a UTC offset")
    delta = t.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def from_micros(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


def iso_z(t: datetime | float) -> str:
    """An instant (aware datetime or epoch seconds) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    u = datetime.fromtimestamp(t, UTC) if isinstance(t, (int, float)) else as_utc(t)
    return u.strftime("%Y-%m-%dT%H:%M:%SZ")
