"""``synthtrace ingest`` in its usual forms is run without typer's parse (pipelines/cli_read.FAST, the mechanism of
``runs`` and ``sql``): the same parameters as typer's, the same outcome and exit code, and no pydantic imported
(issue 27 item 2: ~0.13 s of serial CPU of every ingest)."""
from __future__ import annotations

import inspect
import subprocess
import sys
import pytest

from testing.traces import PRIME, copy_trace
from synthtrace.pipelines.cli_read import understood

pytestmark = pytest.mark.real_traces


def plain_ingest(args: list[str]) -> dict | None:
    """The parameters the fast path calls ``ingest`` with, or None when it leaves ``args`` to typer."""
    call = understood(list(args)) if args[:1] == ["ingest"] else None
    return None if call is None else dict(call.keywords)


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


_S = "\udcff"  # an undecodable byte of a name, as Python holds it
#: attacker 9's forms ("fast ingest argument path", /work/coord/attack9-findings.md), each under 5 environments
ATTACK9_FORMS = [
    ["ingest", "a.prv", "--experiment=-x"], ["ingest", "a.prv", "--experiment", "=x"], ["ingest", "a.prv", "--app=a=b"],
    ["ingest", "a.prv", "-w=wh"], ["ingest", "a.prv", "-wwh"], ["ingest", "-", "a.prv"],
    ["ingest", "a.prv", "--warehouse="], ["ingest", "a.prv", "--app="], ["ingest", "a.prv", "--experiment= x "],
    ["ingest", "a.prv", "--experiment", "x", "--app", "y", "-w", "z", "--salvage"],
    ["ingest", "a.prv", "--experiment", _S + "x"], ["ingest", _S + ".prv"], ["ingest", "a.prv", "-w", _S],
    ["ingest", "a.prv", "--app", "\u202ex"], ["ingest", "a.prv", "--experiment", "x\u200b"],
    ["ingest", "a.prv", "--experiment", "ab\u0301"], ["ingest", "a.prv", "--experiment", "x\n"],
    ["ingest", "a.prv", "--salvage", "--salvage"], ["ingest", "a.prv", "--no-salvage", "--no-salvage"],
    ["ingest", "a.prv", "--experiment", "-"], ["ingest", "a.prv", "--warehouse", "-"],
    ["ingest", "a.prv", "--experiment=--"], ["ingest", "a.prv", "--exp", "x"], ["ingest", "a.prv", "--Experiment", "x"],
    ["ingest", "a.prv", "--warehouse=a", "--experiment=b", "--app=c", "--salvage"],
    ["ingest", "a.prv", "--warehouse", ""], ["ingest", "a.prv", "--experiment", ""], ["ingest", "a.prv", "--app", ""],
    ["ingest", "a.prv", "--experiment", "a" * 300], ["ingest", "a.prv", "--experiment", "."],
    ["ingest", "a.prv", "--experiment", ".."], ["ingest", "a.prv", "--experiment", "a/b"],
    ["ingest", "a.prv", "--experiment", " "], ["ingest", "a.prv", "--app", "x y"],
    ["ingest", "a.prv", "--experiment", "\x00"], ["ingest", "a.prv", "--salvage", "a.prv"],
    ["ingest", "a.prv", "a.prv"],
    ["ingest", "--salvage"], ["ingest", "-w", "x"], ["ingest", "a.prv", "--", "-b.prv"],
    ["ingest", "a.prv", "\u2014experiment", "x"], ["ingest", "a.prv", "--experiment", "x", "--experiment=x"],
    ["ingest", "a.prv", "--warehouse=-w"], ["ingest", "a.prv", "--help=x"],
    ["ingest", "a.prv", "-w", "a", "--warehouse=a"],
    ["ingest", "a.prv", "--experiment", "\ufeffx"], ["ingest", "a.prv", "--experiment", "x\t"],
    ["ingest", "a.prv", "--experiment", "\u00a0"], ["ingest", "a.prv", "--experiment", "\U0001F600"],
    ["ingest", "a.prv", "--experiment", "~x"],
]


@pytest.mark.parametrize("env", [None, "envwh", "", " ", _S])
def test_attacker_forms_are_read_as_typer_reads_them_or_left_to_it(env, monkeypatch):
    """Every form the fast path takes gives typer's parameters; it takes the forms the plain ingest parser it
    replaced took (e.g. `--experiment=--`, `--app=a=b`, a name with an undecodable byte)."""
    from synthtrace.pipelines.cli_warehouse import ingest

    if env is None:
        monkeypatch.delenv("SYNTHTRACE_WAREHOUSE", raising=False)
    else:
        monkeypatch.setenv("SYNTHTRACE_WAREHOUSE", env)
    defaults = {n: p.default for n, p in inspect.signature(ingest).parameters.items()}
    taken = 0
    for args in ATTACK9_FORMS:
        if (ours := plain_ingest(args)) is None:
            continue
        taken += 1
        assert {**defaults, **ours} == typer_params(args), args
    assert taken == 16  # as many as the plain ingest parser it replaced took (pipelines/cli.py at 6909bd1)


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
