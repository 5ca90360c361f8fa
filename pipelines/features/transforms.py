"""Pure Spark transforms from silver tables to gold feature rows.

Every output row carries ``event_timestamp``: the instant its value became known, i.e. the time
of the newest input that produced it (an RSVP's ``rsvp_at``, an attendance's ``observed_at``, ...).
Values are running aggregates over a per-entity stream ordered by that instant, so one pass
yields the whole history a point-in-time join needs, and no row can see an input from its future.

Shrinkage priors are "as of the previous UTC day" (``daily_priors``), and so are the pseudocounts
fitted by empirical Bayes (``daily_pseudocounts``): a row's value depends only on what was known
before its own UTC day began (and on its entity's stream up to the row). So an hourly run that
recomputes the last days writes the values it wrote before, unless late data changed them; a fit
over everything known at the run's end would move every recent row each hour, and moving a row
stamps it with the run's end, hiding it from every label instant before that.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pandas as pd  # module level: pandas_udf resolves the type hints against these globals
from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from contracts.geo import EARTH_RADIUS_KM
from contracts.landing import CATEGORIES
from pipelines.features.shrinkage import MAX_PSEUDOCOUNT, pseudocount_from_sums

log = logging.getLogger(__name__)

# Onboarding turns "0 observations into ~5": picked categories count as this many pseudo-RSVPs.
ONBOARDING_PSEUDO_RSVPS = 5.0
# Travel tolerance shrinks toward the metro's typical (geometric-mean) attended distance, and
# harder upward than downward: an over-long recommendation (a no-show, an empty seat) costs more
# than an under-ambitious one. A cost-matrix decision, not a fitted one.
TRAVEL_PSEUDOCOUNT_DOWN = 3.0
TRAVEL_PSEUDOCOUNT_UP = 8.0
# Above 90% full, fill rate mostly says "about to disappear" (design: sold-out failure mode).
FILL_DAMP_START = 0.9
FILL_DAMP_SLOPE = 0.25
SERIES_HALF_LIFE_INSTANCES = 8.0
TRAVEL_RESOLUTION = 7  # res-7 cells carry travel time (design: ~5 km is honest for one estimate)
OVERALL_FOLLOW_THROUGH = 0.62  # design: 62% of RSVPs become attendance
METRO_PRIOR_M = 20.0
# A row stamped at its fact's own instant (a profile version, an event's creation) can hold a
# value delivered later, with the next hour's export. Such rows carry the newest delivery behind
# their value here, so their ``created`` is no earlier than the hourly run that could write it
# (``jobs.created_stamp``); the column is not written to gold.
KNOWN_BY = "_known_by"


def haversine_km(lat1: Column, lng1: Column, lat2: Column, lng2: Column) -> Column:
    """Great-circle distance; collapses two positions into the one number a tree can split on."""
    dlat = F.radians(lat2 - lat1)
    dlng = F.radians(lng2 - lng1)
    a = F.sin(dlat / 2) ** 2 + F.cos(F.radians(lat1)) * F.cos(F.radians(lat2)) * F.sin(dlng / 2) ** 2
    return 2 * EARTH_RADIUS_KM * F.asin(F.sqrt(a))


def local_hour_of_week(instant: Column, zone: Column) -> Column:
    """Venue-local hour of week, Monday 00:00 = 0 .. Sunday 23:00 = 167."""
    local = F.from_utc_timestamp(instant, zone)
    monday_based_day = (F.dayofweek(local) + 5) % 7
    return (monday_based_day * 24 + F.hour(local)).cast("long")


def _stream_window(keys: Sequence[str]) -> WindowSpec:
    # A RANGE frame includes every input at the same instant, so all rows of one instant carry
    # the state after all of them (a ROWS frame would split ties arbitrarily).
    return (
        Window.partitionBy(*keys)
        .orderBy("event_timestamp")
        .rangeBetween(Window.unboundedPreceding, Window.currentRow)
    )


def _last_row_per_instant(df: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Several inputs at one instant produce one row (they all carry the same running state)."""
    w = Window.partitionBy(*keys, "event_timestamp").orderBy(F.col("_order").desc())
    return df.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn", "_order")


def exact_sum(values: Column, window: WindowSpec | None = None) -> Column:
    """The sum of doubles that are not whole numbers, added as decimals (12 places): a double sum
    depends on the order Spark adds the rows in, which differs between a local session and a
    cluster, and between runs among rows tied in a window's order (a decayed series weight, a log
    distance, a squared rate), so a feature would move in its last digit."""
    total = F.sum(values.cast("decimal(38,12)"))
    return (total if window is None else total.over(window)).cast("double")


def known_at(instant: str) -> Column:
    """When a silver row's fact became known: its own instant, or its delivery hour if later.

    A fact delivered late (an impression logged at 23:50, delivered in the next day's first hour)
    was not known before its delivery, and an hourly run could not have read it earlier.
    """
    return F.greatest(F.col(instant), delivered_at())


def delivered_at() -> Column:
    """The start of the landing hour a silver or bronze row was delivered in (``_delivered``)."""
    return F.to_timestamp("_delivered", "yyyy-MM-dd'T'HH")


def daily_priors(
    facts: DataFrame, group: Sequence[str], sums: dict[str, Column], days: DataFrame
) -> DataFrame:
    """Per group and UTC day, sums over all facts strictly before that day (a leak-free prior).

    ``facts`` has ``event_timestamp``; ``days`` is a one-column (``day``) calendar to cover.
    """
    per_day = facts.groupBy(*group, F.to_date("event_timestamp").alias("day")).agg(
        *[expr.alias(name) for name, expr in sums.items()]
    )
    groups = facts.select(*group).distinct() if group else None
    calendar = groups.crossJoin(days) if groups is not None else days
    dense = calendar.join(per_day, [*group, "day"], "left").fillna(0, subset=list(sums))
    before = Window.partitionBy(*group).orderBy("day").rowsBetween(Window.unboundedPreceding, -1)
    return dense.select(
        *group, "day", *[F.coalesce(F.sum(name).over(before), F.lit(0.0)).alias(name) for name in sums]
    )


def calendar(start_day: Column | str, end_day: Column | str, spark_df: DataFrame) -> DataFrame:
    """One row per UTC day in [start_day, end_day], built from any frame's session."""
    return spark_df.sparkSession.range(1).select(
        F.explode(F.sequence(F.to_date(F.lit(start_day)), F.to_date(F.lit(end_day)))).alias("day")
    )


def before_each_day(states: DataFrame, keys: Sequence[str], days: DataFrame) -> DataFrame:
    """Each key's latest state strictly before each UTC midnight of ``days``, tagged ``day``.

    ``states`` has one row per key and ``event_timestamp`` (a running state). A row is the latest
    one before midnight d for every d after its instant, up to its key's next row: one exploded
    row per key and day, the population a day's fit sees, none of it from that day or later.
    """
    following = Window.partitionBy(*keys).orderBy("event_timestamp")
    first = F.date_add(F.to_date("event_timestamp"), 1)
    last = F.coalesce(F.to_date(F.lead("event_timestamp").over(following)), F.col("_last_day"))
    return (
        states.crossJoin(days.agg(F.max("day").alias("_last_day")))
        .withColumn("_first", first)
        .withColumn("_last", last)
        .where(F.col("_first") <= F.col("_last"))
        .withColumn("day", F.explode(F.sequence("_first", "_last")))
        .drop("_first", "_last", "_last_day")
    )


# A fit's four per-row contributions: groups (how many groups the row is; 0 for none with n > 0),
# trials (sum n), successes (sum k) and squares (sum k^2 / n); see shrinkage.pseudocount_from_sums.
Moments = tuple[Column, Column, Column, Column]


def binomial_moments(k: Column, n: Column) -> Moments:
    """A row that is one group of ``n`` trials with ``k`` successes (none when n is 0)."""
    has_n = n > 0
    return F.when(has_n, 1.0).otherwise(0.0), n.cast("double"), k.cast("double"), F.when(has_n, k**2 / n)


def daily_pseudocounts(
    population: DataFrame, fits: dict[str, Moments], empty_prior: float = 0.0
) -> tuple[DataFrame, dict[str, float]]:
    """Per ``day`` of ``population``, each fit's empirical-Bayes pseudocount and pooled rate.

    One aggregation for all ``fits``. Counts are whole numbers and sum exactly as doubles;
    squares are summed as decimals: no order of rows changes a fit, so a local session and a
    cluster agree. Returns a (day, <name>, <name>_prior) frame, the prior being the day's pooled
    k / n (``empty_prior`` before any trial), and each fit's latest day for the run's log. A day
    missing from the frame had no population: nothing to fit.
    """
    sums = [
        agg
        for name, (groups, trials, successes, squares) in fits.items()
        for agg in (
            F.sum(groups).alias(f"{name}_g"),
            F.sum(trials).alias(f"{name}_n"),
            F.sum(successes).alias(f"{name}_k"),
            exact_sum(squares).alias(f"{name}_q"),
        )
    ]
    totals = population.groupBy("day").agg(*sums).toPandas().fillna(0.0).sort_values("day")
    out = pd.DataFrame({"day": totals["day"]})
    for name in fits:
        g, n, k, q = (totals[f"{name}_{x}"] for x in "gnkq")
        out[name] = [pseudocount_from_sums(*day) for day in zip(g, n, k, q, strict=True)]
        out[f"{name}_prior"] = (k / n.where(n > 0)).fillna(empty_prior).astype(float)
    latest = {name: float(out[name].iloc[-1]) if len(out) else MAX_PSEUDOCOUNT for name in fits}
    schema = ", ".join(["day date", *(f"{c} double" for c in out.columns[1:])])
    return F.broadcast(population.sparkSession.createDataFrame(out, schema=schema)), latest


def h3_cell(lat: Column, lng: Column, resolution: int) -> Column:
    """The H3 cell id (hex string) of each point, computed by the h3 library on the executors."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")  # type: ignore[call-overload]
    def cell(lats: pd.Series, lngs: pd.Series) -> pd.Series:
        import h3

        return pd.Series(
            [
                None if pd.isna(a) or pd.isna(b) else h3.latlng_to_cell(a, b, resolution)
                for a, b in zip(lats, lngs, strict=True)
            ]
        )

    return cell(lat, lng)


def event_context(events: DataFrame, venues: DataFrame) -> DataFrame:
    """Events with their venue's metro and position (the facts other features hang on)."""
    v = venues.select("venue_id", "metro", F.col("lat").alias("venue_lat"), F.col("lng").alias("venue_lng"))
    return events.join(v, "venue_id", "left")


# --------------------------------------------------------------------------------------- users


def user_features(
    profiles: DataFrame,
    rsvps: DataFrame,
    attendance: DataFrame,
    events: DataFrame,
    venues: DataFrame,
    days: DataFrame,
) -> tuple[DataFrame, dict[str, float]]:
    """gold.user_features rows and the fitted pseudocounts.

    ``profiles`` holds every version of every user (one row per user and ``updated_at``, as bronze
    keeps them): each RSVP and attendance sees the profile as it stood then. With only the newest
    version, a profile update delivered today erased the user's rows since the previous version
    (no metro yet) and moved every day's fit after it. RSVPs and attendance count from when they
    became known (``known_at``): an attendance delivered hours late changes the user's state from
    its delivery on, not in the past (where it moved every row of the days after it, through
    their fits). A profile edit delivered late still moves the rows after its own instant.
    """
    ctx = event_context(events, venues).select("event_id", "category", "venue_lat", "venue_lng")
    # A profile counts from its own instant, not its delivery: a user delivered with the first
    # load of a history keeps the row of their sign-up (and leaves the online store after the
    # view's TTL when nothing else happens), as serving's fallback to the bare profile expects.
    profile = profiles.select(
        "user_id",
        F.col("updated_at").alias("event_timestamp"),
        F.lit(0).alias("_order"),
        "metro",
        "home_lat",
        "home_lng",
        F.coalesce(F.col("onboarding_categories"), F.array().cast("array<string>")).alias("onboarding"),
        delivered_at().alias(KNOWN_BY),
    )
    rsvp_rows = rsvps.join(ctx, "event_id").select(
        "user_id", known_at("rsvp_at").alias("event_timestamp"), F.lit(1).alias("_order"), "category"
    )
    att_rows = attendance.join(ctx, "event_id").select(
        "user_id",
        known_at("observed_at").alias("event_timestamp"),
        F.lit(2).alias("_order"),
        F.col("attended").cast("int").alias("attended"),
        "venue_lat",
        "venue_lng",
    )
    stream = profile.unionByName(rsvp_rows, allowMissingColumns=True).unionByName(
        att_rows, allowMissingColumns=True
    )
    w = _stream_window(["user_id"])
    # Cached: the user rows and both metro priors below read it.
    filled = stream.select(
        "user_id",
        "event_timestamp",
        "_order",
        *[
            F.last(c, ignorenulls=True).over(w).alias(c)
            for c in ("metro", "home_lat", "home_lng", "onboarding")
        ],
        F.max(KNOWN_BY).over(w).alias(KNOWN_BY),
        "category",
        "attended",
        "venue_lat",
        "venue_lng",
    ).cache()
    dist = haversine_km(F.col("home_lat"), F.col("home_lng"), F.col("venue_lat"), F.col("venue_lng"))
    running = filled.withColumn("_att_dist", F.when(F.col("attended") == 1, dist)).select(
        "user_id",
        "event_timestamp",
        "_order",
        "metro",
        "home_lat",
        "home_lng",
        "onboarding",
        KNOWN_BY,
        F.count("category").over(w).alias("history_depth"),
        *[F.sum(F.when(F.col("category") == c, 1).otherwise(0)).over(w).alias(f"_n_{c}") for c in CATEGORIES],
        F.count("attended").over(w).alias("_obs"),
        F.coalesce(F.sum("attended").over(w), F.lit(0)).alias("attended_count"),
        F.percentile_approx("_att_dist", 0.9).over(w).alias("_p90_km"),
        F.count("_att_dist").over(w).alias("_n_dist"),
    )
    # Cached: the pseudocount fit below and the table itself both read every row.
    rows = _last_row_per_instant(running, ["user_id"]).filter(F.col("metro").isNotNull()).cache()

    # Leak-free priors per metro (the user's metro and home when the fact happened): follow-through,
    # category shares, typical attended distance.
    facts = filled.filter(F.col("metro").isNotNull())
    att_facts = facts.filter("_order = 2").select(
        "metro",
        "event_timestamp",
        F.col("attended").cast("double").alias("a"),
        F.when(F.col("attended") == 1, F.log1p(dist)).alias("logd"),
    )
    att_prior = daily_priors(
        att_facts,
        ["metro"],
        {
            "p_att_k": F.sum("a"),
            "p_att_n": F.count("a").cast("double"),
            "p_logd": exact_sum(F.col("logd")),
            "p_logd_n": F.count("logd").cast("double"),
        },
        days,
    )
    cat_prior = daily_priors(
        facts.filter("_order = 1"),
        ["metro"],
        {
            "p_total": F.count("*").cast("double"),
            **{f"p_{c}": F.sum(F.when(F.col("category") == c, 1.0).otherwise(0.0)) for c in CATEGORIES},
        },
        days,
    )

    # Pseudocounts fitted by empirical Bayes, per UTC day, on every user's latest state before it.
    population = before_each_day(rows, ["user_id"], days)
    has_rsvps = F.col("history_depth") > 0
    # Affinity: every (user, category) pair is a group of history_depth trials.
    n_cat = float(len(CATEGORIES))
    fits, latest = daily_pseudocounts(
        population,
        {
            "m_att": binomial_moments(F.col("attended_count"), F.col("_obs")),
            "m_aff": (
                F.when(has_rsvps, n_cat).otherwise(0.0),
                n_cat * F.col("history_depth").cast("double"),
                sum((F.col(f"_n_{c}") for c in CATEGORIES), F.lit(0.0)),
                F.when(
                    has_rsvps,
                    sum((F.col(f"_n_{c}") ** 2 for c in CATEGORIES), F.lit(0.0)) / F.col("history_depth"),
                ),
            ),
        },
    )
    fitted = {"user_attend_rate_m": latest["m_att"], "user_affinity_m": latest["m_aff"]}
    log.info("user features pseudocounts as of the last day %s", fitted)
    m_att = F.coalesce(F.col("m_att"), F.lit(MAX_PSEUDOCOUNT))
    m_aff = F.coalesce(F.col("m_aff"), F.lit(MAX_PSEUDOCOUNT))

    joined = (
        rows.withColumn("day", F.to_date("event_timestamp"))
        .join(att_prior, ["metro", "day"], "left")
        .join(cat_prior, ["metro", "day"], "left")
        .join(fits.select("day", "m_att", "m_aff"), "day", "left")
    )
    # The metro prior is itself shrunk toward the design's overall funnel (62% of RSVPs attend),
    # so a metro's first few observations cannot pin every sparse user to 0 or 1.
    att_prior_rate = (F.coalesce("p_att_k", F.lit(0.0)) + METRO_PRIOR_M * OVERALL_FOLLOW_THROUGH) / (
        F.coalesce("p_att_n", F.lit(0.0)) + METRO_PRIOR_M
    )
    typical_km = F.when(F.col("p_logd_n") > 0, F.expm1(F.col("p_logd") / F.col("p_logd_n"))).otherwise(
        F.lit(8.0)
    )
    n_onb = F.size("onboarding").cast("double")
    onb_weight = F.when(n_onb > 0, F.lit(ONBOARDING_PSEUDO_RSVPS) / n_onb).otherwise(F.lit(0.0))
    aff_den = F.col("history_depth") + F.when(n_onb > 0, ONBOARDING_PSEUDO_RSVPS).otherwise(0.0) + m_aff
    aff_cols = []
    for c in CATEGORIES:
        share = F.when(F.col("p_total") > 0, F.col(f"p_{c}") / F.col("p_total")).otherwise(
            1.0 / len(CATEGORIES)
        )
        onb = F.when(F.array_contains("onboarding", c), onb_weight).otherwise(0.0)
        aff_cols.append(((F.col(f"_n_{c}") + onb + m_aff * share) / aff_den).alias(f"aff_{c}"))
    p90 = F.coalesce(F.col("_p90_km"), typical_km)
    m_travel = F.when(p90 > typical_km, TRAVEL_PSEUDOCOUNT_UP).otherwise(TRAVEL_PSEUDOCOUNT_DOWN)
    out = joined.select(
        "user_id",
        "event_timestamp",
        "metro",
        "home_lat",
        "home_lng",
        h3_cell(F.col("home_lat"), F.col("home_lng"), TRAVEL_RESOLUTION).alias("home_cell7"),
        F.col("history_depth").cast("long"),
        F.col("attended_count").cast("long"),
        ((F.col("attended_count") + m_att * att_prior_rate) / (F.col("_obs") + m_att)).alias(
            "attend_rate_shrunk"
        ),
        ((F.col("_n_dist") * p90 + m_travel * typical_km) / (F.col("_n_dist") + m_travel)).alias(
            "travel_tolerance_km"
        ),
        F.when(n_onb > 0, 1).otherwise(0).cast("long").alias("onboarded"),
        *aff_cols,
        KNOWN_BY,
    )
    return out, fitted


# -------------------------------------------------------------------------------------- events


def event_features(events: DataFrame, venues_with_cells: DataFrame, holidays: DataFrame) -> DataFrame:
    """gold.event_features: what is known about an event when it is created.

    ``venues_with_cells`` has venue_id, metro, lat, lng, cell5, cell7; ``holidays`` has metro, day.
    Attributes are taken as of the event's latest version and stamped with its creation instant:
    corrections rewrite the row rather than adding a history.
    """
    v = venues_with_cells.select(
        "venue_id",
        "metro",
        F.col("lat").alias("venue_lat"),
        F.col("lng").alias("venue_lng"),
        "cell5",
        "cell7",
    )
    e = events.join(v, "venue_id", "left")
    local_day = F.to_date(F.from_utc_timestamp("start_at", F.col("timezone")))
    nearest = (
        e.select("event_id", "metro", local_day.alias("local_day"))
        .join(holidays.withColumnRenamed("day", "holiday"), "metro", "left")
        .groupBy("event_id")
        .agg(F.min(F.abs(F.datediff("holiday", "local_day"))).alias("days_to_nearest_holiday"))
    )
    how = local_hour_of_week(F.col("start_at"), F.col("timezone"))
    return e.join(nearest, "event_id", "left").select(
        "event_id",
        F.col("created_at").alias("event_timestamp"),
        "organizer_id",
        "venue_id",
        "series_id",
        "metro",
        "category",
        F.col("is_free").cast("long").alias("is_free"),
        F.col("price_cents").cast("long"),
        F.col("capacity").cast("long"),
        F.unix_timestamp("start_at").cast("double").alias("start_ts"),
        how.alias("hour_of_week"),
        F.weekofyear(F.from_utc_timestamp("start_at", F.col("timezone"))).cast("long").alias("week_of_year"),
        F.coalesce(F.col("days_to_nearest_holiday"), F.lit(365))
        .cast("long")
        .alias("days_to_nearest_holiday"),
        "venue_lat",
        "venue_lng",
        "cell5",
        "cell7",
        F.concat_ws("|", "metro", "category", how.cast("string")).alias("market_key"),
        delivered_at().alias(KNOWN_BY),
    )


def damp_fill_rate(fill: Column) -> Column:
    return F.when(
        fill > FILL_DAMP_START, F.lit(FILL_DAMP_START) + (fill - FILL_DAMP_START) * FILL_DAMP_SLOPE
    ).otherwise(fill)


def event_dynamics(events: DataFrame, rsvps: DataFrame, snapshots: DataFrame) -> DataFrame:
    """gold.event_dynamics: RSVP count, damped fill rate and 6-hour RSVP velocity over time.

    A row at creation (all zero), at every RSVP and capacity snapshot, and 6 hours after every
    RSVP, so a point-in-time lookup sees the velocity decay instead of a stale burst. RSVPs and
    snapshots count from when they became known (``known_at``): one delivered a day late raises
    the count from its delivery on, as the online store saw it, never in the hours before.
    ``events`` has one row per event, its ``_delivered`` being its first version's: the creation
    row is known from then (``KNOWN_BY``), whatever a later correction changed.
    """
    created = events.select(
        "event_id",
        F.col("created_at").alias("event_timestamp"),
        F.lit(0).alias("_order"),
        "capacity",
        delivered_at().alias(KNOWN_BY),
    )
    rsvp = rsvps.select("event_id", known_at("rsvp_at").alias("event_timestamp"), F.lit(1).alias("_order"))
    expiry = rsvp.select(
        "event_id",
        (F.col("event_timestamp") + F.expr("INTERVAL 6 HOURS")).alias("event_timestamp"),
        F.lit(2).alias("_order"),
    )
    snap = snapshots.select(
        "event_id",
        known_at("snapshot_at").alias("event_timestamp"),
        F.lit(3).alias("_order"),
        F.col("seats_taken").alias("_seats"),
        F.col("capacity").alias("_snap_capacity"),
    )
    stream = (
        created.unionByName(rsvp, allowMissingColumns=True)
        .unionByName(expiry, allowMissingColumns=True)
        .unionByName(snap, allowMissingColumns=True)
        .withColumn("_is_rsvp", F.when(F.col("_order") == 1, 1).otherwise(0))
        .withColumn("_t", F.unix_timestamp("event_timestamp"))
    )
    w = _stream_window(["event_id"])
    six_hours = (
        Window.partitionBy("event_id").orderBy("_t").rangeBetween(-6 * 3600 + 1, 0)
    )  # RSVPs in (t - 6h, t]
    running = stream.select(
        "event_id",
        "event_timestamp",
        "_order",
        F.sum("_is_rsvp").over(w).alias("rsvp_count"),
        F.sum("_is_rsvp").over(six_hours).alias("_rsvps_6h"),
        F.last("_seats", ignorenulls=True).over(w).alias("_seats"),
        F.coalesce(
            F.last("_snap_capacity", ignorenulls=True).over(w), F.last("capacity", ignorenulls=True).over(w)
        ).alias("_cap"),
        KNOWN_BY,
    )
    taken = F.greatest(F.coalesce(F.col("_seats"), F.lit(0)), F.col("rsvp_count"))
    return _last_row_per_instant(running, ["event_id"]).select(
        "event_id",
        "event_timestamp",
        F.col("rsvp_count").cast("long"),
        damp_fill_rate(F.least(taken / F.col("_cap"), F.lit(1.0))).alias("fill_rate"),
        (F.col("_rsvps_6h") / 6.0).alias("rsvp_velocity_6h"),
        KNOWN_BY,
    )


# ------------------------------------------------------------- persistent entities events inherit


def _resolved_rsvps(attendance: DataFrame, ratings: DataFrame, ctx: DataFrame) -> DataFrame:
    """One stream of outcome facts per event: attendance observations and ratings, each at the
    instant it became known (``known_at``: a check-in delivered hours late counts from then)."""
    att = attendance.join(ctx, "event_id").select(
        "event_id",
        "organizer_id",
        "venue_id",
        "series_id",
        "start_at",
        known_at("observed_at").alias("event_timestamp"),
        F.lit(0).alias("_order"),
        F.col("attended").cast("double").alias("_att"),
    )
    rat = ratings.join(ctx, "event_id").select(
        "event_id",
        "organizer_id",
        "venue_id",
        "series_id",
        "start_at",
        known_at("rated_at").alias("event_timestamp"),
        F.lit(1).alias("_order"),
        F.col("rating").cast("double").alias("_rating"),
    )
    return att.unionByName(rat, allowMissingColumns=True)


def entity_outcome_stats(
    attendance: DataFrame, ratings: DataFrame, events: DataFrame, key: str, prefix: str, days: DataFrame
) -> tuple[DataFrame, dict[str, float]]:
    """Organizer or venue stats: follow-through, no-show share, ratings — shrunk by fitted m.

    m and the pooled follow-through it shrinks toward are fitted per UTC day on every entity's
    outcomes before that day (``daily_pseudocounts``); before any, the design's 62%.
    """
    ctx = events.select("event_id", "organizer_id", "venue_id", "series_id", "start_at")
    facts = _resolved_rsvps(attendance, ratings, ctx).filter(F.col(key).isNotNull())
    w = _stream_window([key])
    running = facts.select(
        key,
        "event_timestamp",
        "_order",
        F.count("_att").over(w).alias("_n"),
        F.coalesce(F.sum("_att").over(w), F.lit(0.0)).alias("_k"),
        F.count("_rating").over(w).alias("_nr"),
        F.coalesce(F.sum("_rating").over(w), F.lit(0.0)).alias("_sr"),
        F.size(F.collect_set(F.when(F.col("_att").isNotNull(), F.col("event_id"))).over(w)).alias("_events"),
    )
    rows = _last_row_per_instant(running, [key]).cache()  # read by the fit and by the table
    population = before_each_day(rows, [key], days)
    moments = binomial_moments(F.col("_k"), F.col("_n"))
    fits, fitted = daily_pseudocounts(population, {"_m": moments}, empty_prior=OVERALL_FOLLOW_THROUGH)
    m = F.coalesce(F.col("_m"), F.lit(MAX_PSEUDOCOUNT))
    prior = F.coalesce(F.col("_m_prior"), F.lit(OVERALL_FOLLOW_THROUGH))
    m_rating = 5.0  # a rating mean needs a handful of answers before it means anything
    prior_rating = 3.5
    rate = (F.col("_k") + m * prior) / (F.col("_n") + m)
    out = rows.join(fits, F.to_date(rows["event_timestamp"]) == fits["day"], "left").select(
        key,
        "event_timestamp",
        *([F.col("_events").cast("long").alias(f"{prefix}_event_count")] if prefix == "org" else []),
        rate.alias(f"{prefix}_attend_rate"),
        (1.0 - rate).alias(f"{prefix}_noshow_rate"),
        ((F.col("_sr") + m_rating * prior_rating) / (F.col("_nr") + m_rating)).alias(f"{prefix}_rating_mean"),
        F.col("_nr").cast("long").alias(f"{prefix}_rating_count"),
    )
    return out, {f"{prefix}_attend_rate_m": fitted["_m"]}


def series_stats(attendance: DataFrame, ratings: DataFrame, events: DataFrame) -> DataFrame:
    """Series stats with inherited signal decayed by a half-life of ~8 instances.

    Instance k of a series (ordered by start) weighs 2^((k - k_newest) / 8), so a series that
    changed venue last month does not carry two years of old outcomes at full weight.
    """
    instances = events.filter(F.col("series_id").isNotNull()).withColumn(
        "_k", F.row_number().over(Window.partitionBy("series_id").orderBy("start_at", "event_id"))
    )
    ctx = instances.select("event_id", "organizer_id", "venue_id", "series_id", "start_at", "_k")
    facts = (
        _resolved_rsvps(attendance, ratings, ctx.drop("_k"))
        .join(ctx.select("event_id", "_k"), "event_id")
        .withColumn("_w", F.pow(F.lit(2.0), F.col("_k") / SERIES_HALF_LIFE_INSTANCES))
    )
    w = _stream_window(["series_id"])
    running = facts.select(
        "series_id",
        "event_timestamp",
        "_order",
        F.max("_k").over(w).alias("_k_newest"),
        exact_sum(F.when(F.col("_att").isNotNull(), F.col("_w")), w).alias("_wn"),
        exact_sum(F.col("_att") * F.col("_w"), w).alias("_wk"),
        exact_sum(F.when(F.col("_rating").isNotNull(), F.col("_w")), w).alias("_wr"),
        exact_sum(F.col("_rating") * F.col("_w"), w).alias("_wsr"),
        F.size(F.collect_set("event_id").over(w)).alias("_instances"),
    )
    rows = _last_row_per_instant(running, ["series_id"])
    scale = F.pow(F.lit(2.0), F.col("_k_newest") / SERIES_HALF_LIFE_INSTANCES)
    n_eff = F.coalesce(F.col("_wn") / scale, F.lit(0.0))
    k_eff = F.coalesce(F.col("_wk") / scale, F.lit(0.0))
    nr_eff = F.coalesce(F.col("_wr") / scale, F.lit(0.0))
    sr_eff = F.coalesce(F.col("_wsr") / scale, F.lit(0.0))
    m, prior = 4.0, OVERALL_FOLLOW_THROUGH
    rate = (k_eff + m * prior) / (n_eff + m)
    return rows.select(
        "series_id",
        "event_timestamp",
        F.col("_instances").cast("long").alias("series_instances"),
        rate.alias("series_attend_rate"),
        (1.0 - rate).alias("series_noshow_rate"),
        ((sr_eff + 5.0 * 3.5) / (nr_eff + 5.0)).alias("series_rating_mean"),
    )


# ------------------------------------------------------------------------------ market rates


def market_rates(
    impressions: DataFrame, rsvps: DataFrame, event_feats: DataFrame, days: DataFrame
) -> tuple[DataFrame, dict[str, float]]:
    """gold.market_rates: RSVP rate per impression, shrunk up the hierarchy, as of each UTC day.

    metro x category x hour-of-week -> metro x hour-of-week -> hour-of-week -> global, each level
    keeping n / (n + m_level) of its own rate; m_level is fitted per level and UTC day by empirical
    Bayes, on the counts before that day.
    """
    ev = event_feats.select("event_id", "metro", "category", "hour_of_week")
    first_rsvp = rsvps.groupBy("user_id", "event_id").agg(F.min(known_at("rsvp_at")).alias("_rsvp_at"))
    cell_key = ["metro", "category", "hour_of_week"]
    # An impression counts as shown on the day it became known (served, and delivered), and as
    # answered on the day its answer did (its user's first RSVP to the event, delivered; the
    # impression's day if that was earlier). So a day's rates count only what was known before
    # it, like every other prior here: neither an RSVP made today nor an impression served
    # yesterday but delivered today moves the rate of a day that already began.
    shown = known_at("served_at")
    counted = F.explode(
        F.array(
            F.struct(F.to_date(shown).alias("day"), F.lit(0.0).alias("k"), F.lit(1.0).alias("n")),
            F.struct(
                F.to_date(F.greatest(shown, "_rsvp_at")).alias("day"),
                F.when(F.col("_rsvp_at").isNotNull(), 1.0).otherwise(0.0).alias("k"),
                F.lit(0.0).alias("n"),
            ),
        )
    ).alias("_c")
    # Every level below is a sum of the finest level's daily counts: the impressions are joined
    # and scanned once (cached, one row per cell and UTC day), not once per level and use.
    cell_days = (
        impressions.join(ev, "event_id")
        .join(first_rsvp, ["user_id", "event_id"], "left")
        .select(*cell_key, counted)
        .groupBy(*cell_key, F.col("_c.day").alias("day"))
        .agg(F.sum("_c.k").alias("k"), F.sum("_c.n").alias("n"))
        .withColumn("event_timestamp", F.to_timestamp("day"))
        .cache()
    )
    sums = {"k": F.sum("k"), "n": F.sum("n")}
    levels: list[tuple[str, list[str]]] = [
        ("global", []),
        ("how", ["hour_of_week"]),
        ("metro_how", ["metro", "hour_of_week"]),
        ("cell", ["metro", "category", "hour_of_week"]),
    ]
    fitted: dict[str, float] = {}
    frames: dict[str, DataFrame] = {}
    for name, group in levels:
        # Per group and day, the counts before that day; a level's m for a day is fitted on them
        # (cached: the fit and the rates both read them).
        frames[name] = daily_priors(cell_days, group, sums, days)
        if group:
            frames[name] = frames[name].cache()
            fits, report = daily_pseudocounts(frames[name], {"m": binomial_moments(F.col("k"), F.col("n"))})
            frames[name] = frames[name].join(fits.drop("m_prior"), "day", "left")
            fitted[f"market_{name}_m"] = report["m"]
    log.info("market rate pseudocounts as of the last day %s", fitted)

    g = frames["global"].select("day", F.when(F.col("n") > 0, F.col("k") / F.col("n")).alias("r_global"))
    how = frames["how"].join(g, "day")
    how = how.select("day", "hour_of_week", _shrunk("k", "n", "r_global").alias("r_how"))
    mh = frames["metro_how"].join(how, ["day", "hour_of_week"])
    mh = mh.select("day", "metro", "hour_of_week", _shrunk("k", "n", "r_how").alias("r_mh"))
    cell = frames["cell"].join(mh, ["day", "metro", "hour_of_week"])
    out = cell.filter((F.col("n") > 0) & F.col("r_mh").isNotNull()).select(
        F.concat_ws("|", "metro", "category", F.col("hour_of_week").cast("string")).alias("market_key"),
        F.to_timestamp(F.col("day")).alias("event_timestamp"),
        _shrunk("k", "n", "r_mh").alias("market_rsvp_rate"),
        F.col("n").cast("long").alias("market_impressions"),
    )
    return out, fitted


def _shrunk(k: str, n: str, prior: str) -> Column:
    """(k + m prior) / (n + m), with the row's level-and-day pseudocount ``m`` (none fitted: max)."""
    m = F.coalesce(F.col("m"), F.lit(MAX_PSEUDOCOUNT))
    return (F.col(k) + m * F.col(prior)) / (F.col(n) + m)


# ------------------------------------------------------------------------------------- social


def social_counts(friendships: DataFrame, rsvps: DataFrame) -> DataFrame:
    """gold.social: for (user, event), how many friends had RSVPed by each instant.

    A friend's RSVP counts from the later of the RSVP and the friendship: a friendship formed
    after the RSVP still makes that friend "going" from then on, never before. Both count from
    when they became known (``known_at``), and a friend's first RSVP to the event is the one
    counted. Serving counts friends' RSVPs live from the booking path's store, but a training set
    sees a gold row only from its ``created`` (the run that read its input) either way; counted
    at its own instant, a backfill would stamp the row before the hourly runs did.
    """
    friend_rsvps = rsvps.groupBy(F.col("user_id").alias("friend_id"), "event_id").agg(
        F.min(known_at("rsvp_at")).alias("_rsvp_known")
    )
    friends = friendships.select("user_id", "friend_id", known_at("created_at").alias("_friends_known"))
    pairs = friend_rsvps.join(friends, "friend_id").select(
        "user_id",
        "event_id",
        F.greatest("_rsvp_known", "_friends_known").alias("event_timestamp"),
        F.lit(0).alias("_order"),
    )
    w = _stream_window(["user_id", "event_id"])
    running = pairs.select(
        "user_id", "event_id", "event_timestamp", "_order", F.count("*").over(w).alias("n")
    )
    rows = _last_row_per_instant(running, ["user_id", "event_id"])
    return rows.select(
        "user_id",
        "event_id",
        "event_timestamp",
        F.col("n").cast("long").alias("friends_going"),
        F.least(F.col("n"), F.lit(3)).cast("long").alias("friends_going_bucket"),
    )
