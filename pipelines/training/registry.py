"""The MLflow registry side of training: register from a run, move aliases behind the gates.

Aliases, not stages (MLflow 3): a new version gets ``challenger``; if every gate passes it
becomes ``champion`` and the version it replaces becomes ``previous``; a failed gate leaves
``champion`` where it was and records why on the version. Every version carries its data time
(``data.as_of``), and ``champion`` never moves to an older one. Setting an alias is last-writer-wins,
so the gate decides first and the aliases move after, each move logged.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from conf import Settings
from pipelines.training.relocate import HomeMoved, recorded_root
from published import registry as published
from published.registry import (
    AS_OF_TAG,
    CHALLENGER,
    CHAMPION,
    DECISION_TAG,
    PREVIOUS,
    alias_version,
    data_time,
    model_name,
)

log = logging.getLogger(__name__)


def configure(settings: Settings) -> Any:
    """Point MLflow at the settings' tracking server / SQLite file (created if new); a client."""
    return published.client(settings, create=True)


def experiment_name(settings: Settings, head: str) -> str:
    return f"{settings.training.experiment_prefix}-p_{head}"


def ensure_experiment(settings: Settings, name: str) -> str:
    """The experiment's id, creating it with artifacts under the settings' artifact root."""
    client = configure(settings)
    found = client.get_experiment_by_name(name)
    if found is not None:
        moved_from = recorded_root(settings)
        if moved_from is not None:  # a new run would write its artifacts into that other home
            raise HomeMoved(
                f"the MLflow store in this home keeps {name}'s artifacts under {moved_from}, not "
                f"{settings.mlflow.artifact_root}: the home was moved or copied. Run `turnout relocate`."
            )
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=f"{settings.mlflow.artifact_root}/{name}"))


def register(
    settings: Settings, run_id: str, head: str, as_of: datetime, artifact_path: str = "model"
) -> Any:
    """Register the model logged by ``run_id`` (never "the latest") as ``challenger``, tagged with
    its data time ``as_of`` (the instant its training data reaches)."""
    import mlflow

    client = configure(settings)
    name = model_name(settings, head)
    version = mlflow.register_model(
        f"runs:/{run_id}/{artifact_path}", name, tags={AS_OF_TAG: as_of.isoformat()}
    )
    if version.run_id != run_id:
        raise RuntimeError(
            f"registered version {version.version} belongs to run {version.run_id}, not {run_id}"
        )
    client.set_registered_model_alias(name, CHALLENGER, version.version)
    log.info("%s v%s registered from run %s as %s", name, version.version, run_id, CHALLENGER)
    return version


def promote(settings: Settings, head: str, version: str, promote_it: bool, reason: str) -> dict[str, Any]:
    """Move ``champion`` to ``version`` (old champion -> ``previous``) or leave it, recording why.

    A version whose data time is older than the live champion's is never promoted, whatever its
    gates said: re-running a past interval must not put an older model back in front of users.
    ``challenger`` keeps naming the newest candidate either way.
    """
    client = configure(settings)
    name = model_name(settings, head)
    old = alias_version(client, name, CHAMPION)
    if promote_it and old is not None and old.version != version:
        new_t, old_t = data_time(client.get_model_version(name, version)), data_time(old)
        if new_t is not None and old_t is not None and new_t < old_t:
            promote_it = False
            reason = (
                f"champion v{old.version} is trained on data up to {old_t.isoformat()}, after this "
                f"version's {new_t.isoformat()}: a champion never moves backwards in data time"
                + ("" if reason == "all gates passed" else f"; {reason}")
            )
    client.set_model_version_tag(name, version, DECISION_TAG, "promoted" if promote_it else "rejected")
    client.set_model_version_tag(name, version, "promotion.reason", reason)
    if not promote_it:
        log.info(
            "%s v%s not promoted: %s (champion stays %s)", name, version, reason, old.version if old else None
        )
        return {"promoted": False, "champion": old.version if old else None, "reason": reason}
    if old is not None and old.version != version:
        client.set_registered_model_alias(name, PREVIOUS, old.version)
    client.set_registered_model_alias(name, CHAMPION, version)
    log.info("%s champion %s -> %s", name, old.version if old else None, version)
    return {"promoted": True, "champion": version, "previous": old.version if old else None, "reason": reason}


def rollback(settings: Settings, head: str) -> dict[str, Any]:
    """Put ``previous`` back as ``champion``; the rolled-back version becomes ``previous``."""
    client = configure(settings)
    name = model_name(settings, head)
    prev, champ = alias_version(client, name, PREVIOUS), alias_version(client, name, CHAMPION)
    if prev is None:
        raise LookupError(f"{name} has no '{PREVIOUS}' version to roll back to")
    client.set_registered_model_alias(name, CHAMPION, prev.version)
    if champ is not None:
        client.set_registered_model_alias(name, PREVIOUS, champ.version)
        client.set_model_version_tag(name, champ.version, DECISION_TAG, "rolled back")
    log.info("%s rolled back: champion %s -> %s", name, champ.version if champ else None, prev.version)
    return {"champion": prev.version, "previous": champ.version if champ else None}
