"""Servers the system tests start as real processes: a free port, readiness, a stop of the whole group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(
    args: Sequence[str | Path], env: dict[str, str], log: Path, ready: Callable[[], bool], seconds: float
) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` in a session of its own, output to ``log``; yielded once ``ready()`` holds (an
    ``OSError`` from it counts as not yet), and its whole process group stopped afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + seconds
        while True:
            assert proc.poll() is None, f"{args[:2]} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if ready():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (
                f"{args[:2]} not ready in {seconds} s:\n{log.read_text()[-3000:]}"
            )
            time.sleep(1)
        yield proc
    finally:
        with suppress(ProcessLookupError):  # already gone, with its group
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
