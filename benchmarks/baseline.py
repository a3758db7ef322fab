"""The synthtrace package of an earlier commit, runnable beside this checkout: the baseline of a benchmark that
compares code before and after a change in the same run, on the same interpreter."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the folders of the design, installed as synthtrace.<name> (pyproject's package-dir)
LAYERS = ("tracelib", "simulator", "warehouse", "models", "pipelines")


def baseline_tree(commit: str, dest: Path) -> Path:
    """The synthtrace package of ``commit`` under ``dest/pkg`` (a folder to put on PYTHONPATH)."""
    src = dest / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = dest / "pkg" / "synthtrace"
    shutil.copytree(src / "synthtrace", pkg)
    for layer in LAYERS:
        if (src / layer).is_dir():
            (pkg / layer).symlink_to(src / layer, target_is_directory=True)
    return dest / "pkg"
