"""The simulated platform wired to the deployment: its users ask the running feed service, its
bookings go to the capacity counter serving reads, and the loop it closes is reported per day.

``play_platform`` is what ``turnout platform`` and the ``platform`` DAG run; ``loop_report`` is
``turnout report loop``. The simulator knows only the landing schema, so this module hands it the
service's URL and the booking store the settings name.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from conf import Settings

log = logging.getLogger(__name__)

LOOP_EXPERIMENT = "loop"


def truth_root(settings: Settings) -> Path:
    return settings.home / "simulator"


def play_platform(
    settings: Settings,
    start: datetime,
    end: datetime,
    feed_url: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Play the platform's hours in [start, end) against the feed service at ``feed_url``.

    Returns ``{"start", "end", "hours": [per-hour report], "totals": {...}}``.
    """
    from serving.availability import open_availability
    from simulator.platform import HttpFeed, play_hours

    feed = HttpFeed(feed_url or settings.platform.feed_url, settings.platform.request_timeout_seconds)
    booking = open_availability(settings.serving.availability)
    try:
        hours = play_hours(
            truth_root(settings), Path(settings.landing.root), start, end, feed, booking, progress=progress
        )
    finally:
        booking.close()
        feed.close()
    totals = {
        k: sum(int(h.get(k, 0)) for h in hours)
        for k in ("requests", "feeds_failed", "impressions", "exploration_impressions", "rsvps")
    }
    return {"start": start.isoformat(), "end": end.isoformat(), "hours": hours, "totals": totals}


def wait_for_catalog(settings: Settings, timeout_s: float) -> tuple[datetime | None, datetime]:
    """Wait until the feed service answers as of the newest published catalog, as a service on
    the published clock does once its refresh has loaded it (``/healthz``: catalog ``as_of``).

    Returns (the service's instant, the published one); they differ if ``timeout_s`` ran out.
    """
    import time

    import httpx

    from contracts.instants import parse_instant
    from published.catalog import load_live_catalog

    published = load_live_catalog(settings).as_of
    deadline = time.monotonic() + timeout_s
    while True:
        served = None
        try:
            health = httpx.get(f"{settings.platform.feed_url.rstrip('/')}/healthz", timeout=10).json()
            served = parse_instant(health["components"]["catalog"]["as_of"])
        except (httpx.HTTPError, KeyError, ValueError, TypeError):
            pass
        if (served is not None and served >= published) or time.monotonic() >= deadline:
            return served, published
        time.sleep(5)


def loop_report(settings: Settings, log_to_mlflow: bool = True) -> dict[str, Any]:
    """Per simulated day of the live platform: champions, feeds, outcomes beside the oracle.

    Logged to MLflow (experiment ``<prefix>-loop``, one run per report) with the table as CSV,
    each day's numbers as metrics stepped by day, and the trend as a plot.
    """
    from simulator.platform import loop_days

    days = loop_days(truth_root(settings))
    report: dict[str, Any] = {"days": days.to_dict(orient="records")}
    if days.empty or not log_to_mlflow:
        return report
    import mlflow

    from pipelines.training.registry import configure, ensure_experiment

    configure(settings)
    experiment = ensure_experiment(settings, f"{settings.training.experiment_prefix}-{LOOP_EXPERIMENT}")
    name = f"loop {days['day'].iloc[0]}..{days['day'].iloc[-1]}"
    with (
        mlflow.start_run(experiment_id=experiment, run_name=name) as run,
        tempfile.TemporaryDirectory() as tmp,
    ):
        mlflow.set_tags({"days": str(len(days)), "champions": " | ".join(days["champions"])})
        metrics = {
            "feeds": "feeds",
            "feeds_failed": "feeds_failed",
            "expected_attendance_per_feed": "expected_attendance",
            "oracle_expected_attendance_per_feed": "oracle_expected_attendance",
            "rsvps_per_feed": "rsvps",
            "attendances_per_feed": "attendances",
            "exploration_share": "exploration_share",
            "attend_labels": "attend_labels",
        }
        for step, row in enumerate(days.to_dict(orient="records")):
            mlflow.log_metrics({name: float(row[column]) for name, column in metrics.items()}, step=step)
        table = Path(tmp) / "loop_days.csv"
        days.to_csv(table, index=False)
        mlflow.log_artifact(str(table))
        mlflow.log_figure(loop_plot(days), "loop_trend.png")
        report["mlflow_run_id"] = run.info.run_id
    return report


def loop_plot(days: pd.DataFrame) -> Any:
    """Served vs oracle expected attendance per feed, and realised outcomes, by simulated day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    x = range(len(days))
    top.plot(x, days["oracle_expected_attendance"], marker="o", label="oracle (ground truth ranking)")
    top.plot(x, days["expected_attendance"], marker="o", label="served (under the ground truth)")
    top.plot(x, days["attendances"], marker="x", linestyle=":", label="served (attendances drawn)")
    top.set_ylabel("attendances per feed")
    top.legend(loc="best", fontsize=8)
    top.set_title("The closed loop: what the champion served, per simulated day")
    bottom.bar(x, days["feeds"], color="#999999", label="feeds served")
    bottom.bar(x, days["feeds_failed"], bottom=days["feeds"], color="C3", alpha=0.4, label="feeds failed")
    bottom.legend(loc="upper left", fontsize=8)
    bottom.set_ylabel("feeds")
    share = bottom.twinx()
    share.plot(x, days["exploration_share"], color="C3", marker="o", label="exploration share")
    share.set_ylabel("exploration share")
    bottom.set_xticks(
        list(x), [f"{d}\n{c}" for d, c in zip(days["day"], days["champions"], strict=True)], fontsize=7
    )
    bottom.set_xlabel("simulated day (champions serving)")
    fig.tight_layout()
    return fig
