"""Packaging: one ``synthtrace`` namespace in site-packages, nothing generic beside it, and a small Python API."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("tracelib", "simulator", "warehouse", "models", "pipelines")


def test_installed_distribution_has_one_top_level_name():
    top = distribution("synthtrace").read_text("top_level.txt")
    assert top is not None and top.split() == ["synthtrace"]


def test_every_source_package_is_installed_under_the_namespace():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    on_disk = {"synthtrace"} | {
        "synthtrace." + ".".join(init.parent.relative_to(ROOT).parts)
        for layer in LAYERS for init in (ROOT / layer).rglob("__init__.py")}
    assert on_disk == listed
    assert {tool["package-dir"][f"synthtrace.{layer}"] for layer in LAYERS} == set(LAYERS)


@pytest.mark.slow
def test_wheel_installs_beside_foreign_models_and_pipelines(tmp_path):
    """A site-packages that already holds packages named ``models`` and ``pipelines`` keeps both working."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    site = tmp_path / "site"
    for name in ("models", "pipelines"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"OWNER = 'another distribution ({name})'\n")
    wheel = next(wheels.glob("synthtrace-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    assert sorted(p.name for p in site.iterdir() if p.name != "bin" and not p.name.endswith(".dist-info")) == \
        ["models", "pipelines", "synthtrace"]
    probe = ("import importlib.util, models, pipelines, synthtrace\n"
             "assert models.OWNER.endswith('(models)') and pipelines.OWNER.endswith('(pipelines)')\n"
             "for sub in ('tracelib', 'tracelib.formats.paraver', 'warehouse', 'models', 'pipelines'):\n"
             "    spec = importlib.util.find_spec('synthtrace.' + sub)\n"
             f"    assert spec is not None and spec.origin.startswith({str(site)!r}), (sub, spec)\n")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + probe],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    # package data travels with the namespace
    assert (site / "synthtrace" / "tracelib" / "domain" / "machines").is_dir()


def test_python_api_reads_a_real_trace_and_queries_a_warehouse(tmp_path):
    import synthtrace
    from testing.traces import PRIME
    bursts, calls = synthtrace.read_trace(PRIME)
    assert bursts.height > 0 and calls.height > 0
    assert {"task", "thread", "burst_seq", "PAPI_TOT_INS"} <= set(bursts.columns)
    wh = synthtrace.open_warehouse(tmp_path / "wh")
    (res,) = synthtrace.ingest(wh, PRIME, experiment="prime")
    assert res.status == "ingested"
    n = synthtrace.sql(wh, "SELECT count(*) AS n FROM bursts")
    assert n["n"][0] == bursts.height
    classified = synthtrace.classify(bursts, calls)
    assert classified.archetypes.filter(unit="burst").height == bursts.height


@pytest.mark.parametrize("preset", [None, "ACTIVE"])
def test_import_sets_a_passive_openmp_wait_unless_the_user_chose(preset):
    """On shared cores an active OpenMP wait makes the models' fits many times slower
    (benchmarks/results/openmp_wait.md): ``import synthtrace`` sets PASSIVE, and a user's own choice wins."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run([sys.executable, "-c", "import os, synthtrace; print(os.environ['OMP_WAIT_POLICY'])"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (preset or "PASSIVE")
