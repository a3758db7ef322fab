"""The project's lint rules (pyproject.toml, [tool.ruff]) hold on every source file: the suite fails on a new
unused import, an unused noqa, a loop variable captured late, a line over 120 characters."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install '.[test]'")
    out = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
