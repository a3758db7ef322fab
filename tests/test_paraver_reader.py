"""The Paraver reader on the real traces: counts against a naive scan, hand-checked bursts, round-trip safety."""
from __future__ import annotations

import functools
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testing.traces import ALL_PARAVER, JACOBI, LULESH_A, LULESH_B, PRIME, copy_trace
from testing.naive_paraver import naive_bursts
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.header import format_header, parse_header
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

pytestmark = pytest.mark.real_traces
TOT_INS = 42_000_050


@pytest.mark.parametrize("prv", ALL_PARAVER, ids=lambda p: p.stem)
@pytest.mark.parametrize("chunk_bytes", [1 << 25, 4096])
def test_bursts_and_instructions_match_a_naive_scan(prv, chunk_bytes):
    bursts, _, _ = ParaverTrace(prv, chunk_bytes=chunk_bytes).read_tables("r")
    ours = (bursts.group_by("appl", "task", "thread")
            .agg(pl.len().alias("n"), pl.col("PAPI_TOT_INS").fill_null(0).sum().alias("ins")))
    got = {(r["appl"], r["task"], r["thread"]): (r["n"], r["ins"]) for r in ours.iter_rows(named=True)}
    assert got == naive_bursts(prv, TOT_INS)


def test_burst_seq_is_dense_and_in_time_order():
    bursts, calls, _ = ParaverTrace(LULESH_A, chunk_bytes=8192).read_tables("r")
    for frame, seq in ((bursts, "burst_seq"), (calls, "call_seq")):
        per = frame.group_by("appl", "task", "thread").agg(
            (pl.col(seq) == pl.int_range(pl.len())).all().alias("dense"),
            pl.col("start_ns").is_sorted().alias("sorted"))
        assert per["dense"].all() and per["sorted"].all()


def _burst(bursts: pl.DataFrame, task: int, seq: int) -> dict:
    return bursts.filter((pl.col("appl") == 1) & (pl.col("task") == task) & (pl.col("thread") == 1)
                         & (pl.col("burst_seq") == seq)).row(0, named=True)


def test_hand_checked_lulesh_bursts():
    bursts, calls, summary = ParaverTrace(LULESH_A).read_tables("r")
    b0 = _burst(bursts, 1, 0)  # .prv lines 38 and 502
    assert (b0["start_ns"], b0["end_ns"], b0["duration_ns"]) == (6890, 151092712, 151085822)
    assert b0["PAPI_TOT_INS"] == 1247911355 and b0["PAPI_TOT_CYC"] == 460985705
    assert b0["LONGEST_LAT_CACHE:MISS"] == 4242230 and b0["PAPI_REF_CYC"] == 295986908
    assert b0["mpi_call"] == "MPI_Comm_rank"
    b1 = _burst(bursts, 1, 1)  # lines 505-510: Running 151110973-151144868, closed by MPI_Isend
    assert (b1["start_ns"], b1["end_ns"], b1["PAPI_TOT_INS"], b1["mpi_call"]) == (
        151110973,
        151144868,
        249997,
        "MPI_Isend",
    )
    assert b1["call_site"].startswith("CommSend")
    # the exit counters at 151150479 (a separate line) belong to the MPI call, not to burst 2
    b2 = _burst(bursts, 1, 2)
    assert (b2["start_ns"], b2["PAPI_TOT_INS"]) == (151150479, 252901)
    assert list(summary.counters) == ["LONGEST_LAT_CACHE:MISS", "PAPI_REF_CYC", "PAPI_TOT_CYC", "PAPI_TOT_INS"]
    # the uncore readers (appl 2) have no Running state: no bursts
    assert bursts.filter(pl.col("appl") == 2).height == 0


def test_hand_checked_lulesh_messages():
    _, calls, _ = ParaverTrace(LULESH_A).read_tables("r")
    # .prv line 985: task 8 sends 209088 bytes to task 4 (tag 2048) from the Isend entered at 163080875
    send = calls.filter((pl.col("task") == 8) & (pl.col("start_ns") == 163080875)).row(0, named=True)
    assert (send["mpi_call"], send["bytes_sent"], send["peer"], send["tag"]) == ("MPI_Isend", 209088, 4, 2048)
    recv = calls.filter((pl.col("task") == 4) & (pl.col("start_ns") <= 151864175) & (pl.col("end_ns") >= 151864175)
                        & (pl.col("mpi_call") == "MPI_Irecv")).row(0, named=True)
    assert recv["bytes_recv"] >= 209088 and recv["peer"] == 8
    # every byte of the type-3 records is attributed once on each side
    total = sum(int(line.split(":")[13]) for line in LULESH_A.read_text().splitlines() if line.startswith("3:"))
    assert calls["bytes_recv"].sum() - calls.filter(pl.col("mpi_kind") == "collective")["bytes_recv"].sum() == total
    assert calls["bytes_sent"].sum() - calls.filter(pl.col("mpi_kind") == "collective")["bytes_sent"].sum() == total


def test_hand_checked_prime_bursts():
    bursts, calls, _ = ParaverTrace(PRIME).read_tables("r")
    b0 = _burst(bursts, 1, 0)  # lines 44 and 113
    assert (b0["start_ns"], b0["end_ns"], b0["mpi_call"]) == (15144257, 535118827, "MPI_Init")
    assert (b0["PAPI_TOT_INS"], b0["PAPI_TOT_CYC"], b0["PAPI_L1_DCM"], b0["RESOURCE_STALLS"]) == (
        66791502,
        78760277,
        254116,
        15616747,
    )
    b1 = _burst(bursts, 1, 1)  # lines 114 and 159
    assert (b1["start_ns"], b1["end_ns"], b1["mpi_call"], b1["PAPI_TOT_INS"], b1["PAPI_BR_MSP"]) == (
        535154914, 535233133, "MPI_Comm_size", 41330, 418)
    collectives = calls.filter(pl.col("mpi_kind") == "collective")
    assert set(collectives["mpi_call"].unique()) == {"MPI_Bcast", "MPI_Reduce"}
    assert collectives["comm"].is_not_null().all()


def test_openmp_threads_keep_their_numbers():
    bursts, calls, _ = ParaverTrace(JACOBI).read_tables("r")
    assert calls.height == 0
    assert bursts["task"].unique().to_list() == [1]
    assert bursts["thread"].n_unique() > 1


def test_header_round_trips_for_every_real_trace():
    for prv in ALL_PARAVER:
        line = prv.open().readline()
        h = parse_header(line, str(prv))
        h2 = parse_header(format_header(h))
        assert (h2.threads_per_task, h2.cpus_per_node, h2.duration_ns, h2.n_communicators) == (
            h.threads_per_task, h.cpus_per_node, h.duration_ns, h.n_communicators)


@pytest.mark.parametrize("header,reason", [
    ("#Paraver (01/01/20 at 10:00):1000_us:1(4):1:2(1:1,1:1)", None),
    ("#Paraver (01/01/2020 at 10:00):1000:0:1:2(2:1,1:1)", None),
    ("#Paraver (01/01/20 at 10:00):1000_ns:2(2,2):2:1(1:1):1(1:2),3", None),
    ("#Paraver (01/01/20 at 10:00):10x:1(4):1:2(1:1,1:1)", "duration"),
    ("#Paraver (01/01/20 at 10:00):1000_ns:1(4):2:2(1:1,1:1)", "applications"),
    ("#Paraver (01/01/20 at 10:00):1000_ns:1(4):1:3(1:1,1:1)", "tasks"),
    ("Paraver 1000", "no Paraver header"),
])
def test_header_forms(header, reason):
    if reason is None:
        h = parse_header(header)
        assert h.n_appl >= 1 and h.duration_ns > 0
    else:
        with pytest.raises(TraceFormatError, match=reason):
            parse_header(header)


def test_microsecond_traces_are_converted_to_ns(tmp_path):
    prv = tmp_path / "us.prv"
    prv.write_text("#Paraver (01/01/20 at 10:00):100_us:1(1):1:1(1:1),0\n"
                   "1:1:1:1:1:0:10:1\n2:1:1:1:1:10:50000001:3:42000050:500\n2:1:1:1:1:12:50000001:0\n")
    bursts, calls, _ = ParaverTrace(prv).read_tables("r")
    assert bursts.row(0, named=True)["end_ns"] == 10_000
    assert calls.row(0, named=True)["duration_ns"] == 2_000
    assert bursts["42000050"].to_list() == [500]  # no .pcf: numeric name


def test_absolute_counters_become_deltas(tmp_path):
    prv = tmp_path / "abs.prv"
    prv.write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                   "1:1:1:1:1:0:10:1\n2:1:1:1:1:0:43000050:1000\n2:1:1:1:1:10:50000001:3:43000050:1500\n"
                   "2:1:1:1:1:12:50000001:0:43000050:1600\n1:1:1:1:1:12:30:1\n2:1:1:1:1:30:50000001:3:43000050:2000\n")
    bursts, _, _ = ParaverTrace(prv).read_tables("r")
    assert bursts["43000050"].to_list() == [500, 400]


@functools.cache
def _real_lines() -> tuple[str, ...]:
    return tuple(ln for ln in LULESH_B.read_text().splitlines()[15:400] if ln[:1] in "123")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_lines_give_only_format_errors(tmp_path_factory, data):
    """Any mutation of real records either parses or raises TraceFormatError, never another exception."""
    lines = list(_real_lines())
    i = data.draw(st.integers(0, len(lines) - 1))
    fields = lines[i].split(":")
    op = data.draw(st.sampled_from(["replace_field", "drop_field", "add_field", "truncate", "garbage", "swap"]))
    if op == "replace_field":
        k = data.draw(st.integers(0, len(fields) - 1))
        fields[k] = data.draw(
            st.sampled_from(["", "-1", "x", "1e3", "99999999999999999999999", "0", "4294967296", " 7"])
        )
        lines[i] = ":".join(fields)
    elif op == "drop_field":
        fields.pop(data.draw(st.integers(0, len(fields) - 1)))
        lines[i] = ":".join(fields)
    elif op == "add_field":
        lines[i] += ":" + str(data.draw(st.integers(0, 2**64)))
    elif op == "truncate":
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    elif op == "garbage":
        lines[i] = data.draw(st.text(max_size=30).filter(lambda s: "\n" not in s and "\r" not in s))
    else:
        j = data.draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    d = tmp_path_factory.mktemp("mut")
    prv = copy_trace(LULESH_B, d)
    header = LULESH_B.read_text().splitlines()[:15]
    prv.write_text("\n".join(header + lines) + "\n", encoding="utf-8", errors="surrogateescape")
    try:
        ParaverTrace(prv).read_tables("r")
    except TraceFormatError as exc:
        assert exc.line is None or exc.line >= 1
        assert str(prv) in str(exc)


def test_zero_length_mpi_call_separates_bursts(tmp_path):
    prv = tmp_path / "zero.prv"
    prv.write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                   "1:1:1:1:1:0:10:1\n2:1:1:1:1:10:50000002:8:42000050:100\n2:1:1:1:1:10:50000002:0\n"
                   "1:1:1:1:1:10:20:1\n2:1:1:1:1:20:50000001:3:42000050:50\n2:1:1:1:1:25:50000001:0\n")
    for chunk in (1 << 20, 40, 60):  # chunk ends falling on the call's entry and exit lines too
        bursts, calls, _ = ParaverTrace(prv, chunk_bytes=chunk).read_tables("r")
        assert bursts.select("start_ns", "end_ns", "mpi_call", "42000050").rows() == [
            (0, 10, "MPI_Barrier", 100), (10, 20, "MPI_Isend", 50)], chunk
        assert calls["duration_ns"].to_list() == [0, 5]


def test_caller_names_keep_their_brackets(tmp_path):
    prv = tmp_path / "call.prv"
    prv.write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                   "1:1:1:1:1:0:10:1\n2:1:1:1:1:10:50000001:3:42000050:5:70000001:3:80000001:4\n2:1:1:1:1:12:50000001:0\n")
    prv.with_suffix(".pcf").write_text(
        "EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n\n"
        "EVENT_TYPE\n9   50000001    MPI Point-to-point\nVALUES\n3   MPI_Isend\n0   Outside MPI\n\n"
        "EVENT_TYPE\n0    70000001    Caller at level 1\nVALUES\n3 operator[] [std::vector<int>::operator[]]\n\n"
        "EVENT_TYPE\n0    80000001    Caller line at level 1\nVALUES\n4 42 (vec.h, app)\n\n")
    bursts, _, _ = ParaverTrace(prv).read_tables("r")
    assert bursts["call_site"].to_list() == ["std::vector<int>::operator[] (vec.h:42)"]


def test_calls_spilled_to_disk_come_back_as_held_in_memory(tmp_path, monkeypatch):
    """A trace whose calls outgrow the memory the reader holds them in spills them to Parquet parts and reads
    them back in order: the run's MPI calls and messages are the same as when they stay in memory."""
    from synthtrace.tracelib.formats import call_store
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.ingest import ingest_trace

    def stored(name: str) -> dict[str, pl.DataFrame]:
        wh = Warehouse(tmp_path / name)
        run = wh.run_dir(ingest_trace(wh, LULESH_A).run_id)
        return {t: pl.read_parquet(run / f"{t}.parquet") for t in ("mpi_calls", "mpi_messages")}

    held = stored("held")
    spilled_parts: list[str] = []
    write = pl.DataFrame.write_parquet

    def spy(frame, path, *args, **kwargs):
        if "_calls" in str(path):
            spilled_parts.append(str(path))
        return write(frame, path, *args, **kwargs)

    monkeypatch.setattr(call_store, "HOLD_BYTES", 0)
    # a part per chunk: messages cross part boundaries
    monkeypatch.setattr(call_store, "SPILL_PART_BYTES", 0, raising=False)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", spy)
    spilled = stored("spilled")
    assert len(spilled_parts) > 2, "the calls were not spilled in several parts"
    for table, frame in held.items():
        assert spilled[table].equals(frame), table


def test_spilled_calls_get_their_messages_one_part_at_a_time(tmp_path, monkeypatch):
    """Issue 27 (memory of a 2 GB trace): the calls of a trace that spilled them come back with their messages
    attached part by part, so that writing them never holds every call at once (the whole table with its message
    columns was 1.4 GB of a 2 GB trace's ingest); the calls and their messages are those of an in-memory read."""
    from synthtrace.tracelib.formats import call_store

    def read(spill: Path | None) -> tuple[pl.DataFrame, pl.DataFrame]:
        stream = ParaverTrace(LULESH_A, chunk_bytes=1 << 16).read("r", spill=spill)
        for _ in stream:
            pass
        return stream.summary.calls.collect(), stream.summary.message_ends

    calls, ends = read(None)
    attached: list[int | None] = []
    attach = call_store.with_message_columns

    def spy(frame, columns):
        attached.append(frame.height if isinstance(frame, pl.DataFrame) else None)
        return attach(frame, columns)

    monkeypatch.setattr(call_store, "HOLD_BYTES", 0)
    monkeypatch.setattr(call_store, "SPILL_PART_BYTES", 0, raising=False)
    monkeypatch.setattr(call_store, "with_message_columns", spy)
    spilled_calls, spilled_ends = read(tmp_path / "_calls")
    assert len(attached) > 2 and None not in attached and max(attached) < calls.height, attached
    assert spilled_calls.equals(calls) and spilled_ends.equals(ends)


def test_a_line_longer_than_the_read_buffer_is_read_whole(tmp_path):
    """Attack 8 B9: a record line longer than the read buffer was reported as a trace "cut off mid-record" (the
    buffer grew, the read limit did not). The same trace read with a 4 KiB buffer gives the tables of a whole-file
    buffer, the long line's events included."""
    prv = copy_trace(PRIME, tmp_path)
    lines = prv.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line[:2] in (b"1:", b"2:"))
    first = lines[at].split(b":")
    pairs = ":".join(f"{90_000_000 + i}:{i}" for i in range(1, 3001))  # ~50 KB: the 4 KiB buffer doubles 4 times
    lines.insert(at + 1, b":".join([b"2", *first[1:6]]) + f":{pairs}\n".encode())
    prv.write_bytes(b"".join(lines))
    small = ParaverTrace(prv, chunk_bytes=4096).read_tables("r")
    whole = ParaverTrace(prv, chunk_bytes=1 << 25).read_tables("r")
    assert small[0].equals(whole[0]) and small[1].equals(whole[1])
    ordered = [r[2].events.sort(r[2].events.columns) for r in (small, whole)]
    assert ordered[0].equals(ordered[1])
    assert small[2].events.height == ParaverTrace(PRIME).read_tables("r")[2].events.height + 3000


def _read_whole(prv: Path, chunk_bytes: int = 1 << 25) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame,
                                                                   pl.DataFrame, tuple[str, ...]]:
    """Bursts and calls as read, the messages and other events as sets (sorted: a time-sorted copy may list them
    in another order), and the warnings of one read of ``prv``."""
    bursts, calls, summary = ParaverTrace(prv, chunk_bytes=chunk_bytes).read_tables("r")
    messages, events = summary.messages, summary.events
    return bursts, calls, messages.sort(messages.columns), events.sort(events.columns), summary.warnings


def _record_lines(lines: list[bytes]) -> dict[int, int]:
    """The record lines of each type (1 state, 2 event, 3 communication) among ``lines``."""
    return {k: sum(1 for line in lines if line[:2] == f"{k}:".encode()) for k in (1, 2, 3)}


#: what the warning of records written twice says
_WRITTEN_TWICE = "record lines repeat, field for field"


def test_records_written_twice_are_said_once_with_their_count(tmp_path):
    """Attack 8 B10 and attack 9 C6: a trace whose every record appears twice (a thread's file merged twice) was read
    as twice the bursts (B10 said so and kept them). A record line written twice is one record: the tables are the
    real trace's, and one warning gives the count of the lines read once, per record type; the real trace says
    nothing of the kind."""
    prv = copy_trace(PRIME, tmp_path)
    lines = prv.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line[:2] in (b"1:", b"2:", b"3:"))
    prv.write_bytes(b"".join(lines[:at] + [x for line in lines[at:] for x in (line, line)]))
    *once, once_said = _read_whole(PRIME)
    *twice, said = _read_whole(prv, chunk_bytes=4096)
    for a, b in zip(once, twice):
        assert a.equals(b)
    said = [w for w in said if _WRITTEN_TWICE in w]
    n = _record_lines(lines[at:])
    assert len(said) == 1 and said[0].split(": ")[1].startswith(f"{sum(n.values())} {_WRITTEN_TWICE}")
    assert f"{n[2]} event records" in said[0] and f"{n[1]} state records" in said[0]
    assert not any(_WRITTEN_TWICE in w or "repeat the one before them" in w for w in once_said)


def _doubled(lines: list[bytes], at: int, how: str) -> tuple[list[bytes], list[bytes]]:
    """The trace with the body from ``at`` changed, and the lines written twice: every 10th record line written twice
    beside itself (``tenth``), or the records of its second half written again at its end (``tail``, out of time
    order)."""
    body = lines[at:]
    if how == "tail":
        return lines + body[len(body) // 2:], body[len(body) // 2:]
    again = [line for line in body[::10] if line[:2] in (b"1:", b"2:", b"3:")]
    return lines[:at] + [x for i, line in enumerate(body) for x in ((line, line) if i % 10 == 0 else (line,))], again


@pytest.mark.parametrize(("prv", "how"), [(PRIME, "tenth"), (PRIME, "tail"), (LULESH_A, "tenth"), (LULESH_A, "tail")],
                         ids=["prime-tenth", "prime-tail", "lulesh-tenth", "lulesh-tail"])
def test_records_written_twice_are_read_once(tmp_path, prv, how):
    """Attack 9 C6: with every 10th record line written twice, MPI calls had phantom twins (fixed: an MPI entry
    written twice is one call), but the counter samples of a doubled event line were still summed twice into its burst
    and its call, and a communication record written twice was two messages (LULESH: the calls' n_messages and bytes
    too). A record line written twice is one record: every table is the real trace's (the counters included), and one
    warning gives the count of lines read once, per record type; the real traces give no such warning."""
    copy = copy_trace(prv, tmp_path)
    lines = copy.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line[:2] in (b"1:", b"2:", b"3:"))
    doubled, again = _doubled(lines, at, how)
    copy.write_bytes(b"".join(doubled))
    *once, once_said = _read_whole(prv)
    *twice, said = _read_whole(copy, chunk_bytes=4096)
    for a, b in zip(once, twice):
        assert a.equals(b)
    said = [w for w in said if _WRITTEN_TWICE in w]
    n = _record_lines(again)
    assert len(said) == 1
    assert said[0].split(": ")[1].startswith(f"{sum(n.values())} {_WRITTEN_TWICE}")
    assert all(f"{n[k]} {kind} records" in said[0] for k, kind in ((1, "state"), (2, "event"), (3, "communication"))
               if n[k])
    assert not any(_WRITTEN_TWICE in w for w in once_said)


def test_a_line_whose_hash_matches_but_not_its_fields_is_kept(tmp_path):
    """Attack 12: a record line was taken for a twin by its 64-bit hash alone, (h ^ v) * M per field. Flipping bit 63
    of two event values of a line flips bit 63 of the hash and back, so a line of the same thread and time with
    other values had the same hash and was dropped as 'written twice'. A matching hash is confirmed field by field:
    the crafted line is kept (its event read); a real twin, in any number form (leading zeros), still is one."""
    prv = copy_trace(PRIME, tmp_path)
    lines = prv.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line[:2] == b"2:")
    head = b":".join(lines[at].split(b":")[:6])  # 2:cpu:appl:task:thread:time of a real event line
    flip = 1 << 63
    a = head + b":77000001:5:77000002:7\n"
    b = head + b":77000001:%d:77000002:%d\n" % ((5 ^ flip) - (1 << 64), (7 ^ flip) - (1 << 64))
    twin = head + b":77000001:005:77000002:7\n"
    prv.write_bytes(b"".join(lines[:at + 1] + [a, b, twin] + lines[at + 1:]))
    events = ParaverTrace(prv).read_tables("r")[2].events.filter(pl.col("type").is_in([77000001, 77000002]))
    assert sorted(events["value"].to_list()) == sorted([5, 7, (5 ^ flip) - (1 << 64), (7 ^ flip) - (1 << 64)])
