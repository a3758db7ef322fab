"""Point-to-point messages of an OTF2 run: send and receive records matched across locations."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.bursts import MESSAGE_SCHEMA
from synthtrace.tracelib.formats.collectives import size_reason
from synthtrace.tracelib.formats.held_frames import HeldFrames
from synthtrace.tracelib.formats.otf2.events import _IRECV, _IRECV_REQ, _ISEND, _MRECV, _PROBE, _RECV, _SEND
from synthtrace.tracelib.formats.row_order import stable_order

_SEND_KINDS = [_SEND, _ISEND]
#: the messages of an OTF2 run: MESSAGE_SCHEMA and ``r_phys_ns``, the receive's completion (ns): its ``MpiRecv`` or
#: ``MpiIrecv`` event, in the call that completed it (the wait or test of an ``MPI_Irecv``, whose logical receive
#: time ``r_time_ns`` is its ``MpiIrecvRequest``), as the Paraver reader keeps a record's physical receive time; and
#: ``comm``, the communicator the halves name (a receive's own when it has no send: its call may name none, an
#: ``MPI_Irecv(MPI_ANY_SOURCE)`` whose request record names no communicator)
OTF2_MESSAGE_SCHEMA = {**MESSAGE_SCHEMA, "r_phys_ns": pl.Int64, "comm": pl.Int64}
_VIOLATION_SCHEMA = {"s_task": pl.Int32, "s_thread": pl.Int32, "tag": pl.Int64, "t": pl.Int64, "r_done": pl.Int64}
#: the records that name the rank they send to or receive from (a probe's rank is its Mrecv's)
_PEER_KINDS = [_SEND, _ISEND, _RECV, _IRECV]
_P2P_SCHEMA = {"task": pl.Int32, "thread": pl.Int32, "kind": pl.Int8, "time_ns": pl.Int64, "pos": pl.Int64,
               "peer": pl.Int64, "comm": pl.Int64, "tag": pl.Int64, "size": pl.Int64, "req": pl.UInt64}
#: the column the records are kept with (:func:`_with_receivers`): the task receiving each record's message
_RECEIVER = "_receiver"


def _matched_probes_as_receives(lf: pl.LazyFrame) -> pl.LazyFrame:
    """An ``MpiMrecv`` receives the message its location's last ``MpiProbe`` of the same message id found (OTF2
    3.1, MPI_Mprobe + MPI_Mrecv): it becomes a receive with that probe's sender, communicator and tag."""
    probes = (lf.filter(pl.col("kind") == _PROBE)
              .select("task", "thread", "req", "pos", pl.col("peer").alias("_peer"), pl.col("comm").alias("_comm"),
                      pl.col("tag").alias("_tag")).sort("pos"))
    mrecvs = (lf.filter(pl.col("kind") == _MRECV).sort("pos")
              .join_asof(probes, on="pos", by=["task", "thread", "req"], strategy="backward", check_sortedness=False)
              .with_columns(pl.lit(_RECV, pl.Int8).alias("kind"), pl.col("_peer").alias("peer"),
                            pl.col("_comm").alias("comm"), pl.col("_tag").alias("tag"))
              .drop("_peer", "_comm", "_tag"))
    return pl.concat([lf.filter(~pl.col("kind").is_in([_PROBE, _MRECV])), mrecvs])


def peer_tasks(p2p: pl.DataFrame, comm_ranks: pl.DataFrame, self_comms: set[int]) -> np.ndarray:
    """Per record of ``p2p``, the task of the rank its send goes to or its receive comes from (int64): the
    record's own task on an MPI_COMM_SELF communicator, -1 when the rank is no rank of the communicator, -2 for the
    records that name no rank of their own (an ``MpiIrecvRequest``, an ``MpiMrecv``, a probe). Looked up in NumPy:
    a Polars join or filter of every record held 300 MB for a 3 M-record run (``_communicators`` defines each rank
    of a communicator once, and OTF2's ids are 32-bit)."""
    kind, task = p2p.get_column("kind").to_numpy(), p2p.get_column("task").to_numpy().astype(np.int64)
    comm, rank = p2p.get_column("comm").to_numpy(), p2p.get_column("peer").to_numpy()
    named = np.isin(kind, _PEER_KINDS)
    own = named & np.isin(comm, np.fromiter(self_comms, dtype=np.int64, count=len(self_comms)))
    other = named & ~own
    keys = (comm_ranks.get_column("comm").to_numpy().astype(np.uint64) << np.uint64(32)) | comm_ranks.get_column(
        "rank").to_numpy().astype(np.uint64)
    order = np.argsort(keys)
    keys, tasks = keys[order], comm_ranks.get_column("task").to_numpy().astype(np.int64)[order]
    wanted = (comm[other].astype(np.uint64) << np.uint64(32)) | rank[other].astype(np.uint64)
    peers = np.full(p2p.height, -2, dtype=np.int64)
    peers[own] = task[own]
    if keys.size:
        at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
        peers[other] = np.where(keys[at] == wanted, tasks[at], -1)
    else:
        peers[other] = -1
    return peers


#: point-to-point records held in memory before a read with a spill folder writes them there (bytes)
P2P_HOLD_BYTES = 64 * 2**20
#: the buckets of receiving tasks (task modulo this) whose records are kept and paired apart
P2P_BUCKETS = 16


class _Parts:
    """Frames kept by key: in memory, or, with ``folder``, written there as uncompressed Parquet parts whenever
    more than :data:`P2P_HOLD_BYTES` are held; :meth:`take` gives a key's frames back (and forgets them)."""

    def __init__(self, folder: Path | None, names: Iterator[int]):
        self.folder, self._names = folder, names
        self._held: dict[object, HeldFrames] = {}
        self._files: dict[object, list[Path]] = {}
        self._held_bytes = 0

    def add(self, key: object, frame: pl.DataFrame) -> None:
        self._held.setdefault(key, HeldFrames()).append(frame)
        self._held_bytes += frame.estimated_size()
        if self.folder is not None and self._held_bytes > P2P_HOLD_BYTES:
            self._spill()

    def _spill(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for key, frames in self._held.items():
            if frames:
                self._files.setdefault(key, []).append(self.folder / f"p2p-{next(self._names):08d}.parquet")
                pl.concat(frames).write_parquet(self._files[key][-1], compression="uncompressed", statistics=False)
                frames.clear()
        self._held_bytes = 0

    def frames(self, key: object) -> Iterator[pl.DataFrame]:
        """The frames of ``key`` one at a time (those written first), forgotten as they are given (a file is
        deleted once read: parting a bucket writes it again, a share at a time)."""
        for f in self._files.pop(key, []):
            frame = pl.read_parquet(f, glob=False)
            f.unlink()
            yield frame
        held = self._held.pop(key, [])
        self._held_bytes -= sum(frame.estimated_size() for frame in held)
        while held:
            yield held.pop(0)

    def take(self, key: object) -> pl.DataFrame | None:
        """The frames of ``key`` concatenated (None without any)."""
        frames = list(self.frames(key))
        return pl.concat(frames) if frames else None


class P2pRecords:
    """The point-to-point records of one read of ``anchor``, judged as they come (:func:`check_peers`,
    :func:`check_sizes`) and kept by receiving task in :data:`P2P_BUCKETS` buckets: in memory, or, with
    ``folder``, written there as uncompressed Parquet parts whenever more than :data:`P2P_HOLD_BYTES` are held
    (issue 23: a run's records, ~0.6 bytes per byte of archive, were held and paired all at once). Each bucket is
    read back and paired alone (:meth:`matched`); a bucket holding a task that receives more than
    :data:`MATCH_ROWS` records is parted first, a frame at a time (:meth:`_paired_apart`)."""

    def __init__(self, comm_ranks: pl.DataFrame, self_comms: set[int], anchor: Path, folder: Path | None = None):
        self.comm_ranks, self.self_comms, self.anchor, self.folder = comm_ranks, self_comms, anchor, folder
        self._names = itertools.count()
        self._parts = _Parts(folder, self._names)
        self._received: dict[int, int] = {}  # records per receiving task

    def add(self, p2p: pl.DataFrame) -> None:
        """Judge and keep a chunk of records (``_P2P_SCHEMA``)."""
        peers = peer_tasks(p2p, self.comm_ranks, self.self_comms)
        check_peers(p2p, peers, self.comm_ranks, self.anchor)  # security: issue 23 item 8
        check_sizes(p2p, self.anchor)
        p2p = _with_receivers(p2p, peers)
        del peers
        receivers = p2p.get_column(_RECEIVER).to_numpy()
        tasks, counts = np.unique(receivers, return_counts=True)
        for t, n in zip(tasks.tolist(), counts.tolist()):
            self._received[t] = self._received.get(t, 0) + n
        bucket = receivers % P2P_BUCKETS
        for b in np.unique(bucket):
            self._parts.add(int(b), p2p[np.flatnonzero(bucket == b)])

    def matched(self, check_order: bool = True) -> pl.DataFrame:
        """The messages (:func:`match_messages`), paired a bucket at a time; ``check_order``: refuse a message a
        thread received from itself before sending it."""
        pieces, bad = [], []
        for b in range(P2P_BUCKETS):
            big = sorted(t for t, n in self._received.items() if t % P2P_BUCKETS == b and n > MATCH_ROWS)
            if big:
                messages, violations = self._paired_apart(b, big)
            elif (records := self._parts.take(b)) is not None:
                messages, violations = _paired(records, self.comm_ranks, self.self_comms)
                del records
            else:
                continue
            pieces.append(messages)
            bad.append(violations)
        if check_order and bad:
            _check_own_order(pl.concat(bad), self.anchor)
        return _sorted_by_columns(pieces) if pieces else pl.DataFrame(schema=OTF2_MESSAGE_SCHEMA)

    def _paired_apart(self, bucket: int, big: list[int]) -> tuple[pl.DataFrame, pl.DataFrame]:
        """:func:`_paired` of a bucket holding tasks (``big``) that receive more than :data:`MATCH_ROWS` records
        (a gather written with point-to-point, master/worker, an I/O rank; attack 14: its bucket was read, copied
        and resolved whole, ~2.4 MB of memory per MB of archive), never holding the bucket: its frames are parted
        one at a time into the other tasks' records and, per big task, its sends by sending task and its receives
        by request (or message) id, ``shares`` ways; each share of receives is resolved (:func:`_resolved_receives`)
        and parted by sending task, and each share of sending tasks is paired with its sends. MPI pairs within a
        (sender, receiver, communicator, tag), and a receive's look-ups stay within its (thread, request id)."""
        parts = _Parts(self.folder, self._names)
        shares = {t: min(64, -(-self._received[t] // MATCH_ROWS)) for t in big}
        for frame in self._parts.frames(bucket):
            receivers = frame.get_column(_RECEIVER).to_numpy()
            kind = frame.get_column("kind").to_numpy()
            is_send = np.isin(kind, _SEND_KINDS)
            by_req = np.isin(kind, [_IRECV_REQ, _IRECV, _PROBE, _MRECV])  # receives with a look-up by id
            share_of = np.where(is_send, frame.get_column("task").to_numpy(),
                                np.where(by_req, frame.get_column("req").to_numpy().astype(np.int64) & (2**62 - 1),
                                         frame.get_column("pos").to_numpy()))
            mine = np.isin(receivers, big)
            if not mine.all():
                parts.add("rest", frame[np.flatnonzero(~mine)])
            for t in big:
                for side, rows in (("sends", is_send), ("receives", ~is_send)):
                    at = np.flatnonzero((receivers == t) & rows)
                    share = share_of[at] % shares[t]
                    for s in np.unique(share):
                        parts.add((side, t, int(s)), frame[at[share == s]])
            del frame
        pieces, bad = [], []
        if (rest := parts.take("rest")) is not None:
            messages, violations = _paired(rest, self.comm_ranks, self.self_comms)
            del rest
            pieces.append(messages)
            bad.append(violations)
        ranks = _peer_ranks(self.comm_ranks)
        self_list = pl.Series(sorted(self.self_comms), dtype=pl.Int64).implode()
        for t in big:
            for s in range(shares[t]):
                if (receives := parts.take(("receives", t, s))) is None:
                    continue
                resolved = _resolved_receives(receives, MATCH_ROWS)
                del receives
                share = peer_tasks(resolved, self.comm_ranks, self.self_comms) % shares[t]
                for j in np.unique(share):
                    parts.add(("resolved", t, int(j)), resolved[np.flatnonzero(share == j)])
                del resolved
            for j in range(shares[t]):
                sends, receives = parts.take(("sends", t, j)), parts.take(("resolved", t, j))
                if sends is None and receives is None:
                    continue
                halves = [] if sends is None else [sends.with_columns(pl.lit(None, pl.Int64).alias("req_ns"))]
                part = pl.concat(halves + ([] if receives is None else [receives]))
                del sends, receives, halves
                m = _pairs(part.lazy(), ranks, self_list)
                del part
                bad.append(_own_order_violations(m))
                pieces.append(_piece(m))
                del m
        return pl.concat(pieces), pl.concat(bad)


def check_peers(p2p: pl.DataFrame, peers: np.ndarray, comm_ranks: pl.DataFrame, anchor: Path) -> None:
    """Refuse a send or receive whose partner is no rank of its communicator (``peers``: :func:`peer_tasks`; a send
    to rank 99 of a world of 2 was stored as peer INT32_MIN), as the Paraver reader refuses a message to a task
    outside its header."""
    outside = np.flatnonzero(peers == -1)
    if outside.size:
        r = p2p.row(int(outside[0]), named=True)
        n_ranks = int((comm_ranks.get_column("comm") == r["comm"]).sum())
        what = "send to" if r["kind"] in (_SEND, _ISEND) else "receive from"
        world = f"its {n_ranks} ranks" if n_ranks else "a communicator with no definition"
        raise TraceFormatError(anchor, None, f"task {r['task']} thread {r['thread']}: {what} rank {r['peer']} of "
                               f"communicator {r['comm']} at {r['time_ns']} ns, outside {world}")


def check_sizes(p2p: pl.DataFrame, anchor: Path) -> None:
    """Refuse a message length that no signed 64-bit column holds: OTF2 keeps lengths as uint64, and one of
    2^63 bytes or more wrapped into a negative ``bytes`` (the Paraver reader refuses a negative size alike)."""
    bad = p2p.filter((pl.col("size") < 0) & (pl.col("kind") != _PROBE)).head(1)
    if bad.height:
        r = bad.row(0, named=True)
        raise TraceFormatError(anchor, None, f"task {r['task']} thread {r['thread']}: "
                               + size_reason("a message", r["size"] % 2**64, r["time_ns"]))


#: send and receive records paired at a time: the records of whole receiving tasks, up to about this many (issue
#: 23: pairing every record of a run at once held ~2.5x its records in sorts and joins, 1 GB for a 319 MB archive)
MATCH_ROWS = 250_000


def match_messages(p2p: pl.DataFrame, comm_ranks: pl.DataFrame, self_comms: set[int],
                   anchor: Path | None = None, group_rows: int | None = None) -> pl.DataFrame:
    """Pair send and receive records into messages (:data:`OTF2_MESSAGE_SCHEMA`).

    Sends and receives between the same ranks on the same communicator with the same tag match in order (MPI's
    non-overtaking rule): sends in send order, receives in order of their logical time (an ``MpiIrecv`` counts at
    its ``MpiIrecvRequest``). A half without its partner stays, with the other side's times NULL. With ``anchor``
    (the archive, for the error), a message a thread sent itself whose receive completed before the send began is
    refused (:func:`_check_own_order`). The records are paired a group of receiving tasks at a time (about
    ``group_rows`` records, default :data:`MATCH_ROWS`): every record a message's pairing reads (its send, its
    receive, the receive's request and probe) has the same receiving task.
    """
    messages, bad = _paired(_with_receivers(p2p, peer_tasks(p2p, comm_ranks, self_comms)), comm_ranks, self_comms,
                            group_rows)
    if anchor is not None:
        _check_own_order(bad, anchor)
    return _sorted(messages)


_ORDER = ("s_task", "s_time_ns", "r_task", "r_time_ns")  # the messages' order (nulls last)


def _sorted(messages: pl.DataFrame) -> pl.DataFrame:
    return messages.sort(*_ORDER, nulls_last=True)


def _sorted_by_columns(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """:func:`_sorted` of the concatenated ``pieces`` (emptied: the caller gives them up), sorted a column at a
    time, each dropped once gathered (issue 23: the pieces, their concatenation and the sorted copy were three
    copies of a run's messages at once)."""
    messages = pl.concat(pieces, rechunk=False)
    pieces.clear()
    order = stable_order(messages, _ORDER)
    columns: list[pl.Series] = []
    for name in messages.columns:
        columns.append(messages.get_column(name).gather(order))
        messages = messages.drop(name)
    return pl.DataFrame(columns)


def _paired(p2p: pl.DataFrame, comm_ranks: pl.DataFrame, self_comms: set[int],
            group_rows: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`match_messages` unsorted, and the messages a thread received from itself before sending them
    (:func:`_own_order_violations`, one per group of receiving tasks), unchecked."""
    if p2p.height == 0:
        return pl.DataFrame(schema=OTF2_MESSAGE_SCHEMA), pl.DataFrame(schema=_VIOLATION_SCHEMA)
    ranks = _peer_ranks(comm_ranks)
    self_list = pl.Series(sorted(self_comms), dtype=pl.Int64).implode()
    group_rows = MATCH_ROWS if group_rows is None else group_rows
    groups = [p2p] if p2p.height <= group_rows else _groups_of(p2p, p2p.get_column(_RECEIVER).to_numpy(), group_rows)
    parts = (part for group in groups for part in _sender_parts(group, comm_ranks, self_comms, group_rows))
    pieces, bad = [], []
    for part in parts:
        m = _pairs(part.lazy(), ranks, self_list)
        bad.append(_own_order_violations(m))
        pieces.append(_piece(m))
        del m
    return pl.concat(pieces), pl.concat(bad)


def _peer_ranks(comm_ranks: pl.DataFrame) -> pl.LazyFrame:
    """Each (communicator, rank) as the task it is, as :func:`_pairs` joins it."""
    return comm_ranks.lazy().select("comm", pl.col("rank").alias("peer"), pl.col("task").alias("peer_task"))


def _piece(m: pl.DataFrame) -> pl.DataFrame:
    """The pairs ``m`` of :func:`_pairs` as messages (:data:`OTF2_MESSAGE_SCHEMA`)."""
    return m.select(
        pl.when(pl.col("s_task").is_not_null()).then(pl.lit(1)).cast(pl.Int32).alias("s_appl"),
        pl.col("s_task").cast(pl.Int32),
        pl.col("s_thread").cast(pl.Int32),
        pl.col("t").alias("s_time_ns").cast(pl.Int64),
        pl.when(pl.col("r_task").is_not_null()).then(pl.lit(1)).cast(pl.Int32).alias("r_appl"),
        pl.col("r_task").cast(pl.Int32),
        pl.col("r_thread").cast(pl.Int32),
        pl.col("r_t").alias("r_time_ns").cast(pl.Int64),
        pl.coalesce("s_size", "r_size").cast(pl.Int64).alias("size"),
        pl.col("tag").cast(pl.Int64),
        pl.col("r_done").alias("r_phys_ns").cast(pl.Int64),
        pl.col("comm").cast(pl.Int64),
    )


def _groups_of(p2p: pl.DataFrame, tasks_of: np.ndarray, group_rows: int) -> Iterator[pl.DataFrame]:
    """``p2p`` in groups of the records of whole tasks (``tasks_of``: each record's receiving, or sending, task),
    about ``group_rows`` records each."""
    tasks, counts = np.unique(tasks_of, return_counts=True)
    group_of = (np.cumsum(counts) - 1) // group_rows
    for g in np.unique(group_of):
        yield p2p[np.flatnonzero(np.isin(tasks_of, tasks[group_of == g]))]  # a gather: Polars' filter held 6x


def _sender_parts(group: pl.DataFrame, comm_ranks: pl.DataFrame, self_comms: set[int],
                  group_rows: int) -> Iterator[pl.DataFrame]:
    """``group`` (the records of whole receiving tasks) as it is, or, past ``group_rows`` records (one task that
    receives from many: master/worker, a gather written with point-to-point, an I/O rank; attack 13 F8: its one
    group was paired at once, 1.5 GB for a 369 MB archive), in parts of whole sending tasks. Its receives are
    resolved first (:func:`_resolved_receives`), so that every record a message's pairing reads (its send, its
    receive) names the part's sending task: MPI pairs messages within a (sender, receiver, communicator, tag)."""
    if group.height <= group_rows:
        yield group
        return
    sends = pl.col("kind").is_in(_SEND_KINDS)
    resolved = pl.concat([group.filter(sends).with_columns(pl.lit(None, pl.Int64).alias("req_ns")),
                          _resolved_receives(group.filter(~sends), group_rows)])
    del group
    is_send = np.isin(resolved.get_column("kind").to_numpy(), _SEND_KINDS)
    senders = np.where(is_send, resolved.get_column("task").to_numpy(), peer_tasks(resolved, comm_ranks, self_comms))
    yield from _groups_of(resolved, senders, group_rows)


def _resolved_receives(receives: pl.DataFrame, group_rows: int) -> pl.DataFrame:
    """The receives of ``receives`` (a receiving task's records but its sends) as :func:`_pairs` reads them,
    with nothing left to look up elsewhere: an ``MpiMrecv`` with its probe's sender, communicator and tag
    (:func:`_matched_probes_as_receives`), an ``MpiIrecv`` with its ``MpiIrecvRequest``'s time as ``req_ns``
    (NULL for the others); requests and probes dropped. Both look-ups are within a (thread, request or message
    id), so they are done a share of the ids at a time (about ``group_rows`` records each)."""
    shares = min(max(1, -(-receives.height // group_rows)), 64)  # each a pass over the receives
    out = []
    for share in range(shares):
        lf = _matched_probes_as_receives(receives.lazy().filter(pl.col("req") % shares == share))
        requests = (lf.filter(pl.col("kind") == _IRECV_REQ)
                    .select("task", "thread", "req", "pos", pl.col("time_ns").alias("req_ns")).sort("pos"))
        out.append(lf.filter(pl.col("kind").is_in([_RECV, _IRECV])).sort("pos")
                   .join_asof(requests, on="pos", by=["task", "thread", "req"], strategy="backward",
                              check_sortedness=False)
                   .with_columns(pl.when(pl.col("kind") == _IRECV).then(pl.col("req_ns")).cast(pl.Int64))
                   .collect())
    return pl.concat(out)


def _with_receivers(p2p: pl.DataFrame, peers: np.ndarray) -> pl.DataFrame:
    """``p2p`` with :data:`_RECEIVER`: per record, the task that receives its message: a send's peer (``peers``:
    :func:`peer_tasks`), else the record's own task (a receive, its Irecv request and its probe are read on the
    receiving task). Found once, as the records come, and kept with them for their buckets, groups and parts."""
    sends = np.isin(p2p.get_column("kind").to_numpy(), _SEND_KINDS)
    return p2p.with_columns(pl.Series(_RECEIVER, np.where(sends, peers, p2p.get_column("task").to_numpy()),
                                      dtype=pl.Int32))


def _pairs(lf: pl.LazyFrame, ranks: pl.LazyFrame, self_list: pl.Series) -> pl.DataFrame:
    """The sends and receives of ``lf`` paired (:func:`match_messages`): per message the send's task, thread, time
    ``t``, record position and size, the receive's task, thread, logical time ``r_t``, completion ``r_done`` and
    size, the communicator and tag."""
    resolved = "req_ns" in lf.collect_schema()  # by _sender_parts: no request nor probe left to look up
    if not resolved:
        lf = _matched_probes_as_receives(lf)
        requests = (lf.filter(pl.col("kind") == _IRECV_REQ)
                    .select("task", "thread", "req", "pos", pl.col("time_ns").alias("req_ns")).sort("pos"))

    def with_peer(kinds: list[int]) -> pl.LazyFrame:
        return (lf.filter(pl.col("kind").is_in(kinds)).drop("req" if _IRECV not in kinds else [])
                .join(ranks, on=["comm", "peer"], how="left")
                .with_columns(pl.when(pl.col("comm").is_in(self_list)).then(pl.col("task"))
                              .otherwise(pl.col("peer_task")).cast(pl.Int32).alias("peer_task")))

    key = ["s_task", "r_task", "comm", "tag"]
    sends = (with_peer(_SEND_KINDS)
             .select(pl.col("task").alias("s_task"), pl.col("thread").alias("s_thread"),
                     pl.col("peer_task").alias("r_task"), "comm", "tag", pl.col("time_ns").alias("t"), "pos",
                     pl.col("size").alias("s_size"))
             .sort([*key, "t", "pos"]).with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    recvs = with_peer([_RECV, _IRECV]).sort("pos")
    if not resolved:
        recvs = recvs.join_asof(requests, on="pos", by=["task", "thread", "req"], strategy="backward",
                                check_sortedness=False)
    recvs = (recvs
             .select(pl.col("peer_task").alias("s_task"), pl.col("task").alias("r_task"),
                     pl.col("thread").alias("r_thread"), "comm", "tag",
                     pl.when((pl.col("kind") == _IRECV) & pl.col("req_ns").is_not_null())
                     .then(pl.col("req_ns")).otherwise(pl.col("time_ns")).alias("r_t"),
                     pl.col("pos").alias("r_pos"), pl.col("size").alias("r_size"), pl.col("time_ns").alias("r_done"))
             .sort([*key, "r_t", "r_pos"]).with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    return (sends.join(recvs, on=[*key, "_k"], how="full", coalesce=True, nulls_equal=False)
            .collect(engine="streaming"))


def _own_order_violations(pairs: pl.DataFrame) -> pl.DataFrame:
    """The first message (by send time) of ``pairs`` that one thread sent itself and received before sending:
    one thread's records follow its program order on one clock, and its k-th send to itself with a tag is its k-th
    receive from itself with that tag (MPI non-overtaking holds exactly within a thread), so the receive completes
    (``MpiRecv``/``MpiIrecv``) at or after the send began."""
    return (pairs.filter((pl.col("s_task") == pl.col("r_task")) & (pl.col("s_thread") == pl.col("r_thread"))
                         & (pl.col("r_done") < pl.col("t"))).sort("t", "s_task", "s_thread").head(1)
            .select("s_task", "s_thread", "tag", "t", "r_done").cast(_VIOLATION_SCHEMA))


def _check_own_order(violations: pl.DataFrame, anchor: Path) -> None:
    """Refuse the first of ``violations`` (:func:`_own_order_violations` of each group of pairs). Two ranks whose
    events files were swapped make every message of a one-tag ping-pong such a message (attack 8 B8: paired, yet
    impossible)."""
    bad = violations.sort("t", "s_task", "s_thread").head(1)
    if bad.height:
        r = bad.row(0, named=True)
        raise TraceFormatError(anchor, None, f"task {r['s_task']} thread {r['s_thread']}: a message to itself (tag "
                               f"{r['tag']}) received at {r['r_done']} ns, before it was sent at {r['t']} ns: not the "
                               "record of one run (events files moved between locations?); --salvage reads it anyway")


def check_pairing(matched: pl.DataFrame, anchor: Path, salvage: bool, twins: str | None = None) -> list[str]:
    """Judge the pairing of sends and receives (:func:`match_messages`): in a whole run every receive got a message
    someone sent, and MPI pairs the k-th send from A to B with a tag with the k-th receive on B from A with that tag.
    OTF2 names no location inside an events file, so an events file moved to another location (two swapped: each
    rank "sends to itself", no receive has a send; attack 8 B8) shows as receives without a send. Refuses when most
    receives have none: a run no MPI program makes (``salvage``, which reads traces with lost locations, is warned
    instead). Returns the warnings: ends without a partner (a recording stopped early, or files moved among many
    ranks), and ``twins``, two locations with the same events file (said in the refusal when there is one)."""
    lone_recv = int(matched["s_time_ns"].is_null().sum())  # receives without a send
    lone_send = int(matched["r_time_ns"].is_null().sum())
    n_recv, n_send = matched.height - lone_send, matched.height - lone_recv
    said = (f"{lone_recv} of the {n_recv} receives have no matching send and {lone_send} of the {n_send} sends no "
            "matching receive")
    if 2 * lone_recv > n_recv and not salvage:
        why = f"{twins}: an events file copied over another?" if twins else ("events files moved between locations, "
                                                                              "or of another run?")
        raise TraceFormatError(anchor, None, f"{said}: not the record of one run ({why}); --salvage reads it anyway")
    out = [f"{anchor}: {said}: the trace is incomplete or its events files were moved between locations"] if (
        lone_recv or lone_send) else []
    if twins:
        out.append(f"{twins}: two locations rarely record the same events; an events file copied over another?")
    return out
