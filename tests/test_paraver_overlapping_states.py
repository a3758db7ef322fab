"""A thread's state records that overlap (carried from session 19: the reader took both Running intervals, and pop
showed 300 % efficiency). A thread's states are one timeline: paraver-kernel draws a thread's state from each state
record's begin up to the next state record's begin (``IntervalThread`` steps from one STATE+BEGIN record to the next;
``Useful``/``State As Is`` take the state of the record the interval starts at), so an overlap has no one reading;
Extrae's mpi2prv never writes one (none in the real traces). The reader refuses it: file, line, reason."""
from __future__ import annotations

import pytest

from testing.traces import PRIME, copy_trace
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

pytestmark = pytest.mark.real_traces


def _with_overlap(folder, state: str = "1"):
    """prime_v0 copied into ``folder`` with a state record inserted after a thread's first Running record, beginning
    one unit inside it: (the trace, the inserted line's number, its thread's begin and the first record's end)."""
    prv = copy_trace(PRIME, folder)
    lines = prv.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("1:") and ln.rstrip().split(":")[7] == "1")
    f = lines[at].rstrip().split(":")
    begin, end = int(f[5]), int(f[6])
    lines.insert(at + 1, ":".join([*f[:5], str(begin + 1), str(end), state]) + "\n")
    prv.write_text("".join(lines))
    return prv, at + 2, f[2:5], begin + 1, end


@pytest.mark.parametrize("state", ["1", "3"], ids=["running", "waiting"])
@pytest.mark.parametrize("chunk_bytes", [1 << 25, 4096])
def test_a_state_beginning_inside_the_previous_one_is_refused_naming_its_line(tmp_path, state, chunk_bytes):
    prv, line, (appl, task, thread), begin, end = _with_overlap(tmp_path, state)
    with pytest.raises(TraceFormatError) as caught:
        ParaverTrace(prv, chunk_bytes=chunk_bytes).read_tables("r")
    assert caught.value.path == str(prv) and caught.value.line == line
    assert caught.value.reason == (
        f"state record of appl {appl} task {task} thread {thread} begins at {begin} ns, before the thread's previous "
        f"state ends at {end} ns: a thread's states must not overlap")


def test_ingest_of_overlapping_running_states_is_one_line_and_stores_nothing(tmp_path, run_cli):
    prv, line, _, _, _ = _with_overlap(tmp_path / "t")
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {prv}:{line}: state record of appl")
    assert not list((tmp_path / "wh").rglob("*.parquet"))
