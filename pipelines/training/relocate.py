"""A moved or copied ``$TURNOUT_HOME``: point the state that records absolute paths at the new home.

Two stores write absolute paths into the home itself:

* MLflow's SQLite store keeps, for every experiment, run, logged model and model version, where its
  artifacts are. MLflow has no API to move an experiment's artifact root, so after a move new runs
  would write into the old home (or fail if it is gone) and the registry would load champions from
  it. ``relocate_mlflow`` rewrites those four columns, old artifact root -> the settings' root.
* Feast's registry keeps each data source's Delta path. ``apply_definitions`` re-registers the
  sources bound to the current settings (their digests change with the paths).

Nothing moves when the tracking store is a server (the cluster profile): the server owns the
artifacts. ``turnout relocate`` runs both steps; training refuses a store that names another home.
(The Feast step lives with the feature definitions; the CLI calls both.)
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from conf import Settings
from published.registry import SQLITE_PREFIX

log = logging.getLogger(__name__)

# MLflow 3's columns that hold an artifact location (a path, or a file:// URI) under the root.
PATH_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "storage_location"),
)


class HomeMoved(RuntimeError):
    """The MLflow store's experiments keep their artifacts under another home's root."""


def _store_path(settings: Settings) -> Path | None:
    uri = settings.mlflow.tracking_uri
    return Path(uri.removeprefix(SQLITE_PREFIX)) if uri.startswith(SQLITE_PREFIX) else None


def recorded_root(settings: Settings) -> str | None:
    """The artifact root turnout's experiments were created under, when it is not the settings' one.

    None when nothing was moved (or there is no SQLite store yet). Raises ``HomeMoved`` when the
    experiments disagree among themselves, which no move explains.
    """
    path = _store_path(settings)
    if path is None or not path.is_file():
        return None
    root = settings.mlflow.artifact_root.rstrip("/")
    prefix = f"{settings.training.experiment_prefix}-"
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT name, artifact_location FROM experiments").fetchall()
    found = set()
    for name, location in rows:
        if not name.startswith(prefix):
            continue
        location = location.removeprefix("file://").rstrip("/")
        if not location.endswith(f"/{name}"):
            raise HomeMoved(
                f"experiment {name}'s artifacts are at {location}, not in a folder named after it"
            )
        found.add(location.removesuffix(f"/{name}"))
    if len(found) > 1:
        raise HomeMoved(f"turnout's experiments name several artifact roots: {sorted(found)}")
    old = found.pop() if found else None
    return None if old in (None, root) else old


def relocate_mlflow(settings: Settings) -> dict[str, Any]:
    """Rewrite the store's artifact locations from the recorded root to the settings' root.

    Only when the artifacts came along (the new root holds every experiment's folder); a store
    whose artifacts live elsewhere is left alone and ``HomeMoved`` says so. Returns
    ``{"from", "to", "rows": {"table.column": n}}`` (``from`` None when nothing was moved).
    """
    root = settings.mlflow.artifact_root.rstrip("/")
    old = recorded_root(settings)
    if old is None:
        return {"from": None, "to": root, "rows": {}}
    path = _store_path(settings)
    assert path is not None
    with closing(sqlite3.connect(path)) as db, db:  # one transaction, committed at the end
        names = [
            n
            for (n,) in db.execute("SELECT name FROM experiments")
            if n.startswith(f"{settings.training.experiment_prefix}-")
        ]
        missing = [n for n in names if not (Path(root) / n).is_dir()]
        if missing:
            raise HomeMoved(
                f"the store names artifacts under {old}, but {root} has no folder for {missing}: "
                "copy the artifacts along with the home (or point mlflow.artifact_root at them)"
            )
        rows: dict[str, int] = {}
        for table, column in PATH_COLUMNS:
            n = 0
            for before, after in ((old, root), (f"file://{old}", f"file://{root}")):
                # The root itself or a path below it, never a sibling that merely starts the same.
                n += db.execute(  # table and column names come from PATH_COLUMNS, values are bound
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                    f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                    (after, len(before) + 1, before, len(before) + 1, f"{before}/"),
                ).rowcount
            rows[f"{table}.{column}"] = n
    log.info("MLflow store %s: artifact root %s -> %s (%s)", path, old, root, rows)
    return {"from": old, "to": root, "rows": rows}
