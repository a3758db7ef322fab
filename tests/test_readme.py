"""The README's "Everyday use" block, run as written: a real shell, a fresh folder with the LULESH pair where the
block expects it (``traces/lulesh/``), the default warehouse. The block is read from README.md itself, so a
documented command can never break unnoticed."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from testing.traces import LULESH_A, LULESH_B, ROOT

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]


def everyday_block(readme: Path = ROOT / "README.md") -> list[str]:
    """The command lines of the first ```bash block under '## Everyday use'."""
    text = readme.read_text(encoding="utf-8")
    section = text[text.index("## Everyday use"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: no ```bash block under '## Everyday use'"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_block_is_what_the_readme_says():
    lines = everyday_block()
    assert lines[0].startswith("synthtrace ingest traces/lulesh/") and all(ln.startswith("synthtrace ") for ln in lines)


@pytest.fixture
def user_folder(tmp_path) -> tuple[Path, dict[str, str]]:
    """A fresh folder holding traces/lulesh/ (links to the real pair) and a ``synthtrace`` on PATH that runs this
    checkout with this interpreter."""
    lulesh = tmp_path / "traces" / "lulesh"
    lulesh.mkdir(parents=True)
    for prv in (LULESH_A, LULESH_B):
        for companion in (prv, prv.with_suffix(".pcf"), prv.with_suffix(".row")):
            (lulesh / companion.name).symlink_to(companion)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "synthtrace"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m synthtrace.pipelines.cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k != "SYNTHTRACE_WAREHOUSE"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PREFECT_HOME=str(tmp_path / ".prefect"),
               COLUMNS="120", PYTHONPATH=str(ROOT))
    return tmp_path, env


def test_everyday_use_runs_as_printed(user_folder):
    folder, env = user_folder
    failures = []
    for line in everyday_block():
        p = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or [""])[-1]
            failures.append(f"exit {p.returncode}: {line.split('#')[0].strip()}\n    {last}")
    assert not failures, "README commands that fail:\n" + "\n".join(failures)
    for made in ("synthtrace-warehouse", "merged/lulesh.prv", "quality.csv", "lulesh.json", "report.html", "sim"):
        assert (folder / made).exists(), f"the README promises {made}"
