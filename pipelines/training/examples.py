"""Labelled examples for the two heads, on Spark, from silver (design: "Data and labels").

* ``rsvp_examples``: one row per impression served in the window, labelled 1 when the user
  RSVPed to that event within a day of seeing it, plus never-impressed random candidates from the
  user's metro (hard zeros) and, optionally, a downsample of the natural negatives.
* ``attend_examples``: one row per RSVP whose attendance label is at least nine days old.

Every row carries the join keys and request context Feast's point-in-time join needs, and
``event_timestamp``: the instant the prediction would have been made (the label instant). Only
silver rows known by ``as_of`` are read, so a rebuild as of the same instant gives the same rows.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from conf import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

RSVP_LABEL_WINDOW = timedelta(days=1)  # "same-day": an RSVP within 24 h of the impression
# Random candidates drawn per sampled impression; the first live, unseen one is kept. At any instant
# most of a metro's catalog is past or not yet announced, and a small catalog is mostly seen: in the
# test world 12 draws found one for 22% of impressions (short of the 25 per 100 negatives wanted),
# 32 for 37%.
_DRAWS = 32
_TWO_53 = 2**53  # doubles hold integers below this exactly

# Columns of every example row, in order (features are appended by the Feast join).
KEY_COLUMNS: tuple[str, ...] = (
    "example_id",
    "user_id",
    "event_id",
    "organizer_id",
    "venue_id",
    "series_id",
    "market_key",
    "event_timestamp",
)
REQUEST_COLUMNS: tuple[str, ...] = ("request_lat", "request_lng", "request_ts", "request_utc_offset_min")
META_COLUMNS: tuple[str, ...] = (
    "request_id",
    "label",
    "is_injected",
    "is_exploration",
    "exploration_kind",
    "rsvped",
    "attended",
    "rating",
    "event_created_ts",
    "user_metro",
)


@dataclass(frozen=True)
class ExampleCounts:
    """How the rows of one training set came to be; the odds correction is computed from these.

    Downsampling and injection touch only the training part of the window (label instants before
    ``train_end``): calibration and test rows stay the natural impression population.
    """

    natural_positives: int
    natural_negatives: int  # in the whole window, before downsampling
    training_negatives: int  # natural negatives before train_end, before downsampling
    kept_negatives: int  # of those, kept
    injected_negatives: int  # never-impressed hard zeros, all before train_end
    dropped: dict[str, int]  # rows left out, by reason (e.g. label not yet mature)

    @property
    def keep_rate(self) -> float:
        return self.kept_negatives / self.training_negatives if self.training_negatives else 1.0

    @property
    def injected_per_negative(self) -> float:
        return self.injected_negatives / self.training_negatives if self.training_negatives else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "keep_rate": self.keep_rate,
            "injected_per_negative": self.injected_per_negative,
        }


def _naive(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def _silver(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    return spark.read.format("delta").load(settings.lake.table_path("silver", table))


def event_context(spark: SparkSession, settings: Settings, as_of: datetime) -> DataFrame:
    """Per event known by ``as_of``: routing keys from gold.event_features, zone and cancellation."""
    from pyspark.sql import functions as F

    gold = (
        spark.read.format("delta")
        .load(settings.lake.table_path("gold", "event_features"))
        .filter(F.col("event_timestamp") < F.lit(_naive(as_of)))
        .select(
            "event_id",
            "organizer_id",
            "venue_id",
            "series_id",
            "market_key",
            "metro",
            "is_free",
            "start_ts",
            F.unix_timestamp("event_timestamp").alias("event_created_ts"),
        )
    )
    zones = _silver(spark, settings, "events").select("event_id", "timezone")
    cancelled = (
        _silver(spark, settings, "event_cancellations")
        .filter(F.col("cancelled_at") < F.lit(_naive(as_of)))
        .select("event_id", F.unix_timestamp("cancelled_at").alias("cancelled_ts"))
    )
    return gold.join(zones, "event_id", "left").join(cancelled, "event_id", "left")


def _utc_offset_minutes(instant: Column, zone: Column) -> Column:
    from pyspark.sql import functions as F

    local = F.from_utc_timestamp(instant, zone)
    return ((F.unix_timestamp(local) - F.unix_timestamp(instant)) / 60).cast("long")


def _uniform(seed: int, *keys: Column | str) -> Column:
    """A uniform draw in [0, 1) that is a function of ``seed`` and the row's ``keys`` only.

    ``F.rand(seed)`` seeds each partition with ``seed + partition index`` and draws in row order,
    so the same data split differently (a cluster's executors, another ``shuffle.partitions``)
    samples different rows. Hashing the row's own key gives every layout the same sample.
    """
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(F.lit(seed), *keys), F.lit(_TWO_53)) / F.lit(float(_TWO_53))


def _keyed(example_id: Column, at: Column) -> list[Column | str]:
    """The columns every example row starts with: its id, the Feast join keys, its instant."""
    first, *join_keys, instant = KEY_COLUMNS
    return [example_id.alias(first), *join_keys, at.alias(instant), "timezone", "request_id"]


def _with_request(rows: DataFrame, users: DataFrame) -> DataFrame:
    """Request context: the user's home (impressions do not log a position) at the label instant."""
    from pyspark.sql import functions as F

    return rows.join(users, "user_id", "left").select(
        *rows.columns,
        "user_metro",
        F.col("home_lat").alias("request_lat"),
        F.col("home_lng").alias("request_lng"),
        F.unix_timestamp("event_timestamp").cast("double").alias("request_ts"),
        _utc_offset_minutes(F.col("event_timestamp"), F.col("timezone")).alias("request_utc_offset_min"),
    )


def _outcomes(spark: SparkSession, settings: Settings, as_of: datetime) -> DataFrame:
    """(user, event) -> attended, rating, as observed by ``as_of`` (for grades, not for labels)."""
    from pyspark.sql import functions as F

    cut = F.lit(_naive(as_of))
    attendance = (
        _silver(spark, settings, "attendance")
        .filter(F.col("observed_at") < cut)
        .select("user_id", "event_id", F.col("attended").cast("int").alias("attended"))
    )
    ratings = (
        _silver(spark, settings, "ratings")
        .filter(F.col("rated_at") < cut)
        .select("user_id", "event_id", F.col("rating").cast("int").alias("rating"))
    )
    return attendance.join(ratings, ["user_id", "event_id"], "full_outer")


def _users(spark: SparkSession, settings: Settings) -> DataFrame:
    from pyspark.sql import functions as F

    users = _silver(spark, settings, "users")
    return users.select("user_id", F.col("metro").alias("user_metro"), "home_lat", "home_lng")


def _finish(rows: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    out = rows
    for name in META_COLUMNS:
        if name not in out.columns:
            out = out.withColumn(name, F.lit(None))
    return out.select(
        *KEY_COLUMNS,
        *REQUEST_COLUMNS,
        F.col("request_id").cast("string"),
        F.col("label").cast("int"),
        F.col("is_injected").cast("int"),
        F.col("is_exploration").cast("int"),
        F.col("exploration_kind").cast("string"),
        F.col("rsvped").cast("int"),
        F.col("attended").cast("int"),
        F.col("rating").cast("int"),
        F.col("event_created_ts").cast("long"),
        F.col("user_metro").cast("string"),
    )


def rsvp_examples(
    spark: SparkSession,
    settings: Settings,
    start: datetime,
    as_of: datetime,
    train_end: datetime,
    negative_keep_rate: float,
    injected_negative_share: float,
    seed: int,
) -> tuple[DataFrame, ExampleCounts]:
    """Impressions served in [start, as_of - 1 day) labelled by a same-day RSVP, plus injections.

    The last day before ``as_of`` is left out: its same-day label is not complete yet. Before
    ``train_end`` natural negatives are kept at ``negative_keep_rate`` and never-impressed random
    candidates are added so that they make up ``injected_negative_share`` of the negatives there
    (0.2 in the design: 25 injected per 100 natural negatives).
    """
    from pyspark.sql import functions as F

    label_cut = as_of - RSVP_LABEL_WINDOW
    impressions = _silver(spark, settings, "impressions").filter(
        (F.col("served_at") >= F.lit(_naive(start))) & (F.col("served_at") < F.lit(_naive(label_cut)))
    )
    rsvps = _silver(spark, settings, "rsvps").filter(F.col("rsvp_at") < F.lit(_naive(as_of)))
    events = event_context(spark, settings, as_of)
    users = _users(spark, settings)

    first_rsvp = rsvps.groupBy("user_id", "event_id").agg(F.min("rsvp_at").alias("rsvp_at"))
    joined = (
        impressions.join(first_rsvp, ["user_id", "event_id"], "left")
        .withColumn(
            "label",
            (
                F.col("rsvp_at").isNotNull()
                & (F.col("rsvp_at") >= F.col("served_at"))
                & (F.col("rsvp_at") < F.col("served_at") + F.expr("INTERVAL 1 DAY"))
            ).cast("int"),
        )
        .withColumn("rsvped", F.col("label"))
        # Left: impressions of events unknown at as_of are counted below (in the same pass as the
        # labels), then left out.
        .join(events, "event_id", "left")
        .join(_outcomes(spark, settings, as_of), ["user_id", "event_id"], "left")
        .select(
            *_keyed(F.col("impression_id"), F.col("served_at")),
            "label",
            F.lit(0).alias("is_injected"),
            F.col("is_exploration").cast("int").alias("is_exploration"),
            "exploration_kind",
            "rsvped",
            # Outcomes only count for an RSVP this impression led to.
            F.when(F.col("label") == 1, F.coalesce("attended", F.lit(0))).otherwise(0).alias("attended"),
            F.when(F.col("label") == 1, F.col("rating")).alias("rating"),
            "is_free",
            "event_created_ts",
            F.col("start_ts"),
        )
    ).cache()
    known = F.col("event_created_ts").isNotNull()  # the event was in gold by as_of
    labelled = joined.filter(known)
    in_training = F.col("event_timestamp") < F.lit(_naive(train_end))
    negative = F.col("label") == 0
    dropped = in_training & negative & (_uniform(seed, "example_id") >= F.lit(negative_keep_rate))
    # One pass over the cached rows for every count (a job each cost up to 4 s here).
    tally = joined.agg(
        F.count(F.when(~known, 1)).alias("unmatched"),
        F.count(F.when(known & (F.col("label") == 1), 1)).alias("positives"),
        F.count(F.when(known & negative, 1)).alias("negatives"),
        F.count(F.when(known & in_training, 1)).alias("training"),
        F.count(F.when(known & in_training & negative, 1)).alias("training_negatives"),
        F.count(F.when(known & in_training & negative & ~dropped, 1)).alias("kept_negatives"),
    ).first()
    assert tally is not None
    positives, negatives = int(tally["positives"]), int(tally["negatives"])
    training_negatives, kept_negatives = int(tally["training_negatives"]), int(tally["kept_negatives"])
    kept = labelled.filter(~dropped) if negative_keep_rate < 1.0 else labelled

    injected = _injected_negatives(
        labelled.filter(in_training),
        int(tally["training"]),
        impressions,
        events,
        rsvps,
        users,
        injected_negative_share,
        kept_negatives,
        seed,
    ).cache()
    n_injected = injected.count()

    rows = _with_request(kept.unionByName(injected, allowMissingColumns=True), users)
    counts = ExampleCounts(
        natural_positives=positives,
        natural_negatives=negatives,
        training_negatives=training_negatives,
        kept_negatives=kept_negatives,
        injected_negatives=n_injected,
        dropped={"event_unknown_at_as_of": int(tally["unmatched"])},
    )
    return _finish(rows), counts


def _injected_negatives(
    labelled: DataFrame,
    total: int,
    shown: DataFrame,
    events: DataFrame,
    rsvps: DataFrame,
    users: DataFrame,
    share: float,
    negatives: int,
    seed: int,
) -> DataFrame:
    """Random never-impressed candidates from the user's metro, live at the impression instant.

    For a sample of impressions, draw a few events of the user's metro uniformly and keep the
    first that was live then (created, not started, not cancelled) and that the user was never
    shown (``shown``: every impression in the window) and never RSVPed to. The sample is sized so
    injections make up ``share`` of the ``negatives`` they join; ``total`` counts ``labelled``.
    """
    from pyspark.sql import functions as F

    spark = labelled.sparkSession
    if share <= 0 or negatives == 0:
        return spark.createDataFrame([], labelled.schema)
    wanted = negatives * share / (1.0 - share)
    # Some sampled impressions find no live unseen event in their draws; sample half again as many
    # as wanted and trim below. Where fewer hit (a catalog mostly past, or mostly seen), a second
    # pass is sized by this one's hit rate. Every sampled impression costs _DRAWS draws through a
    # join with everything shown: on the 1M-impression history (99% hit) sampling 4x the wanted
    # took 16-26 s here, 1.5x 7-8 s.
    fraction = min(1.0, 1.5 * wanted / max(total, 1))
    # Sorted (by event_id first), so a draw's index names the same event however Spark grouped them.
    catalog = events.groupBy("metro").agg(
        F.array_sort(
            F.collect_list(
                F.struct(
                    "event_id",
                    "organizer_id",
                    "venue_id",
                    "series_id",
                    "market_key",
                    "is_free",
                    "event_created_ts",
                    "start_ts",
                    "cancelled_ts",
                    "timezone",
                )
            )
        ).alias("catalog")
    )
    seen = shown.select("user_id", "event_id").union(rsvps.select("user_id", "event_id")).distinct()
    first = _first_fresh_draws(labelled, users, catalog, seen, fraction, seed).cache()
    found = first.count()
    log.info(
        "injected negatives: %d wanted; %.1f%% of impressions sampled found %d live unseen candidates",
        round(wanted),
        100 * fraction,
        found,
    )
    if found < wanted and fraction < 1.0:
        # Too few draws hit a live, unseen event: sample more impressions, sized by this pass's hit
        # rate (a superset of this pass's sample, and still a function of the data alone).
        fraction = min(1.0, fraction * 1.5 * wanted / max(found, 1))
        first.unpersist()
        first = _first_fresh_draws(labelled, users, catalog, seen, fraction, seed)
        log.info("injected negatives: sampling %.1f%% of impressions instead", 100 * fraction)
    trimmed = first.orderBy(_uniform(seed + 2, "example_id"), "example_id").limit(int(round(wanted)))
    return trimmed.select(
        *_keyed(F.concat(F.col("example_id"), F.lit("#inj")), F.col("event_timestamp")),
        F.lit(0).alias("label"),
        F.lit(1).alias("is_injected"),
        F.lit(0).alias("is_exploration"),
        F.lit(None).cast("string").alias("exploration_kind"),
        F.lit(0).alias("rsvped"),
        F.lit(0).alias("attended"),
        F.lit(None).cast("int").alias("rating"),
        "is_free",
        "event_created_ts",
        "start_ts",
    )


def _first_fresh_draws(
    labelled: DataFrame, users: DataFrame, catalog: DataFrame, seen: DataFrame, fraction: float, seed: int
) -> DataFrame:
    """For each sampled impression, the first of ``_DRAWS`` uniform catalog draws live and unseen."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    sources = (
        labelled.filter(_uniform(seed, "example_id") < F.lit(fraction))
        .select("example_id", "user_id", "event_timestamp", "request_id", "is_exploration")
        .join(users.select("user_id", F.col("user_metro").alias("metro")), "user_id")
        .join(catalog, "metro")
    )
    draws = sources.select(
        "*",
        F.explode(F.sequence(F.lit(1), F.lit(_DRAWS))).alias("draw"),
    ).withColumn(
        "candidate",
        F.element_at(
            "catalog",
            (F.floor(_uniform(seed + 1, "example_id", "draw") * F.size("catalog")) + 1).cast("int"),
        ),
    )
    t = F.unix_timestamp("event_timestamp")
    c = F.col("candidate")
    live = (
        draws.filter(
            (c.event_created_ts <= t) & (c.start_ts > t) & (c.cancelled_ts.isNull() | (c.cancelled_ts > t))
        )
        .select("*", "candidate.*")
        .drop("candidate", "catalog")
    )
    fresh = live.join(seen, ["user_id", "event_id"], "left_anti")
    return fresh.withColumn(
        "_n", F.row_number().over(Window.partitionBy("example_id").orderBy("draw"))
    ).filter("_n = 1")


def attend_examples(
    spark: SparkSession,
    settings: Settings,
    start: datetime,
    as_of: datetime,
    label_delay: timedelta,
) -> tuple[DataFrame, ExampleCounts]:
    """RSVPs made in [start, as_of - label_delay), labelled by attendance observed by ``as_of``.

    An RSVP whose attendance was not observed yet is left out (counted in ``dropped``): calling it
    a no-show would teach the model that late labels mean flakes.
    """
    from pyspark.sql import functions as F

    rsvps = _silver(spark, settings, "rsvps").filter(
        (F.col("rsvp_at") >= F.lit(_naive(start))) & (F.col("rsvp_at") < F.lit(_naive(as_of - label_delay)))
    )
    events = event_context(spark, settings, as_of)
    joined = (
        rsvps.join(events, "event_id", "inner")
        .join(_outcomes(spark, settings, as_of), ["user_id", "event_id"], "left")
        .select(
            *_keyed(F.col("rsvp_id"), F.col("rsvp_at")),
            F.col("attended").alias("label"),
            F.lit(0).alias("is_injected"),
            F.lit(0).alias("is_exploration"),
            F.lit(1).alias("rsvped"),
            "attended",
            "rating",
            "is_free",
            "event_created_ts",
        )
    ).cache()
    pending = joined.filter(F.col("label").isNull()).count()
    labelled = joined.filter(F.col("label").isNotNull())
    positives = labelled.filter("label = 1").count()
    negatives = labelled.filter("label = 0").count()
    counts = ExampleCounts(
        natural_positives=positives,
        natural_negatives=negatives,
        training_negatives=negatives,
        kept_negatives=negatives,
        injected_negatives=0,
        dropped={"attendance_not_observed": pending},
    )
    return _finish(_with_request(labelled, _users(spark, settings))), counts
