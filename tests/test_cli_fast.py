"""``runs`` and ``sql`` answered without typer (pipelines/cli_read.py): the fast path reads an argument list exactly
as typer does or leaves it to typer, prints what the typer command prints, and imports neither typer nor the
frame libraries."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testing.traces import LULESH_A, PRIME

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    """A warehouse holding the prime and one LULESH trace (read where they are: ingest only reads)."""
    from synthtrace.pipelines.cli import main

    w = tmp_path_factory.mktemp("fast") / "wh"
    assert main(["ingest", str(PRIME), str(LULESH_A), "-w", str(w)]) == 0
    return w


def typer_params(args: list[str]) -> dict:
    """The parameters typer's own command parses from ``args`` (``runs``: the group's callback)."""
    import typer

    from synthtrace.pipelines.cli_app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("synthtrace", args[:1])
    params = group.get_command(ctx, args[0]).make_context(args[0], args[1:], parent=ctx).params
    return {k: getattr(v, "value", v) for k, v in params.items()}


def fast_params(args: list[str]) -> dict | None:
    """The parameters the fast path would call its function with (its defaults filled in), or None."""
    from synthtrace.pipelines.cli_read import understood

    call = understood(list(args))
    if call is None:
        return None
    defaults = {n: p.default for n, p in inspect.signature(call.func).parameters.items()}
    return {**defaults, **call.keywords}


@pytest.mark.parametrize("args", [
    ["runs"], ["runs", "-w", "{wh}"], ["runs", "--warehouse", "{wh}"], ["runs", "--warehouse={wh}"],
    ["sql", "SELECT 1", "-w", "{wh}"],
    ["sql", "-w", "{wh}", "SELECT * FROM runs"],
    ["sql", "SELECT 1", "--warehouse={wh}", "-f", "json"],
    ["sql", "SELECT 1", "-w", "{wh}", "--format", "csv", "-o", "out.csv", "--timeout", "2.5"],
    ["sql", "SELECT 1", "--output=o.parquet", "--format=parquet", "--timeout=1e3", "-w", "{wh}"],
    ["sql", "SELECT 1", "-w", "{wh}", "--timeout", "0.001"],
    ["sql", "", "-w", "{wh}"],
])
@pytest.mark.parametrize("env", [None, "{wh}", ""])
def test_fast_path_reads_arguments_as_typer_does(wh, args, env, monkeypatch, tmp_path):
    """Same values, same defaults, same environment fallback: typer's parse of the same list is the reference."""
    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv("SYNTHTRACE_WAREHOUSE", raising=False)
    else:
        monkeypatch.setenv("SYNTHTRACE_WAREHOUSE", env.format(wh=wh))
    args = [a.format(wh=wh) for a in args]
    fast = fast_params(args)
    assert fast is not None, args
    assert fast == typer_params(args)


@pytest.mark.parametrize("args", [
    [], ["runs", "rm", "x"], ["runs", "--help"], ["runs", "-w"], ["runs", "-w", ""], ["runs", "-wX"],
    ["runs", "-w", "a", "-w", "b"], ["runs", "--bogus"], ["runs", "--ware", "x"],
    ["sql"], ["sql", "a", "b"], ["sql", "SELECT 1", "--help"], ["sql", "SELECT 1", "-f", "pdf"],
    ["sql", "SELECT 1", "--format", "CSV"], ["sql", "SELECT 1", "--timeout", "0"],
    ["sql", "SELECT 1", "--timeout", "nan"], ["sql", "SELECT 1", "--timeout", "soon"],
    ["sql", "SELECT 1", "--timeout", "\uff15"],  # a full-width 5: Python's float reads it, typer does not (attack 11)
    ["sql", "SELECT 1", "-f", "csv", "-f", "json"], ["sql", "--", "-1"], ["sql", "-1"],
    ["sql", "SELECT 1", "-w", "-f"], ["sql", "SELECT 1", "-w=x"], ["ingest", "x", "--date", "2024-01-01"],
    ["--version"],
])
def test_fast_path_leaves_everything_else_to_typer(args):
    """Help, subcommands, repeated options, bad or missing values, odd spellings: typer parses them (and says
    what is wrong, one line, exit 2)."""
    assert fast_params(args) is None


def test_fast_path_prints_what_the_typer_command_prints(wh, tmp_path):
    """The same bytes on stdout and stderr, and the same exit code, from the fast path and from typer (forced by
    an argument list only typer takes: the option repeated, the last one winning)."""
    cases = [(["runs", "-w", str(wh)], ["runs", "-w", "typo", "-w", str(wh)]),
             (["sql", "SELECT * FROM runs ORDER BY run_id", "-w", str(wh)],
              ["sql", "SELECT * FROM runs ORDER BY run_id", "-w", "typo", "-w", str(wh)])]
    cases += [([*fast, "-f", fmt], [*typed, "-f", fmt]) for fmt in ("csv", "json") for fast, typed in cases[1:]]
    cases.append((["sql", "SELECT * FROM nosuch", "-w", str(wh)], ["sql", "SELECT * FROM nosuch", "-w", "x", "-w",
                                                                   str(wh)]))
    cases.append((["runs", "-w", str(tmp_path / "typo")], ["runs", "-w", "x", "-w", str(tmp_path / "typo")]))
    for fast, typed in cases:
        assert fast_params(fast) is not None and fast_params(typed) is None
        a, b = synthtrace(*fast), synthtrace(*typed)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), fast
        assert a.stdout or a.stderr.startswith("error: ")


def synthtrace(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "80"}, check=False)


_PROBE = """
import json, sys
from synthtrace.pipelines.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
#: what the fast runs and sql never import: typer and the pydantic it coerces with, the frame libraries, numba,
#: DuckDB's Python layer (its engine, _duckdb, answers), the simulator, the Paraver reader, the models
_NEVER = ("typer", "pydantic", "click", "polars", "pyarrow", "pandas", "numpy", "numba", "duckdb",
          "synthtrace.simulator",
          "synthtrace.tracelib.formats.paraver", "synthtrace.models", "prefect")


@pytest.mark.parametrize("args", [["runs"], ["sql", "SELECT 1"], ["sql", "SELECT count(*) FROM bursts"],
                                  ["sql", "SELECT * FROM runs", "-f", "json"], ["sql", "SHOW TABLES"]])
def test_fast_commands_import_neither_typer_nor_frames(wh, args):
    p = subprocess.run([sys.executable, "-c", _PROBE, *args, "-w", str(wh)], capture_output=True, text=True,
                       timeout=300, check=False)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, p.stderr
    assert [m for m in report["modules"] if m.split(".")[0] in _NEVER or m.startswith(_NEVER)] == []


@pytest.mark.parametrize("typed", [False, True])
def test_output_format_follows_the_file_extension(wh, tmp_path, typed, run_cli):
    """No --format: `-o x.parquet` is Parquet, `.csv` CSV, `.json` JSON, `.txt` or `.tsv` the tab-separated table (a
    text table in a .parquet file is no Parquet); fast path and typer alike (``--timeout`` sends it to typer). In
    process: the files are the point here (the process's own bytes: test_fast_path_prints_what_the_typer_...)."""
    import pyarrow.parquet as pq

    extra = ["--timeout=60", "--timeout=60"] if typed else []  # an option twice: only typer takes it
    query = "SELECT run_name, n_bursts FROM runs ORDER BY run_name"
    for name in ("q.parquet", "q.csv", "q.json", "q.txt"):
        args = ["sql", query, "-w", str(wh), "-o", str(tmp_path / name), *extra]
        assert (fast_params(args) is None) == typed
        code, _, err = run_cli(*args)
        assert code == 0, err
    assert pq.read_table(tmp_path / "q.parquet").column_names == ["run_name", "n_bursts"]
    assert (tmp_path / "q.csv").read_text().splitlines()[0] == '"run_name","n_bursts"'
    assert list(json.loads((tmp_path / "q.json").read_text())[0]) == ["run_name", "n_bursts"]
    assert (tmp_path / "q.txt").read_text().splitlines()[0] == "run_name\tn_bursts"


@pytest.mark.parametrize("typed", [False, True])
def test_an_output_extension_that_names_no_format_is_refused_and_gz_is_gzip(wh, tmp_path, typed, run_cli):
    """Attack 8 B10: ``-o x.csv.gz``, ``x.json.gz``, ``x``, ``x.`` wrote the tab-separated table silently (a ``.gz``
    that is no gzip, a ``.json.gz`` that is no JSON). A ``.gz`` file is gzip of what its inner extension names, and
    an extension that names no format is refused in one line naming the known ones (unless --format is given)."""
    import gzip

    extra = ["--timeout=60", "--timeout=60"] if typed else []
    query = "SELECT run_name, n_bursts FROM runs ORDER BY run_name"
    for name in ("q.csv.gz", "q.json.gz", "q.tsv.gz", "q.tsv"):
        code, _, err = run_cli("sql", query, "-w", wh, "-o", tmp_path / name, *extra)
        assert code == 0, err
    assert gzip.decompress((tmp_path / "q.csv.gz").read_bytes()).decode().splitlines()[0] == '"run_name","n_bursts"'
    assert list(json.loads(gzip.decompress((tmp_path / "q.json.gz").read_bytes()))[0]) == ["run_name", "n_bursts"]
    assert gzip.decompress((tmp_path / "q.tsv.gz").read_bytes()).decode().splitlines()[0] == "run_name\tn_bursts"
    assert (tmp_path / "q.tsv").read_text().splitlines()[0] == "run_name\tn_bursts"
    for name in ("x", "x.", "x.xlsx", "x.gz", "x.csv.bz2", "x.parquet.gz"):
        code, out, err = run_cli("sql", query, "-w", wh, "-o", tmp_path / name, *extra)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
        assert f"--output {tmp_path / name}: " in err and ".parquet" in err
        assert not (tmp_path / name).exists()
    code, _, err = run_cli("sql", query, "-w", wh, "-o", tmp_path / "x", "-f", "csv", *extra)  # told: written
    assert code == 0 and (tmp_path / "x").read_text().splitlines()[0] == '"run_name","n_bursts"', err
    code, _, err = run_cli("sql", query, "-w", wh, "-o", "/dev/null", *extra)  # a device has no extension: table
    assert code == 0, err


@pytest.mark.parametrize("typed", [False, True])
def test_every_packing_name_not_written_is_refused_and_gz_in_any_case_is_gzip(wh, tmp_path, typed, run_cli):
    """Attack 12: with --format, ``-o y.csv.gzip`` (``.zstd``, ``.br``, ``.sz``, ``.snappy``) wrote plain CSV, exit
    0, under a name promising a packing; they are refused in one line like ``.bz2``, any case. ``Q.CSV.GZ`` is gzip
    whose header names ``Q.CSV`` (it named ``Q.CSV.GZ``, which ``gunzip -N`` would restore)."""
    import gzip

    extra = ["--timeout=60", "--timeout=60"] if typed else []
    for name in ("y.csv.gzip", "y.csv.zstd", "y.json.br", "y.csv.sz", "y.parquet.snappy", "y.csv.ZSTD",
                 "y.csv.Snappy"):
        code, out, err = run_cli("sql", "SELECT 1 AS a", "-w", wh, "-f", "csv", "-o", tmp_path / name, *extra)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "does not write" in err, (name, err)
        assert not (tmp_path / name).exists()
    code, _, err = run_cli("sql", "SELECT 1 AS a", "-w", wh, "-o", tmp_path / "Q.CSV.GZ", *extra)
    data = (tmp_path / "Q.CSV.GZ").read_bytes()
    assert code == 0 and gzip.decompress(data).decode().splitlines() == ['"a"', "1"], err
    assert data[3] & 0x08 and data[10:data.index(b"\0", 10)] == b"Q.CSV"  # RFC 1952 FNAME


@pytest.mark.parametrize("typed", [False, True])
def test_json_output_is_json_whatever_the_floats(wh, tmp_path, typed, run_cli):
    """A NaN or an infinity (a 0/0 ratio, a merge's error column) was written as Python's `NaN`/`Infinity`
    tokens, which jq, JavaScript and every strict JSON parser refuse (attack 7 A3): they are null, nested too."""
    extra = ["--timeout=60", "--timeout=60"] if typed else []
    query = ("SELECT 'nan'::DOUBLE AS x, ['inf'::DOUBLE, 1.5] AS y, {'a': '-inf'::DOUBLE, 'b': 2.0::DOUBLE} AS z, "
             "n_bursts FROM runs LIMIT 1")
    code, out, err = run_cli("sql", query, "-w", str(wh), "-f", "json", *extra)
    assert code == 0, err

    def strict(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    row = json.loads(out, parse_constant=strict)[0]
    assert row["x"] is None and row["y"] == [None, 1.5] and row["z"] == {"a": None, "b": 2.0} and row["n_bursts"] > 0


def test_fast_commands_declare_the_options_of_their_typer_commands():
    """One description of each option: every name the fast path reads is an option of the typer command of the same
    parameter (a renamed or added option cannot make the two parse differently), every positional one of its
    arguments; ``ingest`` among them (its plain parser was a second list of its options, issue 23)."""
    import typer

    from synthtrace.pipelines.cli_app import app
    from synthtrace.pipelines.cli_read import FAST

    assert {"runs", "sql", "ingest"} <= set(FAST)
    group = typer.main.get_command(app)
    ctx = group.make_context("synthtrace", ["runs"])
    for name, fast in FAST.items():
        command = group.get_command(ctx, name)
        declared = {opt: p.name for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for opt in fast.options:
            assert {n: declared.get(n) for n in opt.names} == dict.fromkeys(opt.names, opt.dest), name
        arguments = {p.name: p.nargs for p in command.params if p.param_type_name == "argument"}
        assert {a.name: -1 if a.many else 1 for a in fast.positionals} == arguments, name
