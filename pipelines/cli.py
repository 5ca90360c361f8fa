"""The ``turnout`` command line: the same functions the DAGs and the tests call.

Every command takes ``--json`` and then prints one machine-readable summary as the last line of
standard output; progress and logs go to standard error.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from conf import Settings, load_settings

app = typer.Typer(
    help="turnout: recommend the local events people will actually attend.",
    no_args_is_help=True,
    add_completion=False,
)
# Files and CI logs get a wide console so the summary tables are not cut at 80 columns.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 130)
out = Console()

JsonFlag = Annotated[bool, typer.Option("--json", help="Print a JSON summary as the last line.")]
Profile = Annotated[
    str | None, typer.Option("--profile", help="Settings profile (default: $TURNOUT_PROFILE or local).")
]


def _settings(profile: str | None) -> Settings:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("great_expectations", "py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return load_settings(profile)


@contextmanager
def _progress(description: str) -> Any:
    """A progress bar on stderr; yields the ``progress(label, done, total)`` callback jobs take."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(label: str, done: int, total: int) -> None:
            bar.update(task, description=f"{description}: {label}", completed=done, total=total)

        yield update


def _parse_instant(value: str | None) -> datetime | None:
    if value is None:
        return None
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise typer.BadParameter(f"{value!r} has no UTC offset; write e.g. 2026-11-01T13:00Z")
    return t.astimezone(UTC)


def _new_run_id() -> str:
    return f"cli-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _emit(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        out.print(json.dumps(summary, sort_keys=True, default=str), soft_wrap=True, highlight=False)


@app.command()
def simulate(
    users: Annotated[int, typer.Option(help="Number of users.")] = 3000,
    days: Annotated[int, typer.Option(help="Days of platform history.")] = 28,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed writes the same files.")] = 7,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing landing zone.")] = False,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Generate a platform history into the landing zone (and its hidden ground truth)."""
    from pipelines.simulator.config import SimulationConfig
    from pipelines.simulator.run import simulate as run_simulation

    settings = _settings(profile)
    config = SimulationConfig(users=users, days=days, seed=seed)
    landing = Path(settings.landing.root)
    t0 = time.perf_counter()
    with _progress("simulate") as progress:
        summary = run_simulation(
            config, landing, settings.home / "simulator", progress=progress, overwrite=overwrite
        )
    data = summary.to_dict()
    table = Table(title=f"landing files written to {landing} in {time.perf_counter() - t0:.1f}s")
    for col in ("entity", "records", "lines written", "duplicates", "late", "malformed"):
        table.add_column(col, justify="left" if col == "entity" else "right")
    for name, e in data["entities"].items():
        table.add_row(
            name,
            *(str(e[k]) for k in ("generated", "lines_written", "duplicates", "late", "malformed_total")),
        )
    err.print(table)
    _emit(data, as_json)


@app.command()
def ingest(
    start: Annotated[
        str | None, typer.Option(help="First delivered hour, UTC (e.g. 2026-11-01T13:00Z); default: all.")
    ] = None,
    end: Annotated[str | None, typer.Option(help="End of the interval, exclusive; default: all.")] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id recorded with every row.")] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Landing -> bronze -> silver for the files delivered in [start, end)."""
    from pipelines.ingest.run import DataContractError, build_silver, ingest_bronze

    settings = _settings(profile)
    run_id = run_id or _new_run_id()
    t_start, t_end = _parse_instant(start), _parse_instant(end)
    try:
        with _progress("ingest") as progress:
            bronze = ingest_bronze(settings, t_start, t_end, run_id, progress=progress)
            silver = build_silver(settings, t_start, t_end, run_id, progress=progress)
    except DataContractError as e:
        err.print(f"[red]data contract failed[/red]: {e}")
        raise typer.Exit(2) from e
    table = Table(title=f"ingest {run_id}: bronze counts (read = written + deduplicated + quarantined)")
    for col in ("table", "read", "written", "deduplicated", "quarantined", "silver rows"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for name, c in bronze["tables"].items():
        rows = silver["tables"].get(name, {}).get("rows", 0)
        table.add_row(
            name, *(str(c[k]) for k in ("read", "written", "deduplicated", "quarantined")), str(rows)
        )
    err.print(table)
    _emit({"run_id": run_id, "tables": bronze["tables"], "silver": silver["tables"]}, as_json)


@app.command()
def features(
    start: Annotated[
        str | None, typer.Option(help="Interval start, UTC; rows from 3 days earlier are rewritten too.")
    ] = None,
    end: Annotated[str | None, typer.Option(help="Interval end, exclusive; default: now.")] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id recorded in the report.")] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Silver -> gold feature tables, validated, then `feast apply` when the definitions changed."""
    from pipelines.features.jobs import build_gold
    from pipelines.features.store import apply_definitions, write_feature_store_yaml
    from pipelines.features.validation import validate_gold
    from pipelines.ingest.run import DataContractError

    settings = _settings(profile)
    run_id = run_id or _new_run_id()
    t_start, t_end = _parse_instant(start), _parse_instant(end) or datetime.now(UTC)
    with _progress("features") as progress:
        report = build_gold(settings, t_start, t_end, run_id, progress=progress)
    try:
        report["validation"] = validate_gold(settings, t_end)
    except DataContractError as e:
        err.print(f"[red]gold tables failed validation; nothing applied[/red]: {e}")
        raise typer.Exit(2) from e
    report["apply"] = apply_definitions(settings)
    report["feature_store_yaml"] = str(write_feature_store_yaml(settings))
    table = Table(title=f"gold feature tables, run {run_id}")
    for col in ("table", "inserted", "updated", "deleted"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for name, c in report["tables"].items():
        table.add_row(name, str(c["inserted"]), str(c["updated"]), str(c["deleted"]))
    err.print(table)
    err.print("fitted pseudocounts: " + ", ".join(f"{k}={v:.1f}" for k, v in report["pseudocounts"].items()))
    applied = report["apply"]
    err.print(
        f"validation passed for {len(report['validation']['tables'])} gold tables; feast apply: "
        + (
            "applied " + ", ".join(applied["added"] + applied["changed"])
            if applied["applied"]
            else "unchanged"
        )
    )
    _emit(report, as_json)


@app.command()
def materialize(
    end: Annotated[
        str | None, typer.Option(help="Materialize up to this instant, UTC; default: now.")
    ] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Incrementally materialize every feature view to the online store, never moving backwards."""
    from pipelines.features.store import materialize as run_materialize

    settings = _settings(profile)
    report = run_materialize(settings, _parse_instant(end) or datetime.now(UTC))
    table = Table(title=f"materialized to {settings.feast.online_store.get('type')} up to {report['end']}")
    for col in ("view", "status", "from", "to", "rows", "rows/s"):
        table.add_column(col, justify="left" if col in ("view", "status", "from", "to") else "right")
    for name, v in report["views"].items():
        table.add_row(
            name, v["status"], str(v["start"]), str(v["end"]), str(v["rows"]), f"{v['rows_per_s'] or 0:,.0f}"
        )
    err.print(table)
    _emit(report, as_json)


Now = Annotated[
    str | None,
    typer.Option("--now", help="The instant to act as of, UTC (e.g. 2026-11-09T00:00Z); default: now."),
]


@app.command()
def tower(now: Now = None, as_json: JsonFlag = False, profile: Profile = None) -> None:
    """Retrain the content tower on co-RSVP pairs known at --now; publish it if it passes its gate."""
    from pipelines.index.run import train_content_tower

    settings = _settings(profile)
    report = train_content_tower(settings, _parse_instant(now) or datetime.now(UTC))
    err.print(f"content tower: {report['status']} (version {report.get('version')})")
    _emit(report, as_json)


@app.command()
def index(
    now: Now = None,
    rollback: Annotated[
        bool, typer.Option(help="Point the live index back at the previous version.")
    ] = False,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Embed new events, build the H3 geo-time index beside the live one, validate, publish atomically."""
    from pipelines.index.publish import PublicationError
    from pipelines.index.run import build_and_publish_index, embed_new_events, rollback_index

    settings = _settings(profile)
    try:
        if rollback:
            report = rollback_index(settings)
            err.print(f"index rolled back from {report['from']} to {report['to']}")
        else:
            at = _parse_instant(now) or datetime.now(UTC)
            report = {"embed": embed_new_events(settings, at), **build_and_publish_index(settings, at)}
            built, published = report["build"], report["publish"]
            err.print(
                f"index {built.get('version')}: {built.get('events')} live events in {built.get('cells')} cells; "
                f"published: {published['published']} (previous {published['previous']})"
            )
    except PublicationError as e:
        err.print(f"[red]not published[/red]: {e}")
        raise typer.Exit(2) from e
    _emit(report, as_json)


Head = Annotated[str, typer.Option("--head", help="Which head: rsvp (hourly) or attend (weekly).")]


@app.command()
def train(
    head: Head,
    now: Now = None,
    training_set_version: Annotated[
        int | None,
        typer.Option(help="Retrain on this recorded training-set version instead of building a new one."),
    ] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Build a point-in-time training set, fit + calibrate one head, log to MLflow, promote behind gates."""
    from pipelines.training.train import train_head

    if head not in ("rsvp", "attend"):
        raise typer.BadParameter(f"--head must be rsvp or attend, not {head!r}")
    settings = _settings(profile)
    at = None if training_set_version is not None else (_parse_instant(now) or datetime.now(UTC))
    with _progress(f"train p_{head}") as progress:
        report = train_head(settings, head, at, training_set_version, progress=progress)
    m = report["metrics"]
    table = Table(title=f"p_{head}: run {report['run_id']}, model version {report['version']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(m):
        table.add_row(key, "-" if m[key] is None else f"{m[key]:.4f}")
    err.print(table)
    colour = "green" if report["promoted"] else "yellow"
    err.print(
        f"[{colour}]{'promoted to champion' if report['promoted'] else 'not promoted'}[/{colour}]: {report['reason']}"
    )
    _emit(report, as_json)


@app.command()
def evaluate(
    requests: Annotated[int, typer.Option(help="Test requests to rank the whole live catalog for.")] = 150,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """The champion beside popularity, RSVP-only, random and the simulator's oracle, on the same requests."""
    from pipelines.training.evaluate import evaluate as run_evaluate

    settings = _settings(profile)
    with _progress("evaluate") as progress:
        report = run_evaluate(settings, requests=requests, progress=progress)
    columns = (
        "ndcg_at_25",
        "expected_attendance_at_25",
        "expected_rsvps_at_25",
        "ece",
        "recall_at_25_random_slot",
    )
    table = Table(
        title=f"{report['requests']} test requests, {report['candidates_per_request']:.0f} live candidates each "
        f"(champions rsvp v{report['champion_versions']['rsvp']}, attend v{report['champion_versions']['attend']})"
    )
    table.add_column("model")
    for col in columns:
        table.add_column(col, justify="right")
    for name, row in report["models"].items():
        table.add_row(name, *("-" if row.get(c) is None else f"{row[c]:.4f}" for c in columns))
    err.print(table)
    _emit(report, as_json)


@app.command()
def rollback(head: Head, as_json: JsonFlag = False, profile: Profile = None) -> None:
    """Point a head's `champion` alias back at its `previous` version."""
    from pipelines.training.registry import rollback as run_rollback

    settings = _settings(profile)
    try:
        report = run_rollback(settings, head)
    except LookupError as e:
        err.print(f"[red]cannot roll back[/red]: {e}")
        raise typer.Exit(2) from e
    err.print(f"p_{head}: champion is now version {report['champion']} (previous {report['previous']})")
    _emit(report, as_json)


@app.command()
def schema() -> None:
    """Print the landing schema as Markdown (the source of docs/landing-schema.md)."""
    from pipelines.landing_schema import render_markdown

    out.print(render_markdown(), markup=False, highlight=False, soft_wrap=True)


def _serving_state(settings: Settings, now: datetime, clock: Callable[[], datetime] | None = None) -> Any:
    """The real serving state as of ``now`` (requests on ``clock``, default pinned to ``now``); a
    readable exit when no index is published.

    Without a usable champion the state serves metro popularity (the model-down path) and says so.
    """
    from serving.live import NotPublished, load_serving_state

    try:
        with _progress("loading the serving state") as progress:
            progress("index, champions, silver, online store", 0, 1)
            state = load_serving_state(settings, now, require_model=False, clock=clock)
            progress("ready", 1, 1)
    except NotPublished as e:
        err.print(f"[red]cannot serve real data[/red]: {e} (run `make demo` first)")
        raise typer.Exit(2) from e
    if state.models.current is None:
        why = state.models.last_refusal or "the registry has no p_rsvp champion (turnout train --head rsvp)"
        err.print(f"[yellow]no usable model, serving metro popularity[/yellow]: {why}")
    return state


@app.command()
def serve(
    now: Annotated[
        str | None,
        typer.Option("--now", help="Serve as of this instant (UTC, e.g. 2026-11-09T00:00Z); default: now."),
    ] = None,
    synthetic: Annotated[
        bool, typer.Option("--synthetic", help="Serve an in-process synthetic dense-metro world instead.")
    ] = False,
    synthetic_events: Annotated[
        int, typer.Option(help="Events in the synthetic world (--synthetic).")
    ] = 2000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    profile: Profile = None,
) -> None:
    """Start the feed API (GET /v1/feed, /healthz, /metrics).

    By default over what the pipeline published: the live geo index, the registry champions,
    the Feast online store and silver's live events, RSVPs, friendships and capacity counters,
    as of --now. --synthetic serves an in-process synthetic world instead (no lake needed).
    """
    import uvicorn

    from serving.app import create_app
    from serving.refresh import BackgroundRefresher

    settings = _settings(profile)
    if synthetic:
        from serving.impressions import LandingImpressionLog
        from serving.synthetic import make_head, make_state, make_world

        world = make_world(n_events=synthetic_events, n_users=200)
        # Synthetic impressions go beside, never into, the real landing zone ingestion reads.
        log_root = settings.home / "serving-synthetic" / "landing"
        state = make_state(
            world,
            (make_head("rsvp", rounds=100), make_head("attend", rounds=100)),
            impressions=LandingImpressionLog(log_root),
        )
        state.clock = lambda: world.now  # the synthetic catalog is live as of its own instant
        err.print(f"serving {len(world.snapshot)} synthetic events as of {world.now.isoformat()}")
    else:
        at = _parse_instant(now) or datetime.now(UTC)
        state = _serving_state(settings, at, None if now else lambda: datetime.now(UTC))
        err.print(
            f"serving {len(state.snapshot)} live events as of {at.isoformat()} "
            f"(index {state.index_version}, model {state.model_version()})"
        )
    refresher = BackgroundRefresher(
        state, settings.serving.model_refresh_seconds, settings.serving.snapshot_refresh_seconds
    )
    err.print(
        f"listening on http://{host}:{port} (champions re-read every {refresher.model_every_s:g} s, "
        f"event snapshot every {refresher.snapshot_every_s:g} s)"
    )
    uvicorn.run(create_app(state, refresher=refresher), host=host, port=port, log_level="info")


@app.command()
def feed(
    user_id: Annotated[str, typer.Option("--user-id", help="The user asking for a feed.")],
    now: Now = None,
    lat: Annotated[float | None, typer.Option(help="GPS latitude; omit (with --lng) to use home.")] = None,
    lng: Annotated[float | None, typer.Option(help="GPS longitude.")] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Ask a running `turnout serve` at this URL (e.g. http://127.0.0.1:8000) instead of "
            "loading the state in this process.",
        ),
    ] = None,
    wait: Annotated[
        float, typer.Option(help="With --server: wait up to this many seconds for it to answer /healthz.")
    ] = 0.0,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Serve one feed from the real state (index, champions, online store, silver) and print it.

    The same request path as GET /v1/feed (or, with --server, that endpoint itself); its
    impressions are appended to the landing zone.
    """
    from serving.app import FeedOut

    if (lat is None) != (lng is None):
        raise typer.BadParameter("give both --lat and --lng, or neither (to use the user's home)")
    if server is not None:
        body = _feed_from_server(server, wait, user_id, now, lat, lng)
    else:
        from serving.feed import FeedRequest, NoLocation, serve_feed

        settings = _settings(profile)
        at = _parse_instant(now) or datetime.now(UTC)
        state = _serving_state(settings, at)
        try:
            result = serve_feed(state, FeedRequest(user_id, at, lat, lng, request_id=uuid.uuid4().hex))
        except NoLocation as e:
            err.print(f"[red]no feed[/red]: {e}")
            raise typer.Exit(2) from e
        body = FeedOut.model_validate(result, from_attributes=True)
    _print_feed(body)
    _emit(body.model_dump(), as_json)


def _feed_from_server(
    server: str, wait_s: float, user_id: str, now: str | None, lat: float | None, lng: float | None
) -> Any:
    """GET /v1/feed from a running service (after waiting for its /healthz); 4xx bodies are shown."""
    import httpx

    from serving.app import FeedOut

    base = server.rstrip("/")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            httpx.get(f"{base}/healthz", timeout=5).raise_for_status()
            break
        except httpx.HTTPError as e:
            if time.monotonic() >= deadline:
                err.print(f"[red]no service at {base}[/red]: {e}")
                raise typer.Exit(2) from e
            time.sleep(1)
    params: dict[str, Any] = {"user_id": user_id}
    params.update({k: v for k, v in (("now", now), ("lat", lat), ("lng", lng)) if v is not None})
    response = httpx.get(f"{base}/v1/feed", params=params, timeout=30)
    if response.status_code != 200:
        err.print(f"[red]no feed ({response.status_code})[/red]: {response.text}")
        raise typer.Exit(2)
    return FeedOut.model_validate(response.json())


def _print_feed(result: Any) -> None:
    """A feed response (``FeedOut``) as a table on stderr."""
    table = Table(
        title=f"feed for {result.user_id} as of {result.served_at}: {result.served_by}, "
        f"model {result.model_version}, {result.candidates} candidates, {result.eligible} eligible, "
        f"{result.stages_ms['total']:.0f} ms"
    )
    for col in (
        "#",
        "event",
        "category",
        "organizer",
        "starts (venue time)",
        "km",
        "friends",
        "P(attend)",
        "P(rsvp)",
    ):
        table.add_column(
            col,
            justify="left" if col in ("event", "category", "organizer", "starts (venue time)") else "right",
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
            "-" if item.score is None else f"{item.score:.3f}",
            "-" if item.p_rsvp is None else f"{item.p_rsvp:.3f}",
        )
    err.print(table)
    if result.events and result.events[-1].is_exploration:
        err.print(f"* exploration slot ({result.events[-1].exploration_kind})")
    err.print(
        f"near you this weekend: {', '.join(e.event_id for e in result.near_you_this_weekend) or 'nothing'}"
    )


@app.command("bench-serving")
def bench_serving(
    requests: Annotated[int, typer.Option(help="Feed requests to time.")] = 200,
    events: Annotated[
        int, typer.Option(help="Synthetic events in the dense metro (cap 15,000 per request).")
    ] = 20_000,
    feast_requests: Annotated[
        int,
        typer.Option(
            help="Requests also read through the Feast SDK from a throwaway local store "
            "(~5 s each at 15,000 candidates; 0 skips it)."
        ),
    ] = 3,
    no_compile: Annotated[
        bool,
        typer.Option(
            "--no-compile",
            help="Score with LightGBM's predictor only (default: compile the heads as registration does, "
            "cached under $TURNOUT_HOME/cache/compiled, and serve the same requests both ways).",
        ),
    ] = False,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Time feed requests on a dense synthetic metro, per stage, beside stock LightGBM full scoring
    and the Feast SDK read path on the same requests."""
    from serving.bench import run_bench, summary_lines, table_rows

    cache = None if no_compile else _settings(profile).home / "cache" / "compiled"
    report = run_bench(
        requests=requests,
        events=events,
        feast_requests=feast_requests,
        progress=err.print,
        compiled_cache=cache,
    )
    table = Table(title=f"{report['requests']} feed requests, candidates p50 {report['candidates_p50']:,}")
    for col in ("stage", "p50 ms", "p99 ms", "p50 ms, LightGBM predictor", "p99 ms, LightGBM predictor"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for row in table_rows(report):
        table.add_row(*(cell.replace("**", "") for cell in row))
    err.print(table)
    for line in summary_lines(report):
        err.print(line)
    _emit(report, as_json)


# `turnout bench serving` (the spelling) is the same command as `turnout bench-serving`.
bench_app = typer.Typer(
    help="Benchmarks (tables on stderr, --json summary last on stdout).", no_args_is_help=True
)
bench_app.command("serving")(bench_serving)
app.add_typer(bench_app, name="bench")

if __name__ == "__main__":
    app()
