"""In CI a skipped test fails the run: a required PostgreSQL test must never silently skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_skipped():\n    pytest.skip('no server here')\n"
    )
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_sessionfinish  # noqa: F401\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true" if ci else ""}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_fails_the_run_in_ci(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=True)
    assert result.returncode == 1, result.stdout
    assert "every test is required in CI" in result.stdout


def test_a_skip_is_only_reported_outside_ci(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
