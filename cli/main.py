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
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from cli import render
from cli.airflow_api import AirflowApi
from conf import Settings, load_settings
from contracts.instants import parse_instant

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
    """The settings, with every log line (ours, Feast's, Spark's, Python warnings) going to
    ``$TURNOUT_HOME/logs/turnout.log`` and only warnings and errors of turnout's own to the
    console, so progress bars and summary tables are what a person sees."""
    settings = load_settings(profile)
    configure_logging(settings.home / "logs")
    return settings


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (a test runner swaps it per command)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure_logging(folder: Path) -> Path:
    """Route logging for one command: the file gets everything, the console only our warnings."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "turnout.log"
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_turnout", False)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.INFO)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_console = _Stderr()
    to_console.setLevel(logging.WARNING)
    ours = (
        "cli",
        "conf",
        "contracts",
        "features",
        "models",
        "pipelines",
        "published",
        "serving",
        "simulator",
    )
    to_console.addFilter(lambda r: r.name.split(".")[0] in ours)
    to_console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for handler in (to_file, to_console):
        setattr(handler, "_turnout", True)  # noqa: B010  # marks ours, so a second command replaces them
        root.addHandler(handler)
    logging.captureWarnings(True)  # experimental-module warnings from Feast and friends: to the file
    for noisy in ("great_expectations", "py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


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
    try:
        return parse_instant(value)
    except ValueError as e:
        raise typer.BadParameter(f"{e} (e.g. 2026-11-01T13:00Z)") from e


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
    platform_days: Annotated[
        int,
        typer.Option(
            help="Days after the history for the live platform (`turnout platform`, the platform DAG) to play."
        ),
    ] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing landing zone.")] = False,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Generate a platform history into the landing zone (and its hidden ground truth)."""
    from simulator.config import SimulationConfig
    from simulator.run import simulate as run_simulation

    settings = _settings(profile)
    config = SimulationConfig(users=users, days=days, seed=seed, platform_days=platform_days)
    landing = Path(settings.landing.root)
    t0 = time.perf_counter()
    with _progress("simulate") as progress:
        summary = run_simulation(
            config, landing, settings.home / "simulator", progress=progress, overwrite=overwrite
        )
    data = summary.to_dict()
    err.print(render.simulation(data, str(landing), time.perf_counter() - t0))
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
    from contracts.errors import DataContractError
    from pipelines.ingest.run import ingest_interval

    settings = _settings(profile)
    run_id = run_id or _new_run_id()
    t_start, t_end = _parse_instant(start), _parse_instant(end)
    try:
        with _progress("ingest") as progress:
            report = ingest_interval(settings, t_start, t_end, run_id, progress=progress)
    except DataContractError as e:
        err.print(f"[red]data contract failed[/red]: {e}")
        raise typer.Exit(2) from e
    err.print(render.ingestion(run_id, report))
    _emit(report, as_json)


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
    from contracts.errors import DataContractError
    from pipelines.feast_store import write_feature_store_yaml
    from pipelines.features.definitions import apply_definitions
    from pipelines.features.jobs import build_gold, written_since
    from pipelines.features.validation import validate_gold

    settings = _settings(profile)
    run_id = run_id or _new_run_id()
    t_start, t_end = _parse_instant(start), _parse_instant(end) or datetime.now(UTC)
    with _progress("features") as progress:
        report = build_gold(settings, t_start, t_end, run_id, progress=progress)
    try:
        report["validation"] = validate_gold(settings, t_end, since=written_since(t_start))
    except DataContractError as e:
        err.print(f"[red]gold tables failed validation; nothing applied[/red]: {e}")
        raise typer.Exit(2) from e
    report["apply"] = apply_definitions(settings)
    report["feature_store_yaml"] = str(write_feature_store_yaml(settings))
    err.print(render.gold(report))
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
    from pipelines.features.materialize import materialize as run_materialize

    settings = _settings(profile)
    report = run_materialize(settings, _parse_instant(end) or datetime.now(UTC))
    err.print(render.materialization(report, str(settings.feast.online_store.get("type"))))
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
    from pipelines.index.run import build_and_publish_index, embed_new_events, rollback_index
    from published.versioned import PublicationError

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
    err.print(render.training(head, report))
    _emit(report, as_json)


@app.command()
def evaluate(
    requests: Annotated[int, typer.Option(help="Test requests to rank the whole live catalog for.")] = 150,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """The champion beside popularity, RSVP-only, random and the simulator's oracle, on the same requests."""
    from pipelines.training.evaluate import evaluate as run_evaluate
    from simulator.truth import GroundTruth

    settings = _settings(profile)
    truth_root = settings.home / "simulator"
    if not (truth_root / "params.json").exists():
        err.print(
            f"[red]no simulator ground truth at {truth_root}[/red]: expected attendance needs a simulated "
            "history (`turnout simulate`); real traffic is graded by the online experiment instead"
        )
        raise typer.Exit(2)
    with _progress("evaluate") as progress:
        report = run_evaluate(settings, GroundTruth.load(truth_root), requests=requests, progress=progress)
    err.print(render.evaluation(report))
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
def relocate(as_json: JsonFlag = False, profile: Profile = None) -> None:
    """After moving or copying $TURNOUT_HOME: point its MLflow store and Feast registry at the new home.

    MLflow's SQLite store and Feast's registry record absolute paths; training refuses a store that
    still names the old home. This rewrites MLflow's artifact locations (when the artifacts came
    along) and re-applies the feature definitions with this home's Delta paths. Safe to repeat.
    """
    from pipelines.feast_store import write_feature_store_yaml
    from pipelines.features.definitions import apply_definitions
    from pipelines.training.relocate import HomeMoved, relocate_mlflow

    settings = _settings(profile)
    try:
        moved = relocate_mlflow(settings)
    except HomeMoved as e:
        err.print(f"[red]cannot relocate[/red]: {e}")
        raise typer.Exit(2) from e
    if moved["from"] is None:
        err.print(f"MLflow: artifact locations already under {moved['to']}")
    else:
        err.print(f"MLflow: {moved['from']} -> {moved['to']} ({sum(moved['rows'].values())} locations)")
    feast = apply_definitions(settings)
    write_feature_store_yaml(settings)
    err.print(
        f"Feast: {'re-applied ' + str(feast['changed']) if feast['applied'] else 'registry already here'}"
    )
    _emit({"mlflow": moved, "feast": {k: feast[k] for k in ("applied", "changed")}}, as_json)


@app.command("mlflow-ui")
def mlflow_ui(
    port: Annotated[int, typer.Option(help="Port of the MLflow UI.")] = 5000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    profile: Profile = None,
) -> None:
    """Serve the MLflow UI on the tracking store and artifact root the settings name.

    Runs `mlflow server` in place of this process, so the runs, plots and registry aliases an
    analyst browses are the ones the jobs wrote (with the cluster profile's server, open its URL).
    """
    import os
    import shutil

    settings = _settings(profile)
    uri = settings.mlflow.tracking_uri
    if uri.startswith(("http://", "https://")):
        err.print(f"the tracking store is a server already: open {uri}")
        raise typer.Exit(2)
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    args = [mlflow, "server", "--host", host, "--port", str(port), "--workers", "1"]
    args += ["--backend-store-uri", uri, "--default-artifact-root", settings.mlflow.artifact_root]
    err.print(f"MLflow UI on http://{host}:{port} for {uri}")
    os.execv(mlflow, args)


@app.command()
def schema() -> None:
    """Print the landing schema as Markdown (the source of docs/landing-schema.md)."""
    from contracts.landing import render_markdown

    out.print(render_markdown(), markup=False, highlight=False, soft_wrap=True)


def _serving_state(
    settings: Settings,
    now: datetime,
    clock: Callable[[], datetime] | None = None,
    follow_published: bool = False,
) -> Any:
    """The real serving state as of ``now`` (requests on ``clock``, default pinned to ``now``); a
    readable exit when nothing is published. Whatever is missing is named, and served around.
    """
    from serving.live import NotPublished, load_serving_state

    try:
        with _progress("loading the serving state") as progress:
            progress("catalog, index, champions, online store", 0, 1)
            state = load_serving_state(
                settings, now, require_model=False, clock=clock, follow_published=follow_published
            )
            progress("ready", 1, 1)
    except NotPublished as e:
        err.print(f"[red]cannot serve real data[/red]: {e} (run `make demo` first)")
        raise typer.Exit(2) from e
    if state.models.current is None:
        why = state.models.last_refusal or "the registry has no p_rsvp champion (turnout train --head rsvp)"
        err.print(f"[yellow]no usable model, serving metro popularity[/yellow]: {why}")
    for name, component in state.health.items():
        if not component.ok:
            err.print(f"[yellow]{name} {component.status}[/yellow]: {component.detail}")
    return state


@app.command()
def serve(
    now: Annotated[
        str | None,
        typer.Option("--now", help="Serve as of this instant (UTC, e.g. 2026-11-09T00:00Z); default: now."),
    ] = None,
    clock: Annotated[
        str,
        typer.Option(
            "--clock",
            help="wall: the wall clock (or --now); published: the instant of the newest published "
            "catalog, for a simulated platform that sends its own `now` (the `platform` DAG).",
        ),
    ] = "wall",
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

    By default over what the pipeline published: the geo index and its catalog (live events, RSVP
    lists, friendships, capacity counters, homes), the registry champions and the Feast online
    store, as of --now. A dependency that is missing or fails is served around and named in
    `served_by` and /healthz; each is checked every serving.health_check_seconds and picked up
    again when it comes back. --synthetic serves an in-process synthetic world instead.
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
        if clock not in ("wall", "published"):
            err.print(f"[red]--clock must be wall or published, not {clock!r}[/red]")
            raise typer.Exit(2)
        at = _parse_instant(now) or datetime.now(UTC)
        state = _serving_state(
            settings, at, None if now else lambda: datetime.now(UTC), follow_published=clock == "published"
        )
        err.print(
            f"serving {len(state.snapshot)} live events as of {at.isoformat()} "
            f"(index {state.index_version}, model {state.model_version()})"
        )
    refresher = BackgroundRefresher(
        state,
        settings.serving.model_refresh_seconds,
        settings.serving.snapshot_refresh_seconds,
        settings.serving.health_check_seconds,
    )
    err.print(
        f"listening on http://{host}:{port} (dependencies checked every {refresher.check_every_s:g} s, "
        f"champions every {refresher.model_every_s:g} s, event snapshot every {refresher.snapshot_every_s:g} s)"
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
    from dataclasses import asdict

    from cli.client import ServiceError, fetch_feed

    if (lat is None) != (lng is None):
        raise typer.BadParameter("give both --lat and --lng, or neither (to use the user's home)")
    if server is not None:
        try:
            result = fetch_feed(server, wait, {"user_id": user_id, "now": now, "lat": lat, "lng": lng})
        except ServiceError as e:
            err.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from e
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
    err.print(render.feed(result))
    _emit(asdict(result), as_json)


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
    heads: Annotated[
        Literal["stress", "trained"],
        typer.Option(
            help="stress: two 300-tree heads of 255 leaves (the budget's case); trained: 300 trees of 31 "
            "leaves, the shape turnout trains."
        ),
    ] = "stress",
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Time feed requests on a dense synthetic metro, per stage, beside stock LightGBM full scoring
    and the Feast SDK read path on the same requests."""
    from bench.bench_serving import TABLE_COLUMNS, run_bench, summary_lines, table_rows

    cache = None if no_compile else _settings(profile).home / "cache" / "compiled"
    report = run_bench(
        requests=requests,
        events=events,
        feast_requests=feast_requests,
        progress=err.print,
        compiled_cache=cache,
        head_shape=heads,
    )
    err.print(render.serving_bench(report, TABLE_COLUMNS, table_rows(report), summary_lines(report)))
    _emit(report, as_json)


@app.command()
def platform(
    start: Annotated[str, typer.Option(help="First hour to play, UTC (e.g. 2026-11-09T00:00Z).")],
    end: Annotated[str, typer.Option(help="End of the hours to play, exclusive.")],
    feed_url: Annotated[
        str | None, typer.Option(help="The feed service its users ask; default: settings.platform.feed_url.")
    ] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Play the simulated platform's hours in [start, end) against the running feed service.

    Each hour delivers what the world brings (sign-ups, new events, cancellations, outcomes due),
    asks the service for the hour's feeds (it logs the impressions), lets users respond by the
    hidden ground truth and tells the booking counter. A played hour is not played again.
    """
    from cli.platform import play_platform

    settings = _settings(profile)
    t_start, t_end = _parse_instant(start), _parse_instant(end)
    assert t_start is not None and t_end is not None
    try:
        with _progress("platform") as progress:
            report = play_platform(settings, t_start, t_end, feed_url, progress=progress)
    except ValueError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    err.print(render.platform_hours(report))
    _emit(report, as_json)


def _airflow(settings: Settings, url: str) -> AirflowApi:
    """The running deployment's REST API, or exit 2 saying how to start one."""
    api = AirflowApi(url, server_log=settings.home / "logs" / "airflow-api.log")
    try:
        api.health()
    except OSError as e:
        err.print(f"[red]no Airflow at {url}[/red] ({e}): start the deployment with `make up`")
        raise typer.Exit(2) from e
    return api


@app.command()
def loop(
    hours: Annotated[int, typer.Option(help="Simulated hours to play.")] = 6,
    start: Annotated[
        str | None, typer.Option(help="First hour to play, UTC; default: the first hour not played yet.")
    ] = None,
    airflow_url: Annotated[
        str, typer.Option(help="The deployment's Airflow API (make up: AIRFLOW_PORT, default 8080).")
    ] = "http://127.0.0.1:8080",
    step: Annotated[
        int,
        typer.Option(
            help="Platform hours per backfill; the next waits until the pipeline behind it is idle "
            "and the feed service answers as of what it published. 0: every hour in one backfill, "
            "the pipeline following as it can. Keep it at most 12: the service answers up to 24 h past "
            "the published instant. Deliveries Airflow leaves without a run (apache/airflow#56050) "
            "are released at the end of each step."
        ),
    ] = 6,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 7200.0,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Play the simulated platform's next hours through the running deployment (`make up`).

    Unpauses platform, ingest, features, train_rsvp and index, backfills the platform DAG over the
    hours and shows every DAG run and task as it goes while the assets chain ingest -> features ->
    train_rsvp and index behind it; then prints `turnout report loop`.

    A platform hour takes seconds and the pipeline behind it minutes, so one backfill of a day
    would serve the whole day from the champion it started with. `--step` paces the platform in
    simulated time: each step's hours are played, then ingested, built, trained and indexed
    before the next step's users ask for feeds, as an hourly cadence would have them.
    """
    from datetime import timedelta

    from cli.airflow_api import LOOP_DAGS, release_held_events, watch_until_idle
    from cli.platform import loop_report, truth_root, wait_for_catalog
    from simulator.platform import platform_start, played_hours

    settings = _settings(profile)
    first = platform_start(truth_root(settings))
    if first is None:
        err.print("[red]this home has no live platform[/red]: `turnout simulate --platform-days N` first")
        raise typer.Exit(2)
    begin = _parse_instant(start) or first + timedelta(hours=len(played_hours(truth_root(settings))))
    api = _airflow(settings, airflow_url)
    for dag_id in LOOP_DAGS:
        api.unpause(dag_id)
    err.print(f"unpaused {', '.join(LOOP_DAGS)}; waiting for the wall clock's runs to settle")
    watch_until_idle(api, err.print, timeout_s=timeout)
    chunk = step if step > 0 else hours
    backfills, took = [], 0.0
    for offset in range(0, hours, chunk):
        first_hour = begin + timedelta(hours=offset)
        last_hour = begin + timedelta(hours=min(offset + chunk, hours) - 1)
        backfill = api.backfill("platform", first_hour, last_hour)
        err.print(
            f"backfill {backfill['id']}: platform hours {first_hour.isoformat()} .. {last_hour.isoformat()}"
        )
        took += watch_until_idle(
            api, err.print, backfill_id=int(backfill["id"]), timeout_s=max(timeout - took, 1.0)
        )
        # Until the deliveries Airflow held back have run too (at most a few rounds: each round's
        # runs can leave events held behind them in the next DAG of the chain).
        for _ in range(5):
            if not release_held_events(api, err.print):
                break
            took += watch_until_idle(api, err.print, timeout_s=max(timeout - took, 1.0))
        backfills.append(backfill)
        if offset + chunk < hours:  # the next step's users are served as of what this one published
            waited = time.monotonic()
            served, published = wait_for_catalog(settings, timeout_s=600)
            took += time.monotonic() - waited
            if served is None or served < published:
                err.print(f"[yellow]the feed service still answers as of {served}, not {published}[/yellow]")
            else:
                err.print(f"feed service answers as of {served} (published {published})")
    err.print(f"{hours} simulated hours and the pipeline behind them in {took:.0f} s")
    report = loop_report(settings)
    if report["days"]:
        err.print(render.loop_days(report))
    _emit({**report, "seconds": round(took, 1), "backfills": backfills}, as_json)


@app.command()
def demo(
    now: Annotated[str, typer.Option(help="The instant the demo acts as of (the history's last day).")],
    tower_at: Annotated[
        str, typer.Option(help="The content tower's training instant (the training window's start).")
    ],
    airflow_url: Annotated[
        str, typer.Option(help="The deployment's Airflow API (make up: AIRFLOW_PORT, default 8080).")
    ] = "http://127.0.0.1:8080",
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 3600.0,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Build the simulated history's first state through the running deployment (`make up`).

    Triggers, over Airflow's REST API, ingest over the whole history (features follows on its
    silver assets), content_tower as of --tower-at, index (on gold.features), then train_rsvp and
    train_attend as of --now, and shows every DAG run and task as it goes. `make demo` runs it.
    """
    from cli.demo import DemoStepFailed, run_demo

    settings = _settings(profile)
    at, tower = _parse_instant(now), _parse_instant(tower_at)
    assert at is not None and tower is not None
    api = _airflow(settings, airflow_url)
    try:
        report = run_demo(api, at, tower, err.print, timeout_s=timeout)
    except (DemoStepFailed, TimeoutError) as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from e
    err.print(render.demo_steps(report))
    _emit(report, as_json)


report_app = typer.Typer(help="Reports over what the running system did.", no_args_is_help=True)
app.add_typer(report_app, name="report")


@report_app.command("loop")
def report_loop(
    mlflow_run: Annotated[bool, typer.Option(help="Log the table and the trend plot to MLflow.")] = True,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """The closed loop per simulated day: champions, feeds, outcomes per feed beside the oracle's."""
    from cli.platform import loop_report

    settings = _settings(profile)
    report = loop_report(settings, log_to_mlflow=mlflow_run)
    if not report["days"]:
        err.print("no platform hours played yet (`turnout platform`, or the platform DAG)")
    else:
        err.print(render.loop_days(report))
    _emit(report, as_json)


# `turnout bench serving` (the spelling) is the same command as `turnout bench-serving`.
bench_app = typer.Typer(
    help="Benchmarks (tables on stderr, --json summary last on stdout).", no_args_is_help=True
)
bench_app.command("serving")(bench_serving)
app.add_typer(bench_app, name="bench")

import_app = typer.Typer(help="Map real data into the landing schema.", no_args_is_help=True)
app.add_typer(import_app, name="import")

DEFAULT_MEETUP = Path(__file__).resolve().parents[2] / "shared" / "data" / "meetup"


@import_app.command("meetup")
def import_meetup(
    source: Annotated[
        Path, typer.Option(help="Folder with the crawl's events/members/rsvps .csv.gz.")
    ] = DEFAULT_MEETUP,
    members: Annotated[int | None, typer.Option(help="Only the first N members (a small run).")] = None,
    as_json: JsonFlag = False,
    profile: Profile = None,
) -> None:
    """Map the public 2013 Meetup crawl into the landing zone (then `turnout ingest` as usual).

    Fields the crawl lacks are filled with stated constants or imputed, and counted; records that
    cannot be mapped are skipped and counted. See importers/meetup.py for each field's rule.
    """
    from importers.meetup import import_meetup as run_import

    settings = _settings(profile)
    if not (source / "events.csv.gz").is_file():
        err.print(f"[red]no crawl at {source}[/red] (expected events.csv.gz, members.csv.gz, rsvps.csv.gz)")
        raise typer.Exit(2)
    try:
        report = run_import(source, Path(settings.landing.root), members=members).to_dict()
    except FileExistsError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    err.print(render.meetup_import(report, settings.landing.root))
    _emit(report, as_json)


if __name__ == "__main__":
    app()
