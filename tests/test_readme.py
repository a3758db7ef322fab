"""The README run as written. Its "Quick start": a copy of the checkout in a new venv, a plain (not editable)
install, then the test command from the checkout, which must import the layers as the installed package does; and
the numba cache kept out of the package (a stale cache in site-packages once made ``synthtrace`` a namespace
package). Its "Everyday use" block: a real shell, a fresh folder with the LULESH pair where the block expects it
(``traces/lulesh/``), the default warehouse. The blocks are read from README.md itself, so a documented command can
never break unnoticed."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from testing.traces import LULESH_A, LULESH_B, ROOT

def bash_block(heading: str, readme: Path = ROOT / "README.md") -> list[str]:
    """The command lines of the first ```bash block under ``heading`` (e.g. '## Everyday use')."""
    text = readme.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, f"README.md: no ```bash block under {heading!r}"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def everyday_block() -> list[str]:
    return bash_block("## Everyday use")


def test_block_is_what_the_readme_says():
    lines = everyday_block()
    assert lines[0].startswith("synthtrace ingest traces/lulesh/") and all(ln.startswith("synthtrace ") for ln in lines)
    install, tests = (line.split("#")[0].strip() for line in bash_block("## Quick start"))
    assert install == "pip install . && synthtrace demo"
    assert tests == 'pip install ".[test,dask]" && python -m pytest -q'


def test_numba_cache_is_never_written_inside_the_package():
    """Kernels cache outside the source folders: files Numba leaves in an installed package's ``__pycache__``
    outlive its uninstall and turn the left-over ``synthtrace`` folder into a namespace package."""
    import importlib

    sources = [ROOT / name for name in ("synthtrace", "tracelib", "simulator", "warehouse", "models", "pipelines")]
    kernels = []
    for path in (ROOT / "tracelib").rglob("*.py"):
        if "cached_njit" not in path.read_text(encoding="utf-8") or path.name == "jit.py":
            continue
        module = importlib.import_module("synthtrace." + ".".join(path.relative_to(ROOT).with_suffix("").parts))
        kernels += [k for k in vars(module).values() if getattr(k, "_cache", None) is not None]
    assert kernels, "no cached Numba kernel found"
    for kernel in kernels:
        where = Path(kernel._cache.cache_path).resolve()
        assert not any(where.is_relative_to(s) for s in sources), (kernel.__name__, where)


def _checkout_copy(dest: Path) -> Path:
    """The checkout's files as git would clone them (tracked, plus new files not ignored) in ``dest/repo``, with
    ``dest/shared`` standing for ../shared."""
    repo = dest / "repo"
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    (dest / "shared").symlink_to(ROOT.parent / "shared")
    return repo


@pytest.mark.real_traces
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the checkout's files")
def test_quick_start_test_command_runs_from_a_fresh_clone_after_a_plain_install(tmp_path):
    """The quick start's install (`pip install .`, not editable) and its test command as printed, in a new venv
    and a copy of the checkout: the tests import the layers from the checkout as from the installed package. The
    venv sees the dependencies already installed here (a .pth file) instead of downloading them again; the inner
    run is narrowed (PYTEST_ADDOPTS) to two quick tests that import the layers (a copy's Numba kernels would
    compile anew); .ci/run runs the whole command."""
    repo = _checkout_copy(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SYNTHTRACE_WAREHOUSE")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PREFECT_HOME=str(tmp_path / ".prefect"),
               PYTEST_ADDOPTS="-p no:cacheprovider -n 0 tests/test_counter_plan.py::test_plan_command_formats "
                              "tests/test_packaging.py::test_every_source_package_is_installed_under_the_namespace")
    install, tests = bash_block("## Quick start")
    for line in (install.split("&&")[0], tests):  # the demo itself: tests/test_demo.py and .ci/run
        p = subprocess.run(["bash", "-c", line], cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, f"{line}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "2 passed" in p.stdout and "failed" not in p.stdout and "error" not in p.stdout.lower(), p.stdout[-2000:]
    assert not list((site / "synthtrace").rglob("*.nbi")), "Numba cached kernels inside the installed package"


@pytest.fixture
def user_folder(tmp_path, prefect_api) -> tuple[Path, dict[str, str]]:
    """A fresh folder holding traces/lulesh/ (links to the real pair) and a ``synthtrace`` on PATH that runs this
    checkout with this interpreter. ``synthtrace nightly`` talks to the session's Prefect server (PREFECT_API_URL,
    as for a user who runs one) instead of starting an ephemeral one, 15-20 s of CPU: the killed night of
    tests/test_nightly_flow.py runs a night to its end on an ephemeral server, and .ci/run's demo another."""
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
               COLUMNS="120", PYTHONPATH=str(ROOT), PREFECT_API_URL=prefect_api)
    return tmp_path, env


@pytest.mark.real_traces
@pytest.mark.slow
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
