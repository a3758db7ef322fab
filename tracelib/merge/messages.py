"""Logical messages: a timing-free identity for every point-to-point message and collective (DESIGN §6, issue 22).

MPI's non-overtaking rule orders the messages one sender sends to one receiver on one (communicator, tag): the
k-th such message is received by the k-th matching receive, whatever the timing. So
``(appl, comm, sender, receiver, tag, k)`` names a message the same way in every run of a deterministic program;
an ``MPI_ANY_SOURCE`` receive takes the identity of the send it matched (the trace's communication records pair
them). Collectives are named ``(appl, comm, k)``: the k-th collective of a task on a communicator.

:func:`logical_messages` builds one row per message (:data:`LOGICAL_MESSAGE_SCHEMA`) from a run's MPI calls and,
when the reader kept them, its communication records (``ReadSummary.messages``, MESSAGE_SCHEMA): each end is the
call of its thread that holds the message's logical time (its ``call_seq``), the communicator is the sending
call's. Without communication records the send ends come from the calls that send one message (``peer`` and
``bytes_sent``); receive ends are named only on channels where every receive is a call that receives that
channel's messages one at a time (a completion call that completes a run-dependent number of messages names
none). Never a size summed over what a completion call happened to complete. A channel's records begin where
both its ends are traced: where a rank's trace started late, its partners' calls that posted the messages before
are counted (:func:`lost_at_start`) and the channel is numbered from the run's start, or left unnamed (``k``
NULL) when no call can count them.

:func:`message_counts` is the compact per-channel table the cross-rank steps work from (rank correspondence,
same-program check): messages and bytes per (appl, comm, sender, receiver, tag, bytes).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.formats.bursts import message_ends, message_rows
from synthtrace.tracelib.schema import THREAD_KEYS

LOGICAL_MESSAGE_SCHEMA: dict[str, pl.DataType] = {
    "appl": pl.Int32(), "comm": pl.Int64(), "sender": pl.Int32(), "receiver": pl.Int32(), "tag": pl.Int64(),
    "k": pl.Int64(), "bytes": pl.Int64(),
    "s_thread": pl.Int32(), "s_call_seq": pl.Int64(), "s_time_ns": pl.Int64(),
    "r_thread": pl.Int32(), "r_call_seq": pl.Int64(), "r_time_ns": pl.Int64(), "c_call_seq": pl.Int64(),
}
#: the identity of a logical message (with ``k``) and of its channel (without)
CHANNEL: list[str] = ["appl", "comm", "sender", "receiver", "tag"]
MESSAGE_ID: list[str] = [*CHANNEL, "k"]
#: calls that complete requests: which messages they complete depends on arrival, so they post no message
COMPLETION_CALLS: tuple[str, ...] = calls_with(roles=("wait", "test"))
#: completion calls whose completed requests depend on arrival (all but ``MPI_Wait``/``MPI_Waitall``, which complete
#: the requests they name): whether and what they completed, and so the communicator an OTF2 reader gives them from
#: the records they hold, differs run to run
BY_ARRIVAL_CALLS: tuple[str, ...] = tuple(c for c in COMPLETION_CALLS if c not in ("MPI_Wait", "MPI_Waitall"))
#: completion calls that complete a set of requests (the program goes on whatever arrived: no burst after one follows
#: one message)
MULTI_COMPLETION_CALLS: tuple[str, ...] = tuple(c for c in COMPLETION_CALLS if c.endswith(("all", "some")))
#: completion calls after which the work is no message's: sets, and tests (a test returns whether or not a message
#: came: the code after it goes on with its own work, e.g. the next chunk of a computation)
NOT_ARRIVAL_CALLS: tuple[str, ...] = tuple(sorted({*MULTI_COMPLETION_CALLS, *calls_with(roles=("test",))}))
#: calls that poll (a loop of them collapses into one unit)
POLLING_CALLS: tuple[str, ...] = (*calls_with(roles=("test", "probe"), blocking=False), )
#: calls whose number follows timing (a loop polls or completes until its messages came): a run of them is one unit
#: when the merge compares call structures or the calls closing two bursts
POLL_UNIT_CALLS: tuple[str, ...] = tuple(sorted({*COMPLETION_CALLS, *POLLING_CALLS}))
#: the columns of the MPI calls :func:`logical_messages` reads
CALL_COLUMNS: tuple[str, ...] = ("appl", "task", "thread", "call_seq", "mpi_call", "start_ns", "end_ns", "bytes_sent",
                                 "bytes_recv", "peer", "n_messages", "comm", "tag")
#: calls that post exactly one message each way they go (a send, a receive, or one of each: ``MPI_Sendrecv``),
#: whose ends a whole trace's records always hold
POSTING_CALLS: tuple[str, ...] = calls_with(roles=("send", "recv", "sendrecv"))
_POSTING_WAYS = {"s": calls_with(roles=("send", "sendrecv")), "r": calls_with(roles=("recv", "sendrecv"))}
#: the communicator of a point-to-point message whose call names none
NO_COMM = -1
COUNT_SCHEMA: dict[str, pl.DataType] = {
    "appl": pl.Int32(), "comm": pl.Int64(), "sender": pl.Int32(), "receiver": pl.Int32(), "tag": pl.Int64(),
    "bytes": pl.Int64(), "n": pl.UInt32()}


def is_completion(call: pl.Expr) -> pl.Expr:
    """Whether a call name is a completion call (Wait/Test families)."""
    return call.is_in(list(COMPLETION_CALLS)).fill_null(False)


def _numbered(m: pl.DataFrame) -> pl.DataFrame:
    """``m`` with ``k``: the message's order among its channel's messages, by send time (then receive time); rows
    in that order (a stable sort). The order and ``k`` are found on ``m`` as it is, then the columns are gathered
    one at a time (issue 23: the sorted copy beside the ranking's arrays was the peak of a 2 GB OTF2 ingest)."""
    m = m.with_columns(pl.col("comm").fill_null(NO_COMM), pl.col("tag").fill_null(0))
    order = m.select(pl.arg_sort_by("s_time_ns", "r_time_ns", nulls_last=True, maintain_order=True)).to_series()
    k = _rank_of(_channel_ids(m)[order.to_numpy()])
    columns = []
    for c, t in LOGICAL_MESSAGE_SCHEMA.items():
        columns.append(pl.Series("k", k) if c == "k" else m.get_column(c).gather(order).cast(t))
        if c != "k":
            m = m.drop(c)
    return pl.DataFrame(columns)


def _rank_in_channel(m: pl.DataFrame) -> np.ndarray:
    """Per row of ``m``, its rank among the earlier rows of its channel (int64): :func:`_rank_of` its
    :func:`_channel_ids`."""
    return _rank_of(_channel_ids(m))


def _rank_of(ids: np.ndarray) -> np.ndarray:
    """Per item of ``ids`` (channel ids), its rank among the earlier items of the same id (int64). [helper reader]
    issue 27: a stable sort by channel, not a window over it: ``int_range().over(CHANNEL)`` took 0.3 s for 130k
    messages each on a channel of its own (a tag per iteration), a fifth of a records-dense ingest's Python-side
    time. The channel is one dense int64 id, built a column at a time (:func:`_channel_ids`), so the sort holds one
    key, not ten (issue 23: 2 x 5 key arrays were ~880 MB of a 2 GB OTF2 archive's 6.5 M messages)."""
    order = np.argsort(ids, kind="stable")  # a channel's rows keep their order
    n = order.size
    ids = ids[order]
    first = np.ones(n, dtype=bool)  # the first row of its channel (in channel order)
    first[1:] = ids[1:] != ids[:-1]
    del ids
    i = np.arange(n, dtype=np.int64)
    start = np.maximum.accumulate(np.where(first, i, 0))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = i - start
    return rank


def _channel_ids(m: pl.DataFrame) -> np.ndarray:
    """Per row of ``m``, an int64 id of its channel (:data:`CHANNEL`; a NULL is a value of its own), equal for two
    rows exactly when their channels are: the columns' codes combined as the digits of one number. A column's code
    is its value's offset from the column's least when its values are dense (tasks, small tags and communicators:
    no sort), else its rank among the column's values; the ids so far are renumbered densely only when the next
    digit would overflow, so at most one column's codes are held beside them."""
    n = m.height
    ids, span = np.zeros(n, dtype=np.int64), 1
    for c in CHANNEL:
        s = m.get_column(c)
        values = s.fill_null(0).to_numpy().astype(np.int64, copy=False)
        low, high = (int(values.min()), int(values.max())) if n else (0, 0)
        if high - low <= 2 * n:
            codes, width = values - low, high - low + 1
        else:
            uniq, codes = np.unique(values, return_inverse=True)
            width = uniq.size
        del values
        codes = codes.astype(np.int64, copy=False) * 2 + s.is_null().to_numpy()  # a NULL apart from the value 0
        if span * 2 * width >= 2**62:
            uniq, ids = np.unique(ids, return_inverse=True)
            ids, span = ids.astype(np.int64, copy=False), uniq.size
        ids = ids * (2 * width) + codes
        span *= 2 * width
    return ids


def _from_records(calls: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """The records' ends placed in their calls as the reader places them (one rule: the call of the thread holding the
    time; the physical receive time names the completing call)."""
    spans = calls.select(*[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS], "start_ns", "end_ns", "call_seq",
                         pl.col("comm").cast(pl.Int64))
    return logical_messages_at(records, message_ends(spans, message_rows(spans, records)))


def logical_messages_at(records: pl.DataFrame, ends: pl.DataFrame) -> pl.DataFrame:
    """:func:`logical_messages` of communication records whose ends are already placed in their calls (reader
    (issue 27): the reader places them once for the calls' message columns). ``ends``: per row of ``records``,
    ``s_call_seq``, ``s_comm``, ``r_call_seq``, ``r_comm`` of the calls holding the send and the receive (NULL:
    none), optionally ``c_call_seq``, the call that completed the receive (NULL when not given: not known). A
    message's communicator is its sending call's, else the one its records name (``comm``, kept by the OTF2
    reader: a receive whose send was not traced, in a call that names none), else its receiving call's."""
    if "c_call_seq" not in ends.columns:
        ends = ends.with_columns(pl.lit(None, pl.Int64).alias("c_call_seq"))
    named = pl.col("comm").cast(pl.Int64) if "comm" in records.columns else pl.lit(None, pl.Int64)
    # one expression, no frame kept here: _numbered's sorted copy then has no unsorted one beside it ([helper
    # reader] issue 27: 270 MB less at the peak of a 2 GB trace's ingest)
    return _numbered(pl.concat([records.select(
        pl.coalesce("s_appl", "r_appl").cast(pl.Int32).alias("appl"), pl.col("s_task").alias("sender"),
        pl.col("r_task").alias("receiver"), "tag", pl.col("size").alias("bytes"), "s_thread", "s_time_ns", "r_thread",
        "r_time_ns", named.alias("_named")), ends], how="horizontal")
        .with_columns(pl.coalesce("s_comm", "_named", "r_comm").alias("comm")))


def _from_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """Send ends from the calls that send (peer, bytes_sent); receive ends on channels whose receives are all
    single-message receiving calls other than completion calls."""
    p2p = calls.filter(pl.col("peer").is_not_null())
    me = pl.col("task").cast(pl.Int32)
    sends = (p2p.filter(pl.col("bytes_sent").fill_null(0) > 0)
             .select("appl", pl.col("comm").cast(pl.Int64), me.alias("sender"),
                     pl.col("peer").cast(pl.Int32).alias("receiver"), "tag", pl.col("bytes_sent").alias("bytes"),
                     pl.col("thread").alias("s_thread"), pl.col("call_seq").alias("s_call_seq"),
                     pl.col("start_ns").alias("s_time_ns")))
    sends = _numbered(sends.with_columns(pl.lit(None, pl.Int32).alias("r_thread"),
                                         pl.lit(None, pl.Int64).alias("r_time_ns"),
                                         pl.lit(None, pl.Int64).alias("r_call_seq"),
                                         pl.lit(None, pl.Int64).alias("c_call_seq")))
    recv = pl.col("bytes_recv").fill_null(0) > 0
    single = (pl.col("n_messages").fill_null(1) == 1) & (pl.col("bytes_sent").fill_null(0) == 0)
    r = calls.filter(recv).select(
        "appl", pl.col("comm").cast(pl.Int64).fill_null(NO_COMM), pl.col("peer").cast(pl.Int32).alias("sender"),
        me.alias("receiver"), pl.col("tag").fill_null(0), pl.col("thread").alias("r_thread"),
        pl.col("call_seq").alias("r_call_seq"), pl.col("start_ns").alias("r_time_ns"),
        (single & pl.col("peer").is_not_null() & ~is_completion(pl.col("mpi_call"))).alias("_ok"))
    # a channel names its receive ends only if every receiving call of its receiver could be one of its
    # messages' alone (a multi-message or completion call may hold some: counting would shift)
    bad_receivers = r.filter(~pl.col("_ok")).select("appl", "receiver").unique()
    r = (r.filter("_ok").join(bad_receivers, on=["appl", "receiver"], how="anti")
         .sort("r_time_ns").with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(CHANNEL).alias("k")))
    out = sends.drop("r_thread", "r_call_seq", "r_time_ns", "c_call_seq").join(
        r.select(*MESSAGE_ID, "r_thread", "r_call_seq", "r_time_ns", pl.col("r_call_seq").alias("c_call_seq")),
        on=MESSAGE_ID, how="left")
    return out.select([pl.col(c).cast(t) for c, t in LOGICAL_MESSAGE_SCHEMA.items()])


def logical_messages(calls: pl.DataFrame, records: pl.DataFrame | None = None, *,
                     from_run_start: bool = True) -> pl.DataFrame:
    """One row per point-to-point message of a run (:data:`LOGICAL_MESSAGE_SCHEMA`): its logical identity
    (appl, comm, sender, receiver, tag, k; ``comm`` ``NO_COMM`` when the calls name none, ``tag`` 0 when the
    trace has none), its size (bytes), both ends (thread, call_seq, logical time ns; NULL for an end outside
    the trace or not known) and ``c_call_seq``: the receiver's call that completed the receive (the call holding
    the record's physical receive time, e.g. the ``MPI_Waitany`` that completed an ``MPI_Irecv``; the receiving
    call when the trace records the receive at its completion or has no physical time). ``records``: the run's
    communication records (MESSAGE_SCHEMA; a table that is already logical, as the warehouse's ``mpi_messages``,
    is returned as it is), else the ends come from the calls alone (see the module docstring). ``from_run_start``:
    each channel recorded from records numbered from the run's start (:func:`lost_at_start`); False for the table a
    warehouse stores (the records' own numbering), which its reader numbers so when it reads it: never twice."""
    if records is not None and "k" in records.columns:  # already logical (the warehouse's mpi_messages)
        if "c_call_seq" not in records.columns:  # stored before the completing call was kept: not known
            records = records.with_columns(pl.lit(None, pl.Int64).alias("c_call_seq"))
        box = [records.select([pl.col(c).cast(t) for c, t in LOGICAL_MESSAGE_SCHEMA.items()])]
        return _from_run_start(calls, box) if from_run_start else box[0]
    if calls.height == 0 or "peer" not in calls.columns:
        return pl.DataFrame(schema=LOGICAL_MESSAGE_SCHEMA)
    if records is not None and records.height:
        if not from_run_start:
            return _from_records(calls, records)
        box = [_from_records(calls, records)]  # handed over: let go once its channels are paired again
        return _from_run_start(calls, box)
    return _from_calls(calls)


def lost_at_start(calls: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """Per channel of a run's logical messages named from its communication records (CHANNEL, ``lost``: Int64),
    the messages its records lack at its start because one end's trace started late (tracing turned on late on a
    rank, a rank whose first records were lost): a record needs both ends traced (Extrae's merger leaves an
    unmatched send or receive out; OTF2's halves are paired the same way), so the channel's records begin where
    its later end's trace does, while its partner's calls that posted the earlier messages are there, without a
    record. A trace starts once per rank, and MPI's non-overtaking rule makes the lost messages the channel's
    first: they are counted on the end whose partner was not traced yet, as its calls at the site (call name,
    caller and the communicator the call names) of the channel's first recorded end there that post one message
    that way (a send, a receive, either half of an ``MPI_Sendrecv``), hold no end of that way and came before that
    end and before the partner's first call. A call that more than one channel could have lost is counted for none
    of them (two late partners served by one call site). ``lost`` is NULL for a channel
    whose loss cannot be counted: such a call, an end that started late itself (two late partners: what each
    posted before its own start is in no trace), or a channel of a rank that lost messages on another channel (it
    started late) whose other end's records lie in calls that complete messages (``MPI_Testsome``: how many a call
    completed is no count of what was posted), so that its messages are left unnamed rather than named off.
    Channels with nothing lost are left out."""
    keys = ["appl", "task", "thread", "call_seq"]
    # a call's site: its name, caller and communicator (two communicators' calls at one caller told apart, tidy19)
    base = [c for c in ("mpi_call", "call_site") if c in calls.columns]
    comm = [pl.col("comm").cast(pl.Int64).fill_null(NO_COMM).alias("_comm")] if "comm" in calls.columns else []
    site = [*base, *(["_comm"] if comm else [])]
    c = calls.select(pl.col("appl").cast(pl.Int32), pl.col("task").cast(pl.Int32), pl.col("thread").cast(pl.Int32),
                     "call_seq", "start_ns", *base, *comm)
    m = messages.filter(pl.col("sender").is_not_null() & pl.col("receiver").is_not_null())
    def without(f: pl.DataFrame, t: str, h: str, q: str) -> pl.DataFrame:
        ends_ = m.select("appl", pl.col(t).alias("task"), pl.col(h).alias("thread"), pl.col(q).alias("call_seq"))
        return f.join(ends_, on=keys, how="anti")

    def posting(way: str) -> pl.DataFrame:
        return c.filter(pl.col("mpi_call").is_in(list(_POSTING_WAYS[way])))
    # per way (send, receive): the calls posting one message that way holding no end of it (one anti-join a
    # column of ends)
    unrecorded = pl.concat([
        without(posting("s"), "sender", "s_thread", "s_call_seq").with_columns(pl.lit("s").alias("_way")),
        without(without(posting("r"), "receiver", "r_thread", "r_call_seq"), "receiver", "r_thread", "c_call_seq")
        .with_columns(pl.lit("r").alias("_way"))]).select("appl", "task", "thread", *site, "_way",
                                                           pl.col("start_ns").alias("_u"))
    if unrecorded.height == 0:
        return pl.DataFrame(schema={**{k: LOGICAL_MESSAGE_SCHEMA[k] for k in CHANNEL}, "lost": pl.Int64})
    t0 = c.group_by("appl", "task").agg(pl.col("start_ns").min().alias("_t0"))
    # per channel and side: the call holding the channel's first recorded end there, and the partner's start
    first = pl.concat([
        m.filter(pl.col("k") == pl.col("k").min().over(CHANNEL))
        .select(*CHANNEL, pl.col(me).alias("task"), pl.col(h).alias("thread"), pl.col(q).alias("call_seq"),
                pl.col(other).alias("_partner"), pl.lit(way).alias("_way"))
        for me, h, q, other, way in (("sender", "s_thread", "s_call_seq", "receiver", "s"),
                                     ("receiver", "r_thread", "r_call_seq", "sender", "r"))]).drop_nulls(["call_seq"])
    first = (first.join(c, on=keys).join(t0.rename({"task": "_partner"}), on=["appl", "_partner"])
             .select(*CHANNEL, "task", "thread", "_partner", "_way", *site,
                     pl.min_horizontal("start_ns", "_t0").alias("_before"),
                     pl.col("mpi_call").is_in(list(POSTING_CALLS)).alias("_countable")))
    # a trace without caller events has no call site (NULL): one site, alike on both sides
    cand = (unrecorded.with_row_index("_call").join(first.drop("_partner", "_countable"),
                                                    on=["appl", "task", "thread", "_way", *site], nulls_equal=True)
            .filter(pl.col("_u") < pl.col("_before"))
            .with_columns(pl.len().over("_call").alias("_n")))
    sides = first.join(cand.group_by([*CHANNEL, "task", "_way"])
                       .agg((pl.col("_n") == 1).sum().cast(pl.Int64).alias("_c"),
                            (pl.col("_n") > 1).any().alias("_amb")),
                       on=[*CHANNEL, "task", "_way"], how="left", nulls_equal=True)
    # a rank that lost messages on one channel started late: its channels whose loss no call can count (their
    # other end's records lie in completion calls) are not named
    late = sides.filter(pl.col("_c") > 0).select("appl", "_partner", pl.lit(True).alias("_late")).unique()
    per = (sides.join(late, on=["appl", "_partner"], how="left")
           .join(late.rename({"_partner": "task", "_late": "_self"}), on=["appl", "task"], how="left")
           .with_columns(pl.col("_late", "_self").fill_null(False)))
    # an end that started late itself counts only what its partner posted after that start: not the channel's loss
    return (per.group_by(CHANNEL).agg(pl.col("_c").max().fill_null(0).alias("lost"),
                                      (pl.col("_amb").fill_null(False) | (pl.col("_self") & (pl.col("_c") > 0)))
                                      .any().alias("_amb"),
                                      (pl.col("_late") & ~pl.col("_countable")).any().alias("_blind"))
            .with_columns(pl.when(pl.col("_amb") | ((pl.col("lost") == 0) & pl.col("_blind"))).then(None)
                          .otherwise(pl.col("lost")).alias("lost"))
            .filter(pl.col("lost").is_null() | (pl.col("lost") > 0))
            .select(*[pl.col(k).cast(LOGICAL_MESSAGE_SCHEMA[k]) for k in CHANNEL], "lost"))


_SEND_END = ["s_thread", "s_call_seq", "s_time_ns", "bytes"]
_RECV_END = ["r_thread", "r_call_seq", "r_time_ns", "c_call_seq"]


def repaired_halves(calls: pl.DataFrame,
                    messages: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``messages`` with the channels that hold lone halves paired again, those of them whose pairing is not known
    (CHANNEL), and per channel paired again from its last message the messages lost at its start (CHANNEL, ``lost``:
    the partner's halves dropped; NULL when the partner is itself an end that traced fewer from its channel's start,
    so began late: what it posted before is in no trace). An OTF2 archive has no message records: its reader pairs a
    channel's k-th send event with its k-th receive event, so a channel one end of which traced fewer of its messages
    (a rank whose trace began late: its first events are in no file) gets each receive paired with a later message's
    send, and lone halves at the channel's end (mergeacc18: the late rank 3 % right, the merge ``ok``). A trace
    starts and ends once per rank, and MPI's non-overtaking order makes the missing halves a channel's first when the
    end that traced fewer began after some of its partner's halves and ended after all of them, its last when it
    ended before some and began before all: the halves are paired from the channel's last (first) message, and the
    partner's halves no end traced are dropped (counted as the channel's loss at its start: :func:`_lost_halves`). A
    channel that fits neither (both, or halves lost at both ends) keeps its pairing and its lone halves, and is
    returned to be left unnamed. Halves are paired within (appl, sender, receiver, tag, communicator): MPI orders
    messages per communicator only. A receive half without its send may name no communicator (``NO_COMM``: OTF2 names
    it in the call that completed it; a paired message takes its send's): where its sender, receiver and tag are used
    on one communicator it is that one's, where on several its channels keep their pairing, unnamed (tidy19)."""
    none = pl.DataFrame(schema={k: LOGICAL_MESSAGE_SCHEMA[k] for k in CHANNEL})
    no_loss = none.with_columns(pl.lit(None, pl.Int64).alias("lost"))
    lone_r, lone_s = pl.col("s_time_ns").is_null(), pl.col("r_time_ns").is_null()
    # a table named from calls alone has no receive end where none is named: a channel is paired again only when
    # its records hold receive halves (a receive without a send is a record's alone)
    key = ["appl", "sender", "receiver", "tag"]
    if not messages.select((lone_r | lone_s).any()).item():
        return messages, none, no_loss
    bad = (messages.group_by(key).agg(lone_r.any().alias("_r"), lone_s.any().alias("_s"),
                                      (~lone_r & ~lone_s).any().alias("_p"))
           .filter(pl.col("_r") | (pl.col("_s") & pl.col("_p"))).select(key))
    if bad.height == 0:
        return messages, none, no_loss
    # issue 23: a mask and two filters, not a semi and an anti join (each a copy of the run's messages)
    mask = messages.select(pl.struct(key).is_in(bad.select(pl.struct(key).implode()).to_series())).to_series()
    hit, keep = messages.filter(mask), messages.filter(~mask)
    del mask
    # the pairing group: the key, and the communicator where the key's halves name several (NO_COMM: the only one
    # named, or none); a key with several whose halves do not all name theirs has no group ("?")
    known = pl.col("comm") != NO_COMM
    multi = pl.col("comm").filter(known).n_unique().over(key) > 1
    hit = hit.with_columns(pl.when(~multi).then(pl.lit(NO_COMM, pl.Int64)).when((~known).any().over(key))
                           .then(None).otherwise(pl.col("comm")).alias("_c"))
    group = [*key, "_c"]
    bad = (hit.filter(pl.col("_c").is_not_null())
           .group_by(group).agg(lone_r.any().alias("_r"), lone_s.any().alias("_s"),
                                (~lone_r & ~lone_s).any().alias("_p"))
           .filter(pl.col("_r") | (pl.col("_s") & pl.col("_p"))).select(group))
    sends = (hit.filter(~lone_r).select(*group, "comm", *_SEND_END).sort("s_time_ns")
             .with_columns(pl.int_range(pl.len()).over(group).alias("_i"), pl.len().over(group).alias("_n")))
    recvs = (hit.filter(~lone_s).select(*group, *_RECV_END).sort("r_time_ns")
             .with_columns(pl.int_range(pl.len()).over(group).alias("_i"), pl.len().over(group).alias("_n")))
    counts = (bad.join(sends.group_by(group).agg(pl.len().alias("_ns")), on=group, how="left", nulls_equal=True)
              .join(recvs.group_by(group).agg(pl.len().alias("_nr")), on=group, how="left", nulls_equal=True)
              .with_columns(pl.col("_ns", "_nr").fill_null(0)))
    # the end that traced fewer halves (its task), its trace's span, and the partner's halves before and after it
    span = (calls.group_by(pl.col("appl").cast(pl.Int32), pl.col("task").cast(pl.Int32).alias("_short"))
            .agg(pl.col("start_ns").min().alias("_t0"), pl.col("end_ns").max().alias("_t1")))
    short_is_r = pl.col("_nr") < pl.col("_ns")
    counts = counts.with_columns(pl.when(short_is_r).then(pl.col("receiver")).otherwise(pl.col("sender"))
                                 .alias("_short"), short_is_r.alias("_short_r")).join(span, on=["appl", "_short"],
                                                                                      how="left")
    partner = pl.concat([
        sends.join(counts.filter("_short_r"), on=group, nulls_equal=True)
        .select(*group, pl.col("s_time_ns").alias("_t"), "_t0", "_t1"),
        recvs.join(counts.filter(~pl.col("_short_r")), on=group, nulls_equal=True)
        .select(*group, pl.col("r_time_ns").alias("_t"), "_t0", "_t1")])
    side = partner.group_by(group).agg((pl.col("_t") < pl.col("_t0")).any().alias("_before"),
                                       (pl.col("_t") > pl.col("_t1")).any().alias("_after"))
    mode = (counts.join(side, on=group, how="left", nulls_equal=True)
            .select(*group, pl.when(pl.col("_ns") == pl.col("_nr")).then(pl.lit("?"))
                    .when(pl.col("_before").fill_null(False) & ~pl.col("_after").fill_null(False)).then(pl.lit("tail"))
                    .when(pl.col("_after").fill_null(False) & ~pl.col("_before").fill_null(False)).then(pl.lit("head"))
                    .otherwise(pl.lit("?")).alias("_mode"))
            .filter(pl.col("_mode") != "?"))
    # the groups paired again; the others keep the reader's pairing and their lone halves, unnamed when undecided
    again = hit.select(pl.struct(group).is_in(mode.select(pl.struct(group).implode()).to_series())
                       .fill_null(False)).to_series()
    kept = hit.filter(~again)
    lone = kept.select(pl.struct(group).is_in(bad.select(pl.struct(group).implode()).to_series())
                       .fill_null(False)).to_series()  # a group holding lone halves that fits neither end
    unknown = kept.filter(pl.col("_c").is_null() | lone).select(CHANNEL).unique()
    # a half's place counted from the channel's first message ("head") or its last ("tail")
    at = pl.when(pl.col("_mode") == "tail").then(pl.col("_n") - 1 - pl.col("_i")).otherwise(pl.col("_i")).alias("_j")
    sends, recvs = (x.join(mode, on=group, nulls_equal=True).with_columns(at).drop("_i", "_n")
                    for x in (sends, recvs))
    paired = (sends.join(recvs.drop("_mode"), on=[*group, "_j"], how="inner", nulls_equal=True)
              .sort("s_time_ns").with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(CHANNEL).alias("k")))
    out = pl.concat([x.select([pl.col(c).cast(t) for c, t in LOGICAL_MESSAGE_SCHEMA.items()])
                     for x in (keep, kept, paired)], rechunk=False)
    return out, unknown, _lost_halves(counts, mode, paired, group)


def _lost_halves(counts: pl.DataFrame, mode: pl.DataFrame, paired: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Per channel :func:`repaired_halves` paired from its last message, the messages lost at its start: the
    partner's halves the short end did not trace (a lone half is its partner's record of a message, so this counts
    what no call of the partner need post alone: a persistent request's ``MPI_Startall`` posts several, attack 19
    F10), NULL when the partner is the short end of a channel paired so itself (its trace began late too)."""
    tail = counts.join(mode.filter(pl.col("_mode") == "tail").select(group), on=group, nulls_equal=True)
    late = tail.select("appl", "_short").unique()
    long_end = pl.when(pl.col("_short_r")).then(pl.col("sender")).otherwise(pl.col("receiver"))
    fewer = (pl.col("_ns").cast(pl.Int64) - pl.col("_nr").cast(pl.Int64)).abs()  # counts are UInt32
    tail = (tail.with_columns(long_end.alias("_long"), fewer.alias("lost"))
            .join(late.rename({"_short": "_long"}).with_columns(pl.lit(True).alias("_late")), on=["appl", "_long"],
                  how="left")
            .with_columns(pl.when(pl.col("_late").fill_null(False)).then(None).otherwise(pl.col("lost"))
                          .alias("lost")))
    channels = paired.select(*group, "comm").unique()
    return (tail.join(channels, on=group, nulls_equal=True)
            .select(*[pl.col(k).cast(LOGICAL_MESSAGE_SCHEMA[k]) for k in CHANNEL], "lost").unique())


def _with_dropped(counted: pl.DataFrame, dropped: pl.DataFrame) -> pl.DataFrame:
    """The messages lost at each channel's start (CHANNEL, ``lost``): those :func:`lost_at_start` counted on the
    partner's calls, and on a channel :func:`repaired_halves` paired again from its end the partner's halves it
    dropped (``dropped``), exact whatever the calls (a lone half is the partner's record of one message of that
    channel), NULL (not known) where a count of calls differs from them. Before (attack 19 F10): a channel whose
    partner posted its messages with ``MPI_Startall`` (no call posting one message to count) was numbered from its
    first traced message, the late rank's every message named as the one an iteration or two before."""
    if dropped.height == 0:
        return counted
    both = counted.join(dropped.rename({"lost": "_d"}).with_columns(pl.lit(True).alias("_in")), on=CHANNEL,
                        how="full", coalesce=True, nulls_equal=True)
    return both.select(*CHANNEL, pl.when(~pl.col("_in").fill_null(False)).then(pl.col("lost"))
                       .when(pl.col("lost").is_null() | (pl.col("lost") == pl.col("_d"))).then(pl.col("_d"))
                       .otherwise(None).alias("lost"))


def _from_run_start(calls: pl.DataFrame, box: list[pl.DataFrame]) -> pl.DataFrame:
    """``messages`` (named from records) with each channel's ``k`` counted from the run's start: its lone halves
    paired again (:func:`repaired_halves`), plus the messages its records lack there (:func:`lost_at_start`), so
    that a message has its name of a run whose traces all started together; NULL (unnamed) where that loss cannot
    be counted or the halves' pairing is not known. ``box`` holds the messages and is emptied (issue 23: the table
    paired again is a copy, and the caller's reference would keep the one it replaces beside it: 580 MB of a 6.5 M
    message OTF2 run)."""
    messages = box.pop()
    if messages.height == 0 or not {"start_ns", "end_ns", "mpi_call"} <= set(calls.columns):
        return messages
    messages, unknown, dropped = repaired_halves(calls, messages)
    lost = _with_dropped(lost_at_start(calls, messages), dropped)
    lost = pl.concat([lost.join(unknown, on=CHANNEL, how="anti", nulls_equal=True),
                      unknown.with_columns(pl.lit(None, pl.Int64).alias("lost"))])
    if lost.height == 0:
        return messages
    return (messages.join(lost.with_columns(pl.lit(True).alias("_in")), on=CHANNEL, how="left", nulls_equal=True,
                          maintain_order="left")
            .with_columns(pl.when(pl.col("_in") & pl.col("lost").is_null()).then(None)
                          .otherwise(pl.col("k") + pl.col("lost").fill_null(0)).alias("k"))
            .drop("lost", "_in"))


def logical_collectives(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per collective call: appl, task, thread, call_seq, mpi_call, comm and ``k``, its order among the
    task's collectives on that communicator (``(appl, comm, k)`` names one collective operation in every task)."""
    if calls.height == 0:
        return pl.DataFrame(schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "call_seq": pl.Int64,
                                    "mpi_call": pl.String, "comm": pl.Int64, "k": pl.Int64})
    return (calls.filter(pl.col("mpi_kind") == "collective")
            .select(*THREAD_KEYS, "call_seq", "mpi_call", pl.col("comm").cast(pl.Int64).fill_null(NO_COMM),
                    "start_ns")
            .sort("start_ns")
            .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("appl", "task", "comm").alias("k"))
            .drop("start_ns"))


def message_counts(messages: pl.DataFrame) -> pl.DataFrame:
    """Messages per (appl, comm, sender, receiver, tag, bytes) of a :func:`logical_messages` table
    (:data:`COUNT_SCHEMA`): what the rank correspondence and the same-program check compare."""
    return (messages.filter(pl.col("sender").is_not_null() & pl.col("receiver").is_not_null())
            .group_by(*CHANNEL, "bytes").agg(pl.len().alias("n"))
            .select([pl.col(c).cast(t) for c, t in COUNT_SCHEMA.items()]))
