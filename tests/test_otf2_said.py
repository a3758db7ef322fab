"""What the OTF2 reader finds is said (issue 23, attack 9 C9 and the warnings it kept to itself): every warning of
the reader reaches the user once, as the Paraver reader's do, and bytes after the events a location's definitions
announce (``cat 1.evt 1.evt > 1.evt``, which OTF2 reads as the original) are said with the file and the byte where
they start. Cases on the real ping-pong archive."""
from __future__ import annotations

from pathlib import Path

import pytest

from testing.traces import TRACES, copy_archive

pytestmark = pytest.mark.real_traces


def _archive(tmp_path: Path) -> Path:
    return copy_archive("ping-pong-otf2", tmp_path / "pp")


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize(("damage", "said"), [
    ("missing", ["missing events file of location 1 (rank 1, thread 1) (60 events announced): read without its "
                 "events (--salvage)"]),
    ("cut", ["(--salvage: kept the events before the cut)", "rank 1 ends inside MPI_Recv; that call was dropped"]),
])
def test_every_warning_of_the_otf2_reader_is_said_once(tmp_path, run_cli, damage, said):
    """A location read without its events file or cut short under --salvage, and a call left open, were kept in
    the run's record alone: only the B7 (escaped names) and B8 (unpaired messages) warnings were printed."""
    archive = _archive(tmp_path)
    evt = archive / "traces" / "1.evt"
    if damage == "missing":
        evt.unlink()
    else:
        evt.write_bytes(evt.read_bytes()[:500])
    code, out, err = run_cli("ingest", archive, "--salvage", "-w", tmp_path / "wh")
    assert code == 0, err
    warned = _warnings(err)
    for text in said:
        assert len([w for w in warned if text in w]) == 1, (text, err)
    assert len(warned) == len(set(warned)), err


def test_data_after_the_announced_events_is_said_with_its_offset(tmp_path, run_cli):
    """``cat 1.evt 1.evt > 1.evt``: read as the original, exit 0, not a word. Now the same run and one warning
    naming the file and the byte where the unread copy starts (the announced events were read whole: said, not
    refused)."""
    archive = _archive(tmp_path)
    evt = archive / "traces" / "1.evt"
    size = evt.stat().st_size
    evt.write_bytes(evt.read_bytes() * 2)
    code, out, err = run_cli("ingest", archive, "-w", tmp_path / "wh")
    assert code == 0 and "42 bursts, 40 MPI calls" in out, (out, err)
    (warned,) = _warnings(err)
    assert f"{evt}: {size} bytes after the 60 events" in warned and f"(from byte {size})" in warned, err


def test_data_after_the_last_of_several_chunks_is_found(tmp_path):
    """An events file of several chunks (OTF2's smallest chunk, 256 KiB): only the chunk headers and the last
    chunk are read; the file as written has nothing after its events, a copy appended or zeros have."""
    from synthtrace.tracelib.formats.otf2.evt_file import events_end
    from testing.otf2_variants import region_steps

    chunk = 256 * 1024
    region_steps(tmp_path / "a", 30_000, chunk)
    evt = tmp_path / "a" / "traces" / "0.evt"
    data = evt.read_bytes()
    assert len(data) > 2 * chunk and events_end(evt, chunk, 60_000).trailing is None
    evt.write_bytes(data + data)
    assert events_end(evt, chunk, 60_000).trailing == (len(data), len(data))
    evt.write_bytes(data + bytes(100))
    assert events_end(evt, chunk, 60_000).trailing == (len(data), 100)


@pytest.mark.parametrize("order", ["little", "big"])
def test_a_long_record_is_stepped_over_by_its_eight_byte_length(tmp_path, order):
    """A record of 255 bytes or more has 0xFF as its length byte and its length in the next 8 bytes, in the file's
    byte order (OTF2_Buffer.h): stepped over whole, so its payload's bytes are never read as tokens."""
    from synthtrace.tracelib.formats.otf2.evt_file import events_end

    mark = {"little": 0x42, "big": 0x23}[order]
    header = bytes([3, mark]) + (1).to_bytes(8, order) + (2).to_bytes(8, order)
    long_record = bytes([20, 0xFF]) + (300).to_bytes(8, order) + bytes([2]) * 300  # END_OF_FILE bytes inside
    body = header + bytes([5]) + (7).to_bytes(8, order) + long_record + bytes([12, 1, 3, 2, 1])
    evt = tmp_path / "0.evt"
    evt.write_bytes(body)
    assert events_end(evt, 1 << 20, 2).trailing is None
    evt.write_bytes(body + b"appended")
    assert events_end(evt, 1 << 20, 2).trailing == (len(body), 8)


def test_a_copy_appended_to_a_file_whose_last_chunk_is_full_is_found(tmp_path):
    """review21: a file ending exactly on a chunk boundary with a copy appended (``cat 1.evt 1.evt``): the copy's
    last chunk looks whole on its own (its END_OF_FILE after the last announced event); the headers say the
    original's chunk holds that event, and the bytes after it are said."""
    from synthtrace.tracelib.formats.otf2.evt_file import events_end

    header = bytes([3, 0x42]) + (1).to_bytes(8, "little") + (2).to_bytes(8, "little")
    body = header + bytes([5]) + (7).to_bytes(8, "little") + bytes([20, 3, 9, 9, 9]) + bytes([12, 1, 3, 2, 1])
    evt = tmp_path / "0.evt"
    evt.write_bytes(body)
    assert events_end(evt, len(body), 2).trailing is None
    evt.write_bytes(body + body)
    assert events_end(evt, len(body), 2).trailing == (len(body), len(body))


def _written_twice(source: Path, root: Path, how: str, every: int = 1) -> Path:
    """``source`` rewritten by the ``otf2`` wheel's writer (read back as the original), with every ``every``-th MPI
    call of each rank written with a record twice in place: ``each`` (its Enter, MpiSend/MpiRecv/collective records
    and Leave, each twice) or ``enter`` (its Enter alone)."""
    import otf2
    from otf2.events import Enter, Leave

    def mpi(ev: object) -> bool:
        return isinstance(ev, (Enter, Leave)) and ev.region.name.startswith("MPI_")

    with otf2.reader.open(str(source / "traces.otf2")) as reader, \
            otf2.writer.open(str(root), definitions=reader.definitions) as writer:
        by_location: dict = {}
        for loc, ev in reader.events:
            by_location.setdefault(loc, []).append(ev)
        for loc, events in by_location.items():
            write, n_calls, inside = writer.event_writer_from_location(loc), 0, None
            for ev in events:
                if inside is None and mpi(ev) and isinstance(ev, Enter):
                    n_calls += 1
                    inside = ev.region if n_calls % every == 0 else None
                    if inside is not None:
                        write(ev)
                elif inside is not None and how == "each":
                    write(ev)
                if inside is not None and mpi(ev) and isinstance(ev, Leave) and ev.region == inside:
                    inside = None
                write(ev)
    return root / "traces.otf2"


@pytest.mark.parametrize(("source", "how", "every", "n_said"), [
    ("ping-pong-otf2", "each", 1, 56),  # 20 calls: 20 Enter, 20 Leave, 16 message records
    ("ping-pong-otf2", "each", 3, 17),
    ("ping-pong-otf2", "enter", 1, 20),
    ("ping-pong-otf2-papi", "each", 2, 28),
])
def test_mpi_records_written_twice_are_read_once_and_said(tmp_path, source, how, every, n_said):
    """Attack 9 C6 for OTF2: records of MPI calls written twice in place (what a buffer flushed twice leaves) were
    read without a word: a twin Enter nested every later call inside the rank's first (``enter``: 0 MPI calls, 2
    bursts), and twin MpiSend/MpiRecv records paired into two messages each (``each``: 32 messages of 16.7 MB in all
    instead of 16 of 8.4 MB). Now the calls, bursts and messages are the original's, whatever the chunk size, and
    each location's file says how many records repeated the one before them, as the Paraver reader says it."""
    from synthtrace.tracelib.formats.otf2 import Otf2Trace

    original = Otf2Trace(TRACES / "otf2" / source / "traces.otf2").read_tables("r")
    anchor = _written_twice(TRACES / "otf2" / source, tmp_path / "twice", how, every)
    for chunk in (200_000, 7):
        trace = Otf2Trace(anchor, chunk_events=chunk)
        bursts, calls, summary = trace.read_tables("r")
        assert calls.rows() == original[1].rows() and bursts.rows() == original[0].rows()
        assert summary.messages.rows() == original[2].messages.rows() and summary.messages.height == 16
        assert sorted(summary.warnings) == [
            f"{anchor.parent / 'traces' / f'{rank}.evt'}: {n_said} MPI records repeat the record before them on "
            f"location {rank} (rank {rank}, thread 1), alike in time and every field (records written twice?); each "
            "read once, as a record written twice cannot be two MPI calls or two messages" for rank in (0, 1)]


def test_two_calls_alike_within_one_tick_of_a_coarse_clock_are_two(tmp_path):
    """A clock of one tick per microsecond: two MPI_Send calls of the same message to the same rank within one
    tick have records alike in every field, but an Enter and a Leave lie between their MpiSend records, so they
    are two calls and two messages, not a record written twice (nothing is said)."""
    import warnings

    from testing.otf2_variants import _Archive
    from synthtrace.tracelib.formats.otf2 import Otf2Trace

    a = _Archive(tmp_path / "coarse", ranks=2, threads=1, resolution=10**6)
    a.mpi("MPI_Send", "MPI_Recv")
    for rank, call in ((0, "MPI_Send"), (1, "MPI_Recv")):
        e = a.events(rank)
        e.program_begin(0, "coarse", [])
        e.enter(0, "main")
        for _ in range(2):  # both calls within the tick at 1 us
            e.enter(1000, call)
            (e.mpi_send if rank == 0 else e.mpi_recv)(1000, 1 - rank, a.world, 7, 64)
            e.leave(1000, call)
        e.leave(5000, "main")
        e.program_end(5000, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all
        _, calls, summary = Otf2Trace(a.close()).read_tables("r")
    assert calls.height == 4 and summary.messages.height == 2 and summary.warnings == ()
