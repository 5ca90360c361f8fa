"""Read a YAML profile (``local`` or ``cluster``) into one typed, validated settings object.

* ``TURNOUT_PROFILE`` picks the profile (default ``local``).
* ``TURNOUT_HOME`` is the root of all state (default ``~/.turnout``); ``{home}`` in a path
  expands to it and ``{repo}`` to this repository, so two homes never interfere.
* ``TURNOUT__SECTION__KEY=value`` overrides one key, e.g. ``TURNOUT__SPARK__MASTER=local[1]``.

Unknown keys are rejected with the key and the file named, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILE_DIR = Path(__file__).resolve().parent
ENV_PREFIX = "TURNOUT__"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkSettings(_Strict):
    master: str = "local[2]"
    driver_memory: str = "4g"
    shuffle_partitions: int = Field(4, ge=1)
    delta_snapshot_partitions: int = Field(2, ge=1)
    jars_dir: str
    # Folders of further jars for spark.jars, e.g. `make jars-s3`'s S3A connector for a lake on s3a://.
    extra_jars_dirs: list[str] = Field(default_factory=list)
    conf: dict[str, str] = Field(default_factory=dict)
    # Where `make spark-classes` keeps a class-data archive (CDS) of the classes a Spark + Delta job
    # loads, one per JVM and classpath (pipelines/spark_classes.py). A driver finding the archive for
    # its own JVM and classpath maps it instead of loading those classes from the jars. None: no archive.
    class_archive_dir: str | None = None


class LakeSettings(_Strict):
    root: str

    def table_path(self, layer: str, table: str) -> str:
        """Where one Delta table lives, e.g. ``table_path("silver", "events")``."""
        return f"{self.root.rstrip('/')}/{layer}/{table}"


class LandingSettings(_Strict):
    root: str


class IngestSettings(_Strict):
    # Above this share of quarantined rows in one table and interval, the batch is treated as a
    # broken delivery and the run fails instead of publishing a mostly-empty table.
    max_quarantine_fraction: float = Field(0.2, ge=0.0, le=1.0)
    # ... unless it is only a handful of rows: one bad line in a five-line hourly delivery of
    # venues is a bad line, not a broken export.
    min_quarantined_to_fail: int = Field(10, ge=0)


class FeaturesSettings(_Strict):
    # A gold table of at most this many rows (as of a run's end) is validated on the driver, with
    # great-expectations' pandas engine: one Spark job collects it, where the Spark engine runs one
    # per expectation (~20 per table), each costing more than the check itself on a small table.
    # Larger tables are validated by Spark; 0 validates every table there.
    validate_on_driver_max_rows: int = Field(default=2_000_000, ge=0)


class IndexSettings(_Strict):
    """The geo-time index and the content tower's published artifacts (design: "The geo index")."""

    root: str
    h3_resolution: int = Field(5, ge=0, le=15)  # ring cells: each costs one posting-list seek
    travel_resolution: int = Field(7, ge=0, le=15)  # travel-time cells
    ring_k: int = Field(4, ge=1)  # k=4 guarantees 47.6 km >= the 40.23 km request radius
    radius_km: float = Field(40.23, gt=0)
    horizon_days: int = Field(21, ge=1)
    max_candidates: int = Field(15_000, ge=1)
    embedding_dim: int = Field(64, ge=2)


class FeastSettings(_Strict):
    """Where Feast keeps its registry and which online store it materializes to."""

    project: str = "turnout"
    registry: str
    # Passed to feature_store.yaml as-is: {type: sqlite, path: ...} or {type: redis, connection_string: ...}
    online_store: dict[str, str]
    # Online rows older than this are treated as missing by serving (Feast does not filter by TTL online).
    max_online_age_hours: int = Field(48, ge=1)
    # Feast's offline store type: turnout's sorted Spark store (pipelines/offline_store.py: Feast's
    # API and frames, the point-in-time join as one sort per view; the demo's p_rsvp set builds 3x
    # faster, bench/bench_training.py) or "spark" (Feast's stock Spark store, the reference the
    # tests hold it equal to).
    offline_store: str = "pipelines.offline_store.SortedSparkOfflineStore"
    # Feast's batch (materialization) engine: turnout's (pipelines/online_write.py: Feast's local
    # engine converting each column in one pass and writing SQLite in one executemany; the same
    # bytes online, bench/bench_materialize.py) or "local" (Feast's own, the tests' reference).
    batch_engine: str = "pipelines.online_write.ColumnarComputeEngine"
    # Where the Spark offline store writes a point-in-time join's result as Parquet for the
    # driver to read (a local path or s3://): collecting a training set through the driver's
    # JVM instead needs the whole result on its heap.
    staging_location: str


class MlflowSettings(_Strict):
    tracking_uri: str
    artifact_root: str


class GateSettings(_Strict):
    """What a challenger must show before it may become ``champion`` (see models.promotion)."""

    # The head's gate metric: the product's NDCG@25 on logged requests (rsvp), AUC on mature
    # attendance labels (attend). A challenger is refused when a paired bootstrap interval (at
    # `level`) of its difference from the champion lies wholly below -tolerance.
    tolerance: float = Field(default=0.01, ge=0.0)
    level: float = Field(default=0.95, gt=0.0, lt=1.0)
    max_ece: float = Field(default=0.02, gt=0.0)  # per head, on its own temporal test slice
    min_score_std: float = Field(default=1e-4, ge=0.0)  # a collapsed score distribution ranks nothing


class TrainingSettings(_Strict):
    """Training sets, splits and the two LightGBM heads (design: "Training", "Negative sampling")."""

    window_days: int = Field(default=21, ge=2)  # label instants in [as_of - window_days, as_of)
    # The attend head's RSVPs: a few per event, labelled nine days late and retrained weekly, so a
    # long history lets it reach further back than the hourly head (bench_quality: 63 days on 90).
    # Its window ends attend_label_delay_days early; the split cuts the window, not the data, so it
    # must not reach far before the history starts (the demo's 28 days fill 21 + 9).
    attend_window_days: int = Field(default=21, ge=2)
    # Natural negatives kept (1.0 = all); the odds correction undoes whatever is dropped.
    negative_keep_rate: float = Field(default=1.0, gt=0.0, le=1.0)
    # Never-impressed random candidates, as a share of all negatives (design: about 20%).
    injected_negative_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    attend_label_delay_days: int = Field(default=9, ge=0)  # p_attend trains on labels at least this old
    # Temporal split of the label window: train | calibration | test, starting at these fractions.
    # Negatives are downsampled in the training part only: calibration and test stay natural.
    calibration_start_fraction: float = Field(default=0.65, gt=0.0, lt=1.0)
    test_start_fraction: float = Field(default=0.8, gt=0.0, lt=1.0)
    seed: int = 7
    num_threads: int = Field(default=2, ge=1)
    lightgbm: dict[str, float | int | str] = Field(default_factory=dict)  # overrides of models.heads
    experiment_prefix: str = "turnout"
    gates: dict[str, GateSettings] = Field(
        default_factory=lambda: {
            "rsvp": GateSettings(max_ece=0.02),
            # A few hundred test RSVPs at p~0.6: ECE's own noise is ~0.04.
            "attend": GateSettings(max_ece=0.08),
        }
    )


class AvailabilitySettings(_Strict):
    """The capacity counter serving reads its hard filters from (design: "Capacity is a gate").

    ``sqlite``: a file (or ``:memory:``) this process owns. ``redis``: the counters the booking
    path writes. ``seed_from_silver`` loads silver's counters, cancellations and RSVPs as of the
    served instant into it at start-up: right for the local stand-in, wrong where the booking path
    owns the live counters (it would overwrite them).
    """

    type: Literal["sqlite", "redis"] = "sqlite"
    path: str = ":memory:"  # sqlite
    url: str = ""  # redis, e.g. redis://redis:6379/1
    # Redis keys: <prefix>event:<id>, <prefix>rsvps:<user>, <prefix>blocked. The braces make it a
    # hash tag, so a Redis Cluster keeps every key in one slot (the write scripts touch several).
    key_prefix: str = "{turnout:avail}:"
    seed_from_silver: bool = True


class ServingSettings(_Strict):
    """The feed service's dependencies and how often it re-reads them while it runs."""

    availability: AvailabilitySettings = Field(default_factory=lambda: AvailabilitySettings())
    # Background refresh: the registry's champion aliases (cheap) and the event snapshot from the
    # online store (one read of every live event's rows). 0 turns a refresh off.
    model_refresh_seconds: float = Field(default=60.0, ge=0.0)
    snapshot_refresh_seconds: float = Field(default=900.0, ge=0.0)
    # How often each dependency is checked for real (the index version's files, the online store,
    # the registry, the capacity counter, the impression log's disk): a fault shows in /healthz and
    # in served_by within this many seconds, and so does its recovery. 0 turns the checks off.
    health_check_seconds: float = Field(default=5.0, ge=0.0)
    # The published state describes one instant (the catalog's); a request may ask for an instant
    # at most this long after it (and none before it): beyond that the feed would be made of
    # stale counters and expired features, so the request is refused and /healthz says stale.
    max_state_age_hours: float = Field(default=24.0, gt=0.0)


class PlatformSettings(_Strict):
    """The simulated platform's side of the loop (``simulator.platform``, the ``platform`` DAG)."""

    # The feed service the platform's users ask (``make up`` starts it; FEED_PORT moves it).
    feed_url: str = "http://127.0.0.1:8765"
    request_timeout_seconds: float = Field(default=30.0, gt=0.0)


class Settings(_Strict):
    profile: str
    home: Path
    spark: SparkSettings
    lake: LakeSettings
    landing: LandingSettings
    index: IndexSettings
    feast: FeastSettings
    mlflow: MlflowSettings
    ingest: IngestSettings = Field(
        default_factory=lambda: IngestSettings(max_quarantine_fraction=0.2, min_quarantined_to_fail=10)
    )
    features: FeaturesSettings = Field(default_factory=lambda: FeaturesSettings())
    training: TrainingSettings = Field(default_factory=lambda: TrainingSettings())
    serving: ServingSettings = Field(default_factory=lambda: ServingSettings())
    platform: PlatformSettings = Field(default_factory=lambda: PlatformSettings())


class SettingsError(ValueError):
    """A profile file that cannot be turned into settings; the message names file and key."""


def _expand(value: Any, home: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{home}", str(home)).replace("{repo}", str(REPO_ROOT))
    if isinstance(value, dict):
        return {k: _expand(v, home) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, home) for v in value]
    return value


def _apply_env_overrides(raw: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        node = raw
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return raw


def load_settings(
    profile: str | None = None,
    home: str | Path | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Build the settings for ``profile`` (default: ``$TURNOUT_PROFILE`` or ``local``)."""
    env = dict(os.environ if environ is None else environ)
    profile = profile or env.get("TURNOUT_PROFILE", "local")
    home_path = Path(home or env.get("TURNOUT_HOME") or Path.home() / ".turnout").expanduser()
    path = PROFILE_DIR / f"{profile}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise SettingsError(f"unknown profile {profile!r}: no {path} (known: {known})")
    raw = yaml.safe_load(path.read_text()) or {}
    raw = _apply_env_overrides(raw, env)
    raw = _expand(raw, home_path.resolve())
    try:
        return Settings(profile=profile, home=home_path.resolve(), **raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise SettingsError(f"{path}: {problems}") from err
