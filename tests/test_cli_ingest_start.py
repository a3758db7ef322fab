"""``synthtrace ingest`` in its usual forms is run without typer's parse (pipelines/cli.plain_ingest): the same
parameters as typer's, the same outcome and exit code, and no pydantic imported (issue 27 item 2: ~0.13 s of serial
CPU of every ingest)."""
from __future__ import annotations

import inspect
import subprocess
import sys
import pytest

from testing.traces import PRIME, copy_trace
from synthtrace.pipelines.cli import plain_ingest

pytestmark = pytest.mark.real_traces


def typer_params(args: list[str]) -> dict:
    """The parameters typer's ``ingest`` command parses from ``args`` (its callbacks applied)."""
    import typer

    from synthtrace.pipelines.cli_app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("synthtrace", args[:1])
    return dict(group.get_command(ctx, args[0]).make_context(args[0], args[1:], parent=ctx).params)


@pytest.mark.parametrize("args", [
    ["ingest", "a.prv"], ["ingest", "a.prv", "b/", "-w", "wh"], ["ingest", "-w", "wh", "a.prv"],
    ["ingest", "a.prv", "--warehouse=wh", "--experiment", "exp 1", "--app=lulesh"],
    ["ingest", "a.prv", "--salvage", "--warehouse", "w h"], ["ingest", "--no-salvage", "a.prv", "--app", "x"],
    ["ingest", "a.prv", "--experiment=", "-w", "wh"],
])
@pytest.mark.parametrize("env", [None, "envwh"])
def test_plain_ingest_reads_arguments_as_typer_does(args, env, monkeypatch):
    if env is None:
        monkeypatch.delenv("SYNTHTRACE_WAREHOUSE", raising=False)
    else:
        monkeypatch.setenv("SYNTHTRACE_WAREHOUSE", env)
    try:
        expected = typer_params(args)
    except Exception:  # typer refuses it ("--experiment=" is an empty name): then so must the plain path
        assert plain_ingest(args) is None
        return
    from synthtrace.pipelines.cli_warehouse import ingest

    ours = plain_ingest(args)
    assert ours is not None
    defaults = {n: p.default for n, p in inspect.signature(ingest).parameters.items()}
    assert {**defaults, **ours} == expected


@pytest.mark.parametrize("args", [
    ["ingest"], ["ingest", "--help"], ["ingest", "a.prv", "--date", "2024-01-01"], ["ingest", "a.prv", "-w"],
    ["ingest", "a.prv", "-w", "x", "-w", "y"], ["ingest", "a.prv", "--app", "-w"], ["ingest", "--", "a.prv"],
    ["ingest", "a.prv", "--salvage", "--no-salvage"], ["ingest", "a.prv", "--salvage=yes"], ["ingest", ""],
    ["ingest", "a.prv", "--experiment", "a\x1b[2Jb"], ["ingest", "a.prv", "-x"], ["runs"], [],
])
def test_everything_else_is_left_to_typer(args):
    assert plain_ingest(args) is None


def test_a_plain_ingest_imports_no_pydantic_and_ends_as_typer_does(tmp_path):
    """One good trace and one broken one: the good one stored, one error line, exit 2, as through typer."""
    folder = tmp_path / "t"
    copy_trace(PRIME, folder)
    (folder / "broken.prv").write_text("#Paraver (01/01/2020 at 00:00):10_ns:0:1:1(1:1)\nnot a record\n")
    code = ("import sys; from synthtrace.pipelines import cli; fast = sys.argv[1] == 'fast'\n"
            "code = cli.main(sys.argv[2:]) if fast else cli._run_app(sys.argv[2:])\n"
            "print('pydantic', 'pydantic' in sys.modules); sys.exit(code)")
    out = {}
    for how in ("fast", "typer"):
        r = subprocess.run([sys.executable, "-c", code, how, "ingest", str(folder), "-w", str(tmp_path / how)],
                           capture_output=True, text=True, cwd=tmp_path)
        out[how] = r
    fast, typed = out["fast"], out["typer"]
    assert fast.returncode == typed.returncode == 2
    assert "pydantic False" in fast.stdout and "pydantic True" in typed.stdout
    assert [ln for ln in fast.stdout.splitlines() if "prime_v0" in ln] != []
    errors = [ln.replace(str(tmp_path / "fast"), "W") for ln in fast.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert errors == [ln.replace(str(tmp_path / "typer"), "W") for ln in typed.stderr.splitlines()
                      if ln.startswith("error:")]
    assert sorted(p.name for p in (tmp_path / "fast" / "runs").iterdir()) == \
        sorted(p.name for p in (tmp_path / "typer" / "runs").iterdir())
