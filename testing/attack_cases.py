"""Structure-aware hostile traces (issue 23): copies of the real Paraver traces, cut short so that one costs
milliseconds to read, each with one *semantic* defect that keeps every line well-formed (counts out of range,
records naming tasks, cpus or times outside the header, counters named like key columns, floods and gzip bombs),
and OTF2 archives with one defect each (:mod:`testing.hostile_otf2`). Used by ``tests/test_fuzz_ingest.py`` (a
bounded sample) and ``benchmarks/bench_attack.py`` (thousands).

Every case must end in exit 0 or in exit 2 with one error line, never a traceback, with bounded memory.
"""
from __future__ import annotations

import functools
import gzip
import random
import shutil
from pathlib import Path

from testing import hostile_otf2
from testing.traces import JACOBI, LULESH_B, PRIME

PARAVER_SOURCES = (PRIME, JACOBI, LULESH_B)
#: the semantic defects of :func:`paraver_case`
PARAVER_DEFECTS = (
    "none", "neg_cpus", "huge_cpus", "comm_count", "task_outside", "thread_zero", "appl_outside", "cpu_outside",
    "time_past_int64", "negative_time", "state_backwards", "value_past_int64", "negative_counter",
    "message_outside", "message_negative_size", "key_counter", "duplicate_counter", "out_of_order", "crlf",
    "blank_flood", "gzip", "long_name", "repeated_type", "end_before_records",
)
#: defects added by the second attack rerun (fresh mutations: not drawn by the suite's fuzz test until they hold)
FRESH_PARAVER_DEFECTS = (
    "type_past_int64", "wide_event", "type_flood", "nodes_huge", "appl_count_huge", "threads_huge", "duration_unit",
    "pcf_type_huge", "pcf_binary", "row_huge", "deep_nesting", "exit_without_enter", "same_time_flood",
    "state_value_huge", "message_to_self", "message_backwards", "header_extra_fields", "truncated_gzip",
    "multi_member_gzip", "utf8_bom", "header_only", "event_no_pairs", "cpu_zero", "task_zero",
)
#: defects added by session 25's rerun for what landed since session 22 (the column-wise ``c:`` lines, their cap and
#: redefinitions; a body cut mid-record for ``--salvage``): drawn with the fresh ones by the attack bench only
SESSION25_PARAVER_DEFECTS = (
    "comm_redefined", "comm_hostile_lines", "comm_flood", "comm_after_records", "comm_task_outside", "cut_short",
)
#: past the reader's cap of c: lines (~58 MB, a minute of CPU or more to refuse): one case per bench chunk, as the bomb
OVER_CAP = "comm_over_cap"
#: fields of a hostile ``c:`` line: digits past int64 and the header digit caps, signs, blanks, bytes no number holds
#: (no NUL: the file would be refused as binary before its lines are read)
_COMM_ATOMS = (b"1", b"2", b"0", b"4", b"99", b"9" * 19, b"9" * 25, b"9" * 400, b"-1", b"+3", b" ", b"\t", b"\r",
               b"", b"x", b"1e5", b"2147483647", b"2147483648", b"18446744073709551616", b"0" * 40 + b"1", b"\xff",
               b"0x10", b"1.5", b"\xc3\xa9")
_KEY_NAMES = ("task", "run_id", "START_NS", "burst_seq", "_hidden", "Duration_ns", "mpi_call")
_BOMB_NEWLINES = 80 << 20  # a gzip bomb: 80 MiB of newlines in about 80 KB


def _cut(src: Path, rnd: random.Random, max_records: int) -> tuple[list[bytes], list[bytes]]:
    """(header and communicator lines, the first records) of ``src``: a short, still valid trace."""
    lines = src.read_bytes().splitlines(keepends=True)
    head = [ln for ln in lines[:1]] + [ln for ln in lines[1:400] if ln.startswith(b"c:")]
    records = [ln for ln in lines[len(head):] if ln[:2] in (b"1:", b"2:", b"3:")]
    return head, records[: rnd.randint(max_records // 4, max_records)]


def _fields(line: bytes) -> list[bytes]:
    return line.rstrip(b"\r\n").split(b":")


def _join(fields: list[bytes]) -> bytes:
    return b":".join(fields) + b"\n"


def _pick(records: list[bytes], rnd: random.Random, kind: bytes) -> int | None:
    idx = [i for i, r in enumerate(records) if r.startswith(kind)]
    return rnd.choice(idx) if idx else None


def paraver_case(dest: Path, rnd: random.Random, defect: str | None = None, max_records: int = 300) -> tuple[Path, str]:
    """A short copy of a real trace under ``dest`` with one ``defect`` (random if None); returns (.prv path,
    defect)."""
    defect = defect or rnd.choice(PARAVER_DEFECTS)
    src = rnd.choice(PARAVER_SOURCES)
    head, records = _cut(src, rnd, max_records)
    pcf = src.with_suffix(".pcf").read_text()
    if defect in FRESH_PARAVER_DEFECTS or defect in SESSION25_PARAVER_DEFECTS or defect == OVER_CAP:
        return _fresh_case(dest, rnd, defect, src, head, records, pcf)
    header = _fields(head[0])
    text_header = head[0].rstrip(b"\r\n").decode()
    if defect in ("neg_cpus", "huge_cpus"):
        res = text_header.split("):", 1)[1].split(":")[1]  # NODES(cpus,...)
        n, _, cpus = res.partition("(")
        counts = cpus.rstrip(")").split(",")
        if defect == "neg_cpus":
            counts[rnd.randrange(len(counts))] = str(-rnd.randint(1, 5))
        else:
            counts[0], counts[-1] = str(2**64 + 5), str(-(2**64))
        head[0] = text_header.replace(res, f"{n}({','.join(counts)})", 1).encode() + b"\n"
    elif defect == "comm_count":
        count = str(2 ** rnd.choice([31, 63, 70])).encode()
        head[0] = _join(header[:-1] + [header[-1].rsplit(b",", 1)[0] + b"," + count])
    elif defect == "end_before_records":
        dur = header[1]
        unit = dur[len(dur.rstrip(b"_nsum")):] if not dur.isdigit() else b""
        header[1] = b"1" + unit
        head[0] = _join(header)
    elif records and defect in ("task_outside", "thread_zero", "appl_outside", "cpu_outside", "time_past_int64",
                                "negative_time", "state_backwards"):
        i = _pick(records, rnd, b"1:" if defect == "state_backwards" else rnd.choice([b"1:", b"2:"])) or 0
        f = _fields(records[i])
        where = {"task_outside": 3, "thread_zero": 4, "appl_outside": 2, "cpu_outside": 1}
        if defect in where:
            f[where[defect]] = {"task_outside": b"4097", "thread_zero": b"0", "appl_outside": b"7",
                                "cpu_outside": b"1000000"}[defect]
        elif defect == "time_past_int64":
            f[5] = str(2**63 + rnd.randint(0, 1000)).encode()
        elif defect == "negative_time":
            f[5] = b"-5"
        elif f[0] == b"1" and len(f) >= 8:
            f[5], f[6] = f[6], f[5] if f[5] != f[6] else str(int(f[5]) - 1).encode()
        records[i] = _join(f)
    elif records and defect in ("value_past_int64", "negative_counter", "repeated_type"):
        i = _pick(records, rnd, b"2:")
        if i is not None:
            f = _fields(records[i])
            k = 6 + 2 * rnd.randrange((len(f) - 6) // 2) if len(f) >= 8 else 6
            if defect == "value_past_int64":
                f[k + 1] = str(2**64 + 7).encode()
            elif defect == "negative_counter":
                f[k], f[k + 1] = b"42000050", b"-1"
            else:
                f += [f[6], f[7]]
            records[i] = _join(f)
    elif defect in ("message_outside", "message_negative_size"):
        t = next((_fields(r)[5] for r in records if r.startswith(b"1:")), b"0")
        size = b"-1" if defect == "message_negative_size" else b"64"
        peer = b"99" if defect == "message_outside" else b"1"
        msg = b":".join([b"3", b"1", b"1", b"1", b"1", t, t, b"1", b"1", peer, b"1", t, t, size, b"5"]) + b"\n"
        records.insert(len(records) // 2, msg)
    elif defect in ("key_counter", "duplicate_counter"):
        name = rnd.choice(_KEY_NAMES) if defect == "key_counter" else "PAPI_TOT_INS"
        pcf = pcf.replace("PAPI_TOT_CYC [", f"{name} [", 1).replace("(PAPI_TOT_CYC)", f"({name})", 1)
    elif defect == "out_of_order" and len(records) > 2:
        i = rnd.randrange(len(records) - 1)
        records[i], records[i + 1] = records[i + 1], records[i]
    body = b"".join(head + records)
    if defect == "crlf":
        body = body.replace(b"\n", b"\r\n")
    if defect == "blank_flood":
        body = b"".join(head[:1]) + b"\r\n" * (1 << 20) + b"".join(head[1:] + records)
    stem = ("n" * 230) if defect == "long_name" else f"{src.stem}.{defect}"
    dest.mkdir(parents=True, exist_ok=True)
    prv = dest / (f"{stem}.prv.gz" if defect == "gzip" else f"{stem}.prv")
    prv.write_bytes(gzip.compress(body, compresslevel=1) if defect == "gzip" else body)
    (dest / f"{stem}.pcf").write_text(pcf)
    shutil.copyfile(src.with_suffix(".row"), dest / f"{stem}.row")
    return prv, defect


def gzip_bomb(dest: Path) -> Path:
    """PRIME's header, 80 MiB of newlines, then its records, as a .prv.gz of about 100 KB (written once per
    folder; later calls return it)."""
    prv = dest / "bomb.prv.gz"
    if prv.exists():
        return prv
    dest.mkdir(parents=True, exist_ok=True)
    header, _, body = PRIME.read_bytes().partition(b"\n")
    with gzip.open(prv, "wb", compresslevel=6) as fh:
        fh.write(header + b"\n")
        block = b"\n" * (1 << 20)
        for _ in range(_BOMB_NEWLINES >> 20):
            fh.write(block)
        fh.write(body)
    for suffix in (".pcf", ".row"):
        shutil.copyfile(PRIME.with_suffix(suffix), dest / f"bomb{suffix}")
    return prv


def otf2_case(dest: Path, rnd: random.Random, defects: tuple[str, ...] = hostile_otf2.DEFECTS,
              chunk_source: Path | None = None) -> tuple[Path, str]:
    """An OTF2 archive with one random defect of ``defects`` and random parameters (peer rank, metric reading);
    a :data:`~testing.hostile_otf2.CHUNK_DEFECTS` one damages a copy of the multi-chunk archive written once at
    ``chunk_source`` (by default beside ``dest``)."""
    defect = rnd.choice(defects)
    if defect in hostile_otf2.CHUNK_DEFECTS:
        return hostile_otf2.chunk_damaged(dest, defect, rnd, chunk_source or dest.with_name("chunked")), defect
    reading = rnd.choice([float("nan"), float("inf"), float("-inf"), 1e19, -1e30, 2.0**63, 123.0])
    peer = rnd.choice([2, 3, 99, 2**31 - 1, 2**32 - 2])
    anchor = hostile_otf2.write(dest, defect, peer=peer, reading=reading if defect in hostile_otf2.REFUSED else None)
    return anchor, defect


def _fresh_case(dest: Path, rnd: random.Random, defect: str, src: Path, head: list[bytes], records: list[bytes],
                pcf: str) -> tuple[Path, str]:
    """One of :data:`FRESH_PARAVER_DEFECTS` applied to the cut trace (``head``, ``records``, ``pcf``) of ``src``."""
    text_header = head[0].rstrip(b"\r\n").decode()
    row = src.with_suffix(".row").read_bytes()
    first = next((_fields(r) for r in records if r.startswith((b"1:", b"2:"))), [b"1", b"1", b"1", b"1", b"1", b"0"])
    where, t = first[1:5], int(first[5]) if first[5].isdigit() else 0
    gz = False
    if defect == "type_past_int64" and (i := _pick(records, rnd, b"2:")) is not None:
        f = _fields(records[i])
        f[6] = str(2**64 + 3).encode()
        records[i] = _join(f)
    elif defect == "wide_event":
        pairs = [x for k in range(3000) for x in (str(90000000 + k).encode(), str(k).encode())]
        records.insert(len(records) // 2, _join([b"2", *where, str(t).encode(), *pairs]))
    elif defect == "type_flood":
        records += [_join([b"2", *where, str(t + k).encode(), str(91000000 + k).encode(), b"1"]) for k in range(1500)]
    elif defect in ("nodes_huge", "appl_count_huge", "threads_huge", "duration_unit", "header_extra_fields"):
        nodes = text_header.split("):", 1)[1].split(":")[1]
        if defect == "nodes_huge":
            text_header = text_header.replace(nodes, "1000000000000(4)", 1)
        elif defect == "appl_count_huge":
            fields = text_header.split("):", 1)[1].split(":")
            text_header = text_header.replace(f"{nodes}:{fields[2]}:", f"{nodes}:{2**40}:", 1)
        elif defect == "threads_huge":
            text_header = text_header.replace("(1:1", "(4000000000:1", 1).replace("(24:1", "(4000000000:1", 1)
        elif defect == "duration_unit":
            dur = text_header.split("):", 1)[1].split(":")[0]
            text_header = text_header.replace(f"):{dur}:", f"):{rnd.choice(['123_xs', '12e5_ns', '_ns', '-5_ns'])}:", 1)
        else:
            text_header += rnd.choice([":::", ",7,8", ":x", "\t"])
        head[0] = text_header.encode() + b"\n"
    elif defect == "pcf_type_huge":
        pcf = pcf.replace("42000050", str(2**70), 1).replace("40000050", str(2**70), 1)
    elif defect == "pcf_binary":
        pcf = pcf.replace("PAPI_TOT_CYC", "PAPI\x00TOT\udc80CYC", 1)
    elif defect == "row_huge":
        row = b"LEVEL THREAD SIZE 4000000000\n" + row
    elif defect in ("deep_nesting", "exit_without_enter"):
        value = (lambda k: str(k % 10 + 1).encode()) if defect == "deep_nesting" else (lambda k: b"0")
        records += [_join([b"2", *where, str(t + k).encode(), b"50000001", value(k)]) for k in range(20000)]
    elif defect == "same_time_flood":
        records += [_join([b"1", *where, str(t).encode(), str(t).encode(), b"1"]) for _ in range(50000)]
    elif defect == "state_value_huge" and (i := _pick(records, rnd, b"1:")) is not None:
        f = _fields(records[i])
        f[7] = str(rnd.choice([2**40, 2**63 + 1, -3])).encode()
        records[i] = _join(f)
    elif defect in ("message_to_self", "message_backwards"):
        late, early = str(t + 1000).encode(), str(t + 10).encode()
        send = (late, late) if defect == "message_backwards" else (early, early)
        recv = (early, early) if defect == "message_backwards" else (late, late)
        records.insert(len(records) // 2, b":".join([b"3", *where, *send, *where, *recv, b"64", b"5"]) + b"\n")
    elif defect == "header_only":
        records = []
    elif defect == "event_no_pairs":
        records.insert(len(records) // 2, _join([b"2", *where, str(t).encode()]))
    elif defect in ("cpu_zero", "task_zero") and (i := _pick(records, rnd, rnd.choice([b"1:", b"2:"]))) is not None:
        f = _fields(records[i])
        f[1 if defect == "cpu_zero" else 3] = b"0"
        records[i] = _join(f)
    elif defect.startswith("comm_"):
        head, records = _hostile_communicators(rnd, defect, head, records)
    body = b"".join(head + records)
    if defect == "cut_short" and records:  # cut inside the body, most often mid-record (no newline at the end)
        body = body[:rnd.randint(len(b"".join(head)) + 1, len(body) - 1)]
    if defect == "utf8_bom":
        body = b"\xef\xbb\xbf" + body
    if defect in ("truncated_gzip", "multi_member_gzip"):
        gz = True
        cut = len(body) // 2
        body = (gzip.compress(body, compresslevel=1)[: rnd.randint(20, 400)] if defect == "truncated_gzip"
                else gzip.compress(body[:cut]) + gzip.compress(body[cut:]))
    stem = f"{src.stem}.{defect}"
    dest.mkdir(parents=True, exist_ok=True)
    prv = dest / (f"{stem}.prv.gz" if gz else f"{stem}.prv")
    prv.write_bytes(body)
    (dest / f"{stem}.pcf").write_bytes(pcf.encode("utf-8", "surrogateescape"))
    (dest / f"{stem}.row").write_bytes(row)
    return prv, defect


def _hostile_communicators(rnd: random.Random, defect: str, head: list[bytes],
                           records: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """(header lines, records) with the ``c:`` lines of a ``comm_*`` defect of :data:`SESSION25_PARAVER_DEFECTS`:
    the world redefined with other members, a mix of malformed lines, 300,000 valid ones, 4.2M empty ones (past
    the reader's cap of 4,194,304 lines and members, ~50 MB), lines among the records, members beyond the tasks."""
    if defect == "comm_redefined":
        members = [str(rnd.randint(1, 64)).encode() for _ in range(rnd.randint(0, 5))]
        extra = [_join([b"c", b"1", rnd.choice([b"1", b"2", b"3"]), str(len(members)).encode(), *members])
                 for _ in range(rnd.randint(1, 4))]
    elif defect == "comm_hostile_lines":  # random fields, or a valid line with one field (or its end) hostile
        extra = [b"c:" + b":".join(_near_valid_communicator(rnd) if rnd.random() < 0.5 else
                                   [rnd.choice(_COMM_ATOMS) for _ in range(rnd.randint(0, 9))]) + b"\n"
                 for _ in range(rnd.randint(1, 40))]
    elif defect == "comm_flood":
        extra = [_communicator_block("flood")]
    elif defect == "comm_over_cap":
        extra = [_communicator_block("over_cap"), b"".join(b"c:1:%d:0\n" % -k for k in range(rnd.randint(1, 5000)))]
    elif defect == "comm_task_outside":
        extra = [_join([b"c", b"1", b"77", b"3", b"1", str(rnd.choice([5000, 2**31 - 1, 2**31])).encode(), b"2"])]
    else:  # comm_after_records: a communicator line where records are
        records.insert(rnd.randint(0, len(records)), b"c:1:50:2:1:2\n")
        return head, records
    return head + extra, records


@functools.cache
def _communicator_block(kind: str) -> bytes:
    """300,000 valid lines of two members (``flood``), or 4,194,304 empty ones, the reader's cap (``over_cap``),
    made once per process (seconds each)."""
    if kind == "flood":
        return b"".join(b"c:1:%d:2:%d:%d\n" % (100 + k, k % 7 + 1, k % 5 + 1) for k in range(300_000))
    return b"".join(b"c:1:%d:0\n" % (10 + k) for k in range(1 << 22))


def _near_valid_communicator(rnd: random.Random) -> list[bytes]:
    """The fields after ``c:`` of a line ``APPL:ID:N:TASK...`` with N one off at times, and one field (or the end)
    hostile at times."""
    tasks = [str(rnd.randint(1, 16)).encode() for _ in range(rnd.randint(0, 6))]
    fields = [b"1", str(rnd.randint(1, 9)).encode(), str(len(tasks) + rnd.choice([0, 0, 0, 1, -1])).encode(), *tasks]
    if rnd.random() < 0.5:
        fields[rnd.randrange(len(fields))] = rnd.choice(_COMM_ATOMS)
    fields[-1] += rnd.choice([b"", b"", b" ", b"\r", b"  ", b":", b" x", b"\t"])
    return fields


# ---------------------------------------------------------------------------------- damaged stored Parquet files
#: the experiment of the warehouse the damaged-file cases damage (the LULESH pair, merged)
DAMAGED_EXPERIMENT = EXP = "lulesh-8r"


def _random_bytes(data: bytes) -> bytes:
    return bytes((i * 7919 + 13) % 251 for i in range(3000))  # fixed "random" bytes: no Parquet frame


def _cut_footer(data: bytes) -> bytes:
    return data[: len(data) // 2] + data[-8:]  # valid magic and footer length; the footer itself is gone


def _empty(data: bytes) -> bytes:
    return b""


def _damaged_page(data: bytes) -> bytes:
    """The footer intact, bytes in the middle (a data page) overwritten: found only when the rows are read."""
    mid = len(data) // 3
    return data[:mid] + bytes(255 - b for b in data[mid:mid + 512]) + data[mid + 512:]


def _flipped_bit(data: bytes) -> bytes:
    """One bit flipped in the middle of the file (bit rot): no reader's decoder need notice it."""
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0x10]) + data[mid + 1:]


#: how a stored file is damaged (the suite's test takes the frame damages; the attack bench also the page damages)
DAMAGE = {"random": _random_bytes, "cut_footer": _cut_footer, "empty": _empty}
PAGE_DAMAGE = {"page": _damaged_page, "bit": _flipped_bit}

#: stored table -> (its files below the warehouse, the commands that read it, the night stages that read it);
#: "{out}" in a command is a folder outside the warehouse for its outputs (made by the caller: an output's folder is
#: not made). The ``detect`` command is no reader here: with the one night of history of this warehouse it reads no
#: stored table (attack 11 E7: it reads none below the nights a detection needs) and exits 0 whatever is damaged
#: (attack 16); its stage is listed, for callers that let it read any history (tests: detect_reads_any_history)
STORED_READERS: dict[str, tuple[str, list[list[str]], list[str]]] = {
    "bursts": ("runs/*/bursts/*.parquet",
               [["merge", EXP], ["pop"], ["sql", "SELECT count(*) FROM bursts"]],
               ["merge", "pop", "detect"]),
    "mpi_calls": ("runs/*/mpi_calls.parquet",
                  [["merge", EXP], ["pop"], ["archetypes", EXP, "--no-discover"],
                   ["export", EXP, "-o", "{out}/e.json"], ["report", "-o", "{out}/r.html"]],
                  ["archetypes", "detect"]),
    "mpi_messages": ("runs/*/mpi_messages.parquet", [["merge", EXP]], ["merge", "detect"]),
    "events": ("runs/*/events/*.parquet",
               [["sql", "SELECT count(*) FROM events"], ["merge", EXP, "--export-prv", "{out}/m"]], []),
    "merged": ("experiments/*/merged_bursts.parquet",
               [["archetypes", EXP, "--no-discover"], ["export", EXP, "-o", "{out}/e.json"],
                ["report", "-o", "{out}/r.html"], ["train", "--folds", "2"],
                ["sql", "SELECT count(*) FROM merged_bursts"]],
               ["archetypes", "report"]),
    "models": ("models/*/model.parquet", [["predict", "--experiment", EXP], ["models"]], ["retrain"]),
}


def add_model_record(wh: Path) -> None:
    """A model folder whose record the damaged-file cases damage (any Parquet file stands for it: it is damaged in
    every case that reads it, so no model needs training), committed as a writer commits one (with its folder's
    checksums)."""
    from synthtrace.warehouse.layout import Warehouse

    with Warehouse(wh).staged(wh / "models" / "ipc-hgb-20260101T000000-000000") as model:
        shutil.copyfile(next((wh / "experiments").glob("*/merge_quality.parquet")), model / "model.parquet")
