"""The layer contract of ARCHITECTURE.md, as a user of the code meets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_import_layer_contract_holds() -> None:
    """lint-imports (pyproject.toml's [tool.importlinter]): layers point down, stages stay apart."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_the_web_process_imports_no_spark() -> None:
    """The service's modules, imported in a fresh interpreter, bring no pyspark or delta with them."""
    code = (
        "import sys, serving.app, serving.live, serving.refresh, cli.client; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'py4j')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
