"""How the ``turnout`` commands show their results to people: rich tables, one function per report.

Each takes the JSON-able report a job returned (the same dict ``--json`` prints) and builds what
the console prints; no job logic lives here.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] = ()) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 or col in left else "right")
    return table


def _num(value: Any, fmt: str = "{:.4f}") -> str:
    return "-" if value is None else fmt.format(value)


def simulation(data: dict[str, Any], landing: str, seconds: float) -> Table:
    table = _table(
        f"landing files written to {landing} in {seconds:.1f}s",
        ("entity", "records", "lines written", "duplicates", "late", "malformed"),
    )
    for name, e in data["entities"].items():
        table.add_row(
            name,
            *(str(e[k]) for k in ("generated", "lines_written", "duplicates", "late", "malformed_total")),
        )
    return table


def platform_hours(report: dict[str, Any]) -> Table:
    table = _table(
        f"platform [{report['start']}, {report['end']})",
        (
            "hour",
            "requests",
            "failed",
            "served by",
            "impressions",
            "RSVPs",
            "exp. attend / feed",
            "oracle / feed",
            "lines",
        ),
    )
    for h in report["hours"]:
        feeds = max(h["requests"] - h["feeds_failed"], 1)
        table.add_row(
            h["hour"] + (" (played before)" if h.get("already_played") else ""),
            str(h["requests"]),
            str(h["feeds_failed"]),
            ", ".join(f"{k} {v}" for k, v in sorted(h["served_by"].items())) or "-",
            str(h["impressions"]),
            str(h["rsvps"]),
            f"{h['expected_attendance'] / feeds:.3f}",
            f"{h['oracle_expected_attendance'] / feeds:.3f}",
            str(sum(h["lines"].values())),
        )
    return table


def loop_days(report: dict[str, Any]) -> Table:
    table = _table(
        "the closed loop per simulated day (per feed; expected = under the ground truth)",
        ("day", "champions", "asked", "failed", "feeds", "by model", "empty", "exp. RSVPs", "exp. attend",
         "oracle attend", "share", "RSVPs", "attended", "explore", "attend labels"),
    )  # fmt: skip
    for d in report["days"]:
        share = d.get("share_of_oracle")
        table.add_row(
            d["day"], d["champions"] or "-", str(d["requests"]), str(d["feeds_failed"]), str(d["feeds"]),
            str(d["served_by_model"]), str(d["empty_feeds"]), f"{d['expected_rsvps']:.3f}",
            f"{d['expected_attendance']:.3f}", f"{d['oracle_expected_attendance']:.3f}",
            "-" if share is None or share != share else f"{share:.1%}", f"{d['rsvps']:.3f}",
            f"{d['attendances']:.3f}", f"{d['exploration_share']:.1%}", str(d["attend_labels"]),
        )  # fmt: skip
    if report.get("mlflow_run_id"):
        table.caption = f"logged to MLflow run {report['mlflow_run_id']} (loop_trend.png, loop_days.csv)"
    return table


def demo_steps(report: dict[str, Any]) -> RenderableType:
    steps = _table(
        f"the demo's first build through Airflow: {report['seconds']:.0f} s",
        ("DAG", "run", "state", "seconds"),
    )
    for dag_id, step in report["steps"].items():
        steps.add_row(dag_id, step["run_id"], step["state"], f"{step['seconds']:.0f}")
    heads = [training(head, xcom) for head, xcom in report["heads"].items() if xcom and "metrics" in xcom]
    return Group(steps, *heads)


def ingestion(run_id: str, report: dict[str, Any]) -> RenderableType:
    if not report["tables"]:
        return f"ingest {run_id}: nothing was delivered in [{report['start']}, {report['end']})"
    table = _table(
        f"ingest {run_id}: bronze counts (read = written + deduplicated + quarantined)",
        ("table", "read", "written", "deduplicated", "quarantined", "silver rows"),
    )
    for name, c in report["tables"].items():
        rows = report["silver"].get(name, {}).get("rows", 0)
        table.add_row(
            name, *(str(c[k]) for k in ("read", "written", "deduplicated", "quarantined")), str(rows)
        )
    return table


def meetup_import(report: dict[str, Any], landing: str) -> RenderableType:
    written = _table(f"meetup crawl -> landing, delivered {report['delivered'][:13]}Z", ("entity", "records"))
    for name, n in report["written"].items():
        written.add_row(name, f"{n:,}")
    notes = _table("not in the crawl: filled in (see importers/meetup.py)", ("field", "records"))
    for name, n in report["filled"].items():
        notes.add_row(name, f"{n:,}")
    skipped = {k: v for k, v in report["skipped"].items() if v}
    return Group(
        written,
        notes,
        f"written under {landing}; skipped: "
        + (", ".join(f"{k}: {v:,}" for k, v in skipped.items()) if skipped else "nothing"),
    )


def gold(report: dict[str, Any]) -> RenderableType:
    table = _table(
        f"gold feature tables, run {report['run_id']}", ("table", "inserted", "updated", "deleted")
    )
    for name, c in report["tables"].items():
        table.add_row(name, str(c["inserted"]), str(c["updated"]), str(c["deleted"]))
    applied = report["apply"]
    return Group(
        table,
        "fitted pseudocounts: " + ", ".join(f"{k}={v:.1f}" for k, v in report["pseudocounts"].items()),
        f"validation passed for {len(report['validation']['tables'])} gold tables; feast apply: "
        + (
            "applied " + ", ".join(applied["added"] + applied["changed"])
            if applied["applied"]
            else "unchanged"
        ),
    )


def materialization(report: dict[str, Any], store_type: str) -> Table:
    table = _table(
        f"materialized to {store_type} up to {report['end']}",
        ("view", "status", "from", "to", "rows", "rows/s"),
        left=("status", "from", "to"),
    )
    for name, v in report["views"].items():
        table.add_row(
            name, v["status"], str(v["start"]), str(v["end"]), str(v["rows"]), f"{v['rows_per_s'] or 0:,.0f}"
        )
    return table


def training(head: str, report: dict[str, Any]) -> RenderableType:
    m = report["metrics"]
    table = _table(
        f"p_{head}: run {report['run_id']}, model version {report['version']}", ("metric", "value")
    )
    for key in sorted(m):
        table.add_row(key, _num(m[key]))
    colour = "green" if report["promoted"] else "yellow"
    verdict = "promoted to champion" if report["promoted"] else "not promoted"
    return Group(table, f"[{colour}]{verdict}[/{colour}]: {report['reason']}")


EVALUATION_COLUMNS = (
    "ndcg_at_25",
    "expected_attendance_at_25",
    "expected_rsvps_at_25",
    "ece",
    "recall_at_25_random_slot",
)


def evaluation(report: dict[str, Any]) -> RenderableType:
    versions = report["champion_versions"]
    table = _table(
        f"{report['requests']} test requests, {report['candidates_per_request']:.0f} live candidates each "
        f"(champions rsvp v{versions['rsvp']}, attend v{versions['attend']})",
        ("model", *EVALUATION_COLUMNS),
    )
    for name, row in report["models"].items():
        table.add_row(name, *(_num(row.get(c)) for c in EVALUATION_COLUMNS))
    caveats = (
        f"ndcg_at_25 grades the {report['logged_test_impressions']:,} logged test impressions by what was "
        "observed by the training set's as_of: attendance and ratings land days after the event, so it "
        "rewards RSVPs (rsvp_only can lead it); expected attendance, priced by the simulator's truth, is "
        "the measure of the two-head gain. ece is against the truth's probabilities. "
        f"recall_at_25_random_slot rests on {report['random_slot_rsvps']} random-slot RSVP(s)."
    )
    return Group(table, caveats)


def feed(result: Any) -> RenderableType:
    """A feed response (``serving.feed.FeedResult`` or the same fields parsed from JSON)."""
    table = _table(
        f"feed for {result.user_id} as of {result.served_at}: {result.served_by}, "
        f"model {result.model_version}, {result.candidates} candidates, {result.eligible} eligible, "
        f"{result.stages_ms['total']:.0f} ms",
        (
            "#",
            "event",
            "category",
            "organizer",
            "starts (venue time)",
            "km",
            "friends",
            "P(attend)",
            "P(rsvp)",
        ),
        left=("event", "category", "organizer", "starts (venue time)"),
    )
    for item in result.events:
        table.add_row(
            f"{item.position}{'*' if item.is_exploration else ''}",
            item.event_id,
            item.category,
            item.organizer_id,
            item.starts_at_local,
            f"{item.distance_km:.1f}",
            str(item.friends_going),
            _num(item.score, "{:.3f}"),
            _num(item.p_rsvp, "{:.3f}"),
        )
    lines: list[RenderableType] = [table]
    if result.events and result.events[-1].is_exploration:
        lines.append(f"* exploration slot ({result.events[-1].exploration_kind})")
    weekend = ", ".join(e.event_id for e in result.near_you_this_weekend) or "nothing"
    lines.append(f"near you this weekend: {weekend}")
    return Group(*lines)


def serving_bench(
    report: dict[str, Any], columns: tuple[str, ...], rows: list[tuple[str, ...]], summary: list[str]
) -> RenderableType:
    table = _table(
        f"{report['requests']} feed requests, candidates p50 {report['candidates_p50']:,}", columns
    )
    for row in rows:
        table.add_row(*(cell.replace("**", "") for cell in row))
    return Group(table, *summary)
