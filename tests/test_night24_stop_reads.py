"""Review 23 (6b): only OTF2 reads stopped on a night's Ctrl-C; a Paraver ingest and a merge stage were waited for
5 s, then cut by the process's end (left to the next night). A Paraver read stops at its next chunk and a night's
merge at its next step when :func:`~synthtrace.tracelib.formats.otf2.stop_reads` is called (the night's stop asks
it of every running job), nothing stored. Counted by chunks and steps, never by time."""
from __future__ import annotations

import threading

import pytest

from synthtrace.pipelines import jobs
from synthtrace.tracelib.errors import BadInputError, ReadStopped
from synthtrace.tracelib.formats.otf2 import stop_reads
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.warehouse import Warehouse
from testing.traces import LULESH_A, LULESH_B, copy_trace

pytestmark = pytest.mark.real_traces

#: bytes of a chunk: the 843 KiB LULESH trace in some 14
CHUNK_BYTES = 64 * 1024


def test_stop_reads_stops_a_paraver_read_in_another_thread_at_its_next_chunk():
    whole: list[int] = []
    list(ParaverTrace(LULESH_A, chunk_bytes=CHUNK_BYTES).read("whole", progress=whole.append))
    chunks = len(whole)
    chunks_read, first_read, told = [], threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def progress(n_bytes: int) -> None:
        chunks_read.append(n_bytes)
        first_read.set()
        assert told.wait(120)  # the first chunk read, the reader waits here for the main thread

    def work() -> None:
        try:
            list(ParaverTrace(LULESH_A, chunk_bytes=CHUNK_BYTES).read("r", progress=progress))
        except BaseException as exc:  # the test looks at what ended the read
            outcome["raised"] = exc

    thread = threading.Thread(target=work, name="night24-reader")
    thread.start()
    assert first_read.wait(120)
    assert stop_reads() >= 1  # the read running in the other thread
    told.set()
    thread.join(120)
    assert isinstance(outcome.get("raised"), ReadStopped), outcome
    assert not isinstance(outcome["raised"], BadInputError)  # a sound trace: a night must not set it aside
    # the chunk being parsed ahead and the one waiting for the reader are used, no other
    assert len(chunks_read) <= 3 < chunks, f"{len(chunks_read)} of {chunks} chunks read, the stop came after one"
    assert stop_reads() == 0  # the stopped read is no longer running


def test_a_paraver_read_whose_stop_is_set_reads_no_chunk():
    stop = threading.Event()
    stop.set()
    chunks_read: list[int] = []
    with pytest.raises(ReadStopped, match="lulesh"):
        list(ParaverTrace(LULESH_A, chunk_bytes=CHUNK_BYTES, stop=stop).read("r", progress=chunks_read.append))
    assert chunks_read == []


def test_a_night_s_merge_stops_at_its_next_step_and_commits_nothing(tmp_path, monkeypatch):
    from synthtrace.pipelines.cli import main
    from synthtrace.warehouse import merged

    for prv in (LULESH_A, LULESH_B):
        copy_trace(prv, tmp_path / "lulesh")
    assert main(["ingest", str(tmp_path / "lulesh"), "--experiment", "lulesh-8r", "-w", str(tmp_path / "wh")]) == 0
    read = merged.merge_inputs

    def read_then_stopped(*args, **kwargs):  # the night stopped while the merge read its runs
        runs = read(*args, **kwargs)
        assert stop_reads() >= 1
        return runs

    monkeypatch.setattr(merged, "merge_inputs", read_then_stopped)
    wh = Warehouse(tmp_path / "wh")
    with pytest.raises(ReadStopped):
        jobs.merge(wh, "lulesh-8r")
    assert not (wh.experiment("lulesh-8r").dir / "merged_bursts.parquet").exists()
    assert list(wh.staging_dir.iterdir()) == []  # its spill went with it
    monkeypatch.setattr(merged, "merge_inputs", read)
    assert jobs.merge(wh, "lulesh-8r")["n_bursts"] > 0  # the next night merges it
