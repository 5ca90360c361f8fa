"""The hidden behavioural model, as pure array functions shared by generation and evaluation.

Keeping one implementation means the probabilities the simulator samples from and the ones
``GroundTruth`` reports can never drift apart.

p_rsvp(u, e, t) = base * saturate(propensity[u] * taste[u, category] * event_factor[e] * lead(t, e))
                  * distance_factor[band(u, e)] * friend_lift[min(friends_going, 3)]
and 0 when the event is not yet listed, already started or cancelled. ``saturate(a) =
a / (1 + a / a_max)``: nobody is infinitely keen, and it bounds p_rsvp by
``base * a_max * max(friend_lift)`` (checked in the config) so no probability is ever clipped and
the distance and friend factors stay exact multipliers.

event_factor = metro x category x hour-of-week taste * organizer quality * series quality
               * event appeal * (free_rsvp_boost if free)

logit p_attend_given_rsvp(u, e) = intercept[paid|free] + reliability[u] + event_attend_offset[e]
                                  + distance_logit[band(u, e)]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from contracts.geo import distance_band

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def friend_lift(friends_going: npt.ArrayLike, lifts: tuple[float, ...]) -> FloatArray:
    """Lift for 0 / 1 / 2 / 3+ friends going."""
    idx = np.clip(np.asarray(friends_going, dtype=np.int64), 0, len(lifts) - 1)
    out: FloatArray = np.asarray(lifts, dtype=np.float64)[idx]
    return out


def lead_factor(lead_days: npt.ArrayLike) -> FloatArray:
    """People commit to what is soon: x1.3 for today, about x0.8 a week out, x0.58 at 3 weeks."""
    lead = np.clip(np.asarray(lead_days, dtype=np.float64), 0.0, None)
    out: FloatArray = 0.55 + 0.75 * np.exp(-lead / 6.0)
    return out


def saturate(affinity: FloatArray, max_affinity: float) -> FloatArray:
    """Soft ceiling on how keen anyone can be; about linear for ordinary affinities."""
    out: FloatArray = affinity / (1.0 + affinity / max_affinity)
    return out


def rsvp_probability_without_friends(
    base: float,
    max_affinity: float,
    propensity: FloatArray,
    taste: FloatArray,
    event_factor: FloatArray,
    lead_days: FloatArray,
    distance_km: FloatArray,
    band_factors: tuple[float, ...],
) -> FloatArray:
    """Everything except the friend lift (generation reuses it across fixed-point rounds)."""
    bands = distance_band(distance_km)
    affinity = propensity * taste * event_factor * lead_factor(lead_days)
    out: FloatArray = (
        base * saturate(affinity, max_affinity) * np.asarray(band_factors, dtype=np.float64)[bands]
    )
    return out


def apply_friend_lift(
    p_without_friends: FloatArray, friends_going: npt.ArrayLike, lifts: tuple[float, ...]
) -> FloatArray:
    """Multiply in the friend lift (no clip needed: the config bounds the product below 1)."""
    out: FloatArray = p_without_friends * friend_lift(friends_going, lifts)
    return out


def attend_probability(
    is_free: npt.NDArray[np.bool_],
    reliability: FloatArray,
    event_offset: FloatArray,
    distance_km: FloatArray,
    logit_paid: float,
    logit_free: float,
    distance_logit: tuple[float, ...],
) -> FloatArray:
    """p(attend | RSVP): a ticket and a short trip make people show up."""
    logit = (
        np.where(is_free, logit_free, logit_paid)
        + reliability
        + event_offset
        + np.asarray(distance_logit, dtype=np.float64)[distance_band(distance_km)]
    )
    out: FloatArray = 1.0 / (1.0 + np.exp(-logit))
    return out
