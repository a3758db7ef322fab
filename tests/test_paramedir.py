"""Checked against Paraver itself: for every real trace, and for variants of them that Paraver's paramedir loads
(blank lines, CRLF line ends, gzip, records out of time order, a state past the header's end), synthtrace reads
the same per-thread Running time and number of bursts that paramedir computes; so it does for the forms that
Extrae and Paraver's tools write (testing/paraver_variants.py: header, record, .pcf/.row and file variants), whose
figures paramedir must also give as they were written; and the Paraver trace that ``merge --export-prv`` writes
loads in paramedir with the merged bursts' figures.

paramedir is not on PyPI (built from the public paraver-kernel repository, see benchmarks/results/paramedir.md):
these tests run where ``SYNTHTRACE_PARAMEDIR`` or ``PATH`` finds it and are skipped elsewhere.
"""
from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from testing.paramedir import find_paramedir, paramedir_view, synthtrace_view
from testing.paraver_variants import variants, write, write_many_tasks
from testing.traces import ALL_PARAVER, LULESH_A, LULESH_B, PRIME, copy_trace

PARAMEDIR = find_paramedir()
GENERATED = variants()
pytestmark = [pytest.mark.real_traces,
              pytest.mark.skipif(PARAMEDIR is None, reason="paramedir not found (SYNTHTRACE_PARAMEDIR or PATH)")]


def _lines(prv: Path) -> list[str]:
    return prv.read_text().splitlines(keepends=True)


def _blank_lines(prv: Path) -> None:
    lines = _lines(prv)
    prv.write_text("".join(lines[:40] + ["\n", " \t\n"] + lines[40:] + ["\n", "\n"]))


def _crlf(prv: Path) -> None:
    prv.write_bytes(prv.read_bytes().replace(b"\n", b"\r\n"))


def _out_of_order(prv: Path) -> None:
    """A state record of one thread moved 150 lines earlier: that thread's records are out of time order."""
    lines = _lines(prv)
    i = next(k for k in range(200, len(lines)) if lines[k].startswith("1:"))
    moved = lines.pop(i)
    lines.insert(i - 150, moved)
    prv.write_text("".join(lines))


def _state_past_the_end(prv: Path) -> None:
    """The last state record of the trace ends after the header's end time."""
    lines = _lines(prv)
    i = max(k for k, ln in enumerate(lines) if ln.startswith("1:"))
    f = lines[i].rstrip("\n").split(":")
    f[6] = str(int(f[6]) + 10**9)
    lines[i] = ":".join(f) + "\n"
    prv.write_text("".join(lines))


#: variant -> (edit, whether paramedir is shown the edited trace). Out of time order, paramedir is shown the
#: trace as recorded: it loads the shuffled one too, but loses the moved state's time on some threads (seen on
#: the LULESH 7+1 run: 58,147 ns, exactly the moved state), while synthtrace sorts the records back in place.
VARIANTS: dict[str, tuple[Callable[[Path], None], bool]] = {
    "as_recorded": (lambda prv: None, True),
    "blank_lines": (_blank_lines, True),
    "crlf": (_crlf, True),
    "out_of_time_order": (_out_of_order, False),
    "state_past_the_end": (_state_past_the_end, True),
}


def _assert_same_view(prv: Path, read: Path, workdir: Path) -> None:
    import warnings

    import synthtrace

    pm = paramedir_view(PARAMEDIR, prv, workdir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing .pcf/.row, negative counters: said, and checked elsewhere
        bursts, _ = synthtrace.read_trace(read)
    running_ns, n_bursts = synthtrace_view(bursts)
    assert running_ns == {k: v for k, v in pm.running_ns.items() if v}, pm.messages
    assert n_bursts == {k: v for k, v in pm.running_bursts.items() if v}, pm.messages


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("trace", ALL_PARAVER, ids=lambda p: p.stem)
def test_synthtrace_reads_what_paramedir_loads(tmp_path, trace, variant):
    edit, paramedir_sees_it = VARIANTS[variant]
    prv = copy_trace(trace, tmp_path / "t")
    edit(prv)
    _assert_same_view(prv if paramedir_sees_it else trace, prv, tmp_path / "pm")


def test_gzip_trace_reads_as_paramedir_loads_it(tmp_path):
    prv = copy_trace(PRIME, tmp_path / "t")
    gz = prv.with_name(prv.name + ".gz")
    with prv.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    _assert_same_view(gz, gz, tmp_path / "pm")


@pytest.mark.slow
def test_exported_merged_trace_loads_in_paramedir_with_the_merged_figures(tmp_path, run_cli):
    wh, traces = tmp_path / "wh", tmp_path / "traces"
    for prv in (LULESH_A, LULESH_B):
        copy_trace(prv, traces)
    assert run_cli("ingest", traces, "-w", wh, "--experiment", "lulesh")[0] == 0
    code, out, err = run_cli("merge", "lulesh", "-w", wh, "--export-prv", tmp_path / "merged" / "lulesh")
    assert code == 0, err
    exported = tmp_path / "merged" / "lulesh.prv"
    pm = paramedir_view(PARAMEDIR, exported, tmp_path / "pm")
    code, out, err = run_cli("sql", "SELECT appl, task, thread, sum(duration_ns) AS t, count(*) AS n "
                             "FROM merged_bursts GROUP BY ALL", "-w", wh, "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert {(r["appl"], r["task"], r["thread"]): r["t"] for r in rows} == {k: v for k, v in pm.running_ns.items() if v}
    assert {(r["appl"], r["task"], r["thread"]): r["n"] for r in rows} == \
        {k: v for k, v in pm.running_bursts.items() if v}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_forms_read_as_paramedir_loads_them(tmp_path, name):
    """The forms Extrae and Paraver's tools write (testing/paraver_variants.py): paramedir's per-thread Running
    time and bursts are those of the timeline the trace was written from, and synthtrace's are paramedir's."""
    v = GENERATED[name]
    prv = write(v, tmp_path / "t")
    pm = paramedir_view(PARAMEDIR, prv, tmp_path / "pm")
    want_ns: dict[tuple[int, int, int], int] = {}
    want_n: dict[tuple[int, int, int], int] = {}
    for b in v.bursts:
        key = (b.appl, b.task, b.thread)
        want_ns[key] = want_ns.get(key, 0) + b.end_ns - b.start_ns
        want_n[key] = want_n.get(key, 0) + 1
    assert ({k: x for k, x in pm.running_ns.items() if x}, {k: x for k, x in pm.running_bursts.items() if x}) == \
        (want_ns, want_n), pm.messages
    _assert_same_view(prv, prv, tmp_path / "pm2")


def test_new_format_trace_is_refused_by_both(tmp_path):
    """paramedir does not load a trace whose first line is ``new format``; synthtrace refuses it too (one line)."""
    from synthtrace.tracelib.errors import TraceFormatError
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

    prv = write(GENERATED["extrae"], tmp_path / "t")
    prv.write_text("new format\n" + prv.read_text())
    with pytest.raises(RuntimeError, match="could not load"):
        paramedir_view(PARAMEDIR, prv, tmp_path / "pm")
    with pytest.raises(TraceFormatError, match="'new format' trace"):
        ParaverTrace(prv)


@pytest.mark.slow
def test_many_tasks_read_as_paramedir_loads_them(tmp_path):
    """3,000 one-thread tasks on 63 nodes: paramedir's per-thread Running time is the generator's, and
    synthtrace's is paramedir's (20,000 tasks agree too, but paramedir takes about a minute for them)."""
    prv, running = write_many_tasks(tmp_path / "t", 3000)
    pm = paramedir_view(PARAMEDIR, prv, tmp_path / "pm")
    assert {k: x for k, x in pm.running_ns.items() if x} == running
    _assert_same_view(prv, prv, tmp_path / "pm2")
