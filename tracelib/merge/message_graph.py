"""The message graph of a run, and what it says about an alignment across ranks (DESIGN §6).

A point-to-point message has two ends: the call that sends it on one rank and the call that receives it on another.
Within a run, the k-th message a sender sends on a **channel** (appl, sender, receiver, tag, communicator) is the
k-th its receiver receives there (MPI's non-overtaking rule), and so the k-th of a given size (order is kept within
any subset of a channel's messages: counting by size too keeps a receive without a recorded send, or a send whose
receive completed in a multi-message call, from shifting the count of the others). A trace window that cuts a
message in flight leaves one end out, which shifts the receiver's count on that channel: the shift (within
``MAX_SHIFT``) is the one under which the two ends of the channel's first ``HEAD`` messages lie closest in time
(median; one run's clocks are synchronised across its ranks, and a window starts at one time on all of them), ties
going to 0. A message is named by the count of the end that saw more of its channel: a rank whose trace starts an
iteration late (tracing enabled late on it) misses the first message of every channel it sends on as well as of every
channel it receives on, so its sends are counted on from its partner's receives, as its receives are from its
partner's sends, and its messages get the names they have in a run where it started with the others. Where the
channels' counts and the ranks' starts tell the shift, they decide it over the channel's own times
(:func:`_by_rank_starts`): each end's start lost the messages its partner passed before it began, as the counts
confirm (a trace starts once: a rank late on the channels it sends on is late on those it receives on).

The **ends** of a message are the bursts that produce and consume it: the burst closed by the call that sends it
and the burst opened by the call that receives it (calls with exactly one message, a send or a receive, not both;
after an ``MPI_ANY_SOURCE`` receive the burst that follows works on the message that arrived, whatever the order).
``smsg`` names the message a burst sends, ``rmsg`` the one it receives (UInt64 hashes; 0: none; ``UNNAMED``: an end
on a channel whose shift no time decides). Under a right alignment the two ends of a reference message are matched
to the two ends of *one* message of the other run: if rank a's burst that sends it is matched to burst j, rank b's
burst that receives it is matched to the burst that receives j's message. That ties the alignments of all ranks
together:

- :func:`agreement`: per reference end whose message has both ends matched, whether the two matches name one
  message of the other run (the ``msg_agreement`` signal of :mod:`synthtrace.tracelib.merge.checks`);
- :func:`disagreeing`: the threads whose own matches disagree with their partners' both ways (a rank aligned an
  iteration off, e.g. one whose call sequence alone cannot tell its iterations apart: the ``msg_misaligned``
  signal);
- :func:`implied_pairs`: per end, the partner its message's other end implies; :func:`follow_messages` re-aligns
  the :func:`outvoted` threads on them (in :func:`synthtrace.tracelib.merge.align.align_runs`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import polars as pl
from numba import njit

from synthtrace.tracelib.merge.anchors import longest_chain
from synthtrace.tracelib.merge.messages import NOT_ARRIVAL_CALLS

#: largest shift (messages) between a channel's send and receive counts that a chopped window may cause
MAX_SHIFT = 2
#: the shift is judged on a channel's first messages: a window starts at one time on every rank, and the ranks'
#: progress drifts apart later in a run (a rank may run ahead of a partner by several messages)
HEAD = 2
#: a shift is taken when its median gap is below this share of the next best shift's (else the channel names none)
DECISIVE = 0.5
#: disagreeing messages a thread sends (and receives), more than agree, before it counts as misaligned
MIN_ENDS = 3
#: the columns of a call :func:`message_ends` reads (besides appl, task and its time ``t``)
MESSAGE_COLUMNS = ("mpi_call", "peer", "bytes_sent", "bytes_recv", "comm", "tag", "n_messages")
CHANNEL = ["appl", "_src", "_dst", "tag", "comm", "_bytes"]
UNNAMED = 1


class Ends(NamedTuple):
    """The message ends of one prepared run (row i of each array is row i of its sequence table)."""

    send: np.ndarray  # uint64: the message the row's burst sends (0: none, UNNAMED)
    recv: np.ndarray  # uint64: the message the row's burst receives
    send_chan: np.ndarray  # uint64: the channel of the message it sends (0: none)
    recv_chan: np.ndarray  # uint64: the channel of the message it receives


def _single(calls: pl.DataFrame, sending: bool) -> pl.DataFrame:
    """The rows of ``calls`` (with their ``_row``) that send (or receive) exactly one message and nothing else:
    row, channel, count ``_k`` on the channel, time."""
    one = (pl.col("n_messages").fill_null(1) == 1) & pl.col("peer").is_not_null()
    sent, recv = pl.col("bytes_sent").fill_null(0) > 0, pl.col("bytes_recv").fill_null(0) > 0
    me, peer = pl.col("task").cast(pl.Int64), pl.col("peer").cast(pl.Int64)
    return (calls.filter(one & (sent & ~recv if sending else recv & ~sent))
            .select("_row", "appl", (me if sending else peer).alias("_src"), (peer if sending else me).alias("_dst"),
                    "tag", "comm", pl.max_horizontal(pl.col("bytes_sent").fill_null(0),
                                                     pl.col("bytes_recv").fill_null(0)).alias("_bytes"), "t")
            .with_columns(pl.int_range(pl.len()).over(CHANNEL, order_by="t").alias("_k")))


def _by_rank_starts(shift: pl.DataFrame, sends: pl.DataFrame, recvs: pl.DataFrame,
                    first: pl.DataFrame) -> pl.DataFrame:
    """Per channel, what to add to the count of each end to name its messages (CHANNEL, ``_sadd``, ``_radd``): from
    the ranks' starts where the channel's counts confirm them, else from its fit (``shift``: CHANNEL, ``_shift``,
    decisive shifts only; receive k is send k + shift: the end that saw fewer is counted on from the other's).

    A trace starts once: a rank whose trace began late lacks the first messages of every channel it sends on *and*
    of every channel it receives on, as many as its partner's end of the channel passed (a quarter of the channel's
    period or more) before the rank's first burst (``first``: appl, task, ``_t0``, ns; one run's clocks are
    synchronised, and its traces start together). A whole program's trace ends with no message in flight
    (``MPI_Finalize`` waits for them), so the channel's counts fix the difference: the receiver's start lost as
    many messages more than the sender's as the sender sent more than the receiver received. Of the pairs that
    fit the counts, the nearest what the partners passed is taken, and kept when each end lost some exactly when
    its partner had passed some (else the counts differ at the end, or the clocks drifted within an iteration). A
    rank whose kept ends agree on what it lost lost that on its other channels too, where their counts agree (two
    late neighbours: neither passed a message before the other began). The messages are then named as if every
    rank had started with the run: each end counted on by what its start lost. That decides over the channel's
    own fit where a start lost messages (a posted receive lies between two of its partner's sends, and ranks drift
    apart within a few messages, so the first messages' times may point at the wrong send); where no start lost
    any and the fit did not decide, the channel has shift 0."""
    n = pl.len().cast(pl.Int64)
    t0 = first.select("appl", pl.col("task").cast(pl.Int64), "_t0")

    def before(e: pl.DataFrame, start_of: str, name: str) -> pl.DataFrame:
        # per channel: its messages at ``e``'s end passed a quarter of its period (the median interval between
        # them) or more before the first burst of the other end's rank ``start_of`` (ranks start a little apart)
        return (e.sort("t").join(t0, left_on=["appl", start_of], right_on=["appl", "task"])
                .group_by(CHANNEL).agg((pl.col("t") < pl.col("_t0") - pl.col("t").diff().median() / 4).sum()
                                       .cast(pl.Int64).alias(name)))

    ends_ = (sends.group_by(CHANNEL).agg(n.alias("_ns"))
             .join(recvs.group_by(CHANNEL).agg(n.alias("_nr")), on=CHANNEL, nulls_equal=True)
             .join(before(recvs, "_src", "_es"), on=CHANNEL, nulls_equal=True)
             .join(before(sends, "_dst", "_er"), on=CHANNEL, nulls_equal=True)
             .with_columns((pl.col("_ns") - pl.col("_nr")).alias("_dn")))
    # the sender's start lost m messages, the receiver's m + (sent - received): the m nearest what each end's
    # partner did before it started (the ranks' clocks drift apart within an iteration or two), kept when each end
    # lost some exactly when its partner had already passed messages of the channel (else the counts differ at the
    # end, or the ranks started apart by less than a message)
    lo = (-pl.col("_dn")).clip(lower_bound=0)
    cost = (pl.col("_m") - pl.col("_es")).abs() + (pl.col("_m") + pl.col("_dn") - pl.col("_er")).abs()
    kept = ((pl.col("_sadd") > 0) == (pl.col("_es") > 0)) & ((pl.col("_radd") > 0) == (pl.col("_er") > 0))
    chosen = (ends_.with_columns(pl.int_ranges(lo, lo + MAX_SHIFT + 1).alias("_m")).explode("_m")
              .with_columns(cost.alias("_cost")).sort(*CHANNEL, "_cost", "_m").unique(CHANNEL, keep="first")
              .select(*CHANNEL, "_dn", pl.col("_m").alias("_sadd"), (pl.col("_m") + pl.col("_dn")).alias("_radd"),
                      "_es", "_er")
              .with_columns(((pl.col("_es") == 0) & (pl.col("_er") == 0)).alias("_none"))
              .with_columns((kept & ~pl.col("_none")).alias("_kept")))
    # a trace starts once: a rank whose kept channel ends agree on what its start lost lost that on its other
    # channels too, where their counts agree (two late neighbours: neither passed a message before the other began)
    kept_ends = chosen.filter("_kept")
    lost = (pl.concat([kept_ends.select("appl", pl.col(me).alias("_me"), pl.col(add).alias("_L"))
                       for me, add in (("_src", "_sadd"), ("_dst", "_radd"))])
            .group_by("appl", "_me").agg(pl.col("_L").first(), pl.col("_L").n_unique().alias("_n"))
            .filter(pl.col("_n") == 1).drop("_n"))
    rest = (chosen.filter(~pl.col("_kept"))
            .join(lost.rename({"_me": "_src", "_L": "_Ls"}), on=["appl", "_src"])
            .join(lost.rename({"_me": "_dst", "_L": "_Ld"}), on=["appl", "_dst"])
            .filter(pl.col("_Ld") - pl.col("_Ls") == pl.col("_dn"))
            .select(*CHANNEL, pl.col("_Ls").alias("_sadd"), pl.col("_Ld").alias("_radd")))
    starts = pl.concat([
        kept_ends.select(*CHANNEL, "_sadd", "_radd"), rest,
        chosen.filter(~pl.col("_kept") & pl.col("_none")).join(rest, on=CHANNEL, how="anti", nulls_equal=True)
        .select(*CHANNEL, *[pl.lit(0, pl.Int64).alias(c) for c in ("_sadd", "_radd")])])
    fit = shift.select(*CHANNEL, (-pl.col("_shift")).clip(lower_bound=0).alias("_fs"),
                       pl.col("_shift").clip(lower_bound=0).alias("_fr"))
    late = (pl.col("_sadd") > 0) | (pl.col("_radd") > 0)
    return (starts.join(fit, on=CHANNEL, how="full", nulls_equal=True, coalesce=True)
            .select(*CHANNEL, *[pl.when(late | pl.col("_fs").is_null()).then(pl.col(c)).otherwise(pl.col(f)).alias(c)
                                for c, f in (("_sadd", "_fs"), ("_radd", "_fr"))]))


def message_ends(closing: pl.DataFrame, opening: pl.DataFrame) -> pl.DataFrame:
    """``smsg`` and ``rmsg`` (UInt64) of every row: the message its burst sends by its closing call and receives by its
    opening call, and ``schan`` / ``rchan``, their channels (rows of ``closing`` and ``opening``: appl, task,
    ``MESSAGE_COLUMNS`` of that call, NULL without one, and ``t``: the burst's end, resp. start, ns)."""
    # a receive posted by a nonblocking call (MPI_Irecv) is the burst before it; a receive that completes the
    # message, the burst after it (the one that works on it)
    posting = pl.col("mpi_call").fill_null("").str.starts_with("MPI_I")
    sends = _single(closing.with_row_index("_row"), True)
    recvs = _single(pl.concat([opening.with_row_index("_row").filter(~posting),
                               closing.with_row_index("_row").filter(posting)]), False)
    head = sends.select(*CHANNEL, "_k", pl.col("t").alias("_ts"))
    # the shift of each channel's receive count: receive k is the send k + shift whose time is closest
    fit = pl.concat([
        recvs.filter(pl.col("_k") < HEAD).select(*CHANNEL, (pl.col("_k") + d).alias("_k"), "t")
        .join(head, on=[*CHANNEL, "_k"], nulls_equal=True)
        .group_by(CHANNEL).agg((pl.col("t") - pl.col("_ts")).abs().median().alias("_gap"))
        .with_columns(pl.lit(d, pl.Int64).alias("_shift"))
        for d in range(-MAX_SHIFT, MAX_SHIFT + 1)])
    # decisive: the best shift's gap is below DECISIVE times the next best's (ranks that drift apart within a few
    # messages give no answer, and their channel names no message)
    shift = (fit.sort(*CHANNEL, "_gap", pl.col("_shift").abs(), nulls_last=True)
             .group_by(CHANNEL, maintain_order=True)
             .agg(pl.col("_shift").first(), pl.col("_gap").first().alias("_g0"),
                  pl.col("_gap").get(1, null_on_oob=True).alias("_g1"))
             .filter(pl.col("_g0") < DECISIVE * pl.col("_g1")).select(*CHANNEL, "_shift"))
    first = opening.group_by("appl", pl.col("task").cast(pl.Int64)).agg(pl.col("t").min().alias("_t0"))
    adds = _by_rank_starts(shift, sends, recvs, first)

    def named(e: pl.DataFrame, receiving: bool) -> pl.Series:
        # a message is named by its count in a trace that saw its whole channel: receive k is send k + shift, so a
        # positive shift (the receiver's trace missed the first messages) moves the receives' count, a negative
        # one (the sender's trace started later: a rank whose tracing began an iteration late) the sends'; where
        # the ranks' starts tell, each end's count moves by the messages its start lost. Its messages are then
        # named as in a run where it started with the others, both ways
        add = "_radd" if receiving else "_sadd"
        e = e.join(adds.select(*CHANNEL, add), on=CHANNEL, how="left", nulls_equal=True, maintain_order="left")
        msg = (pl.when(pl.col(add).is_not_null())
               .then(pl.struct(*CHANNEL, (pl.col("_k") + pl.col(add)).alias("_k")).hash(7).clip(UNNAMED + 1))
               .otherwise(UNNAMED))
        out = np.zeros((2, closing.height), np.uint64)
        rows = e.get_column("_row").to_numpy()
        out[0, rows] = e.select(msg).to_series().to_numpy()
        out[1, rows] = e.select(pl.struct(CHANNEL).hash(7).clip(1)).to_series().to_numpy()
        return out

    (smsg, schan), (rmsg, rchan) = named(sends, False), named(recvs, True)
    # the message the opening call completed: a single-message receive that is no set-completing call
    arrived = _single(opening.with_row_index("_row").filter(
        ~pl.col("mpi_call").fill_null("").is_in(list(NOT_ARRIVAL_CALLS)) & ~posting), False)
    achan = np.zeros(closing.height, np.uint64)
    achan[arrived.get_column("_row").to_numpy()] = (arrived.select(pl.struct(CHANNEL).hash(7).clip(1))
                                                    .to_series().to_numpy())
    # [helper merge-pieces] amsg: without logical messages no message is named across runs (0)
    return pl.DataFrame({"smsg": smsg, "rmsg": rmsg, "schan": schan, "rchan": rchan, "achan": achan,
                         "amsg": np.zeros(closing.height, np.uint64)},
                        schema=dict.fromkeys(["smsg", "rmsg", "schan", "rchan", "achan", "amsg"], pl.UInt64))


def logical_ends(bursts: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """``smsg``, ``rmsg``, ``schan``, ``rchan`` (UInt64, as :func:`message_ends`) of every row of ``bursts`` (appl,
    task, thread, ``mpi_call`` (closing call), ``_close_seq`` / ``_open_seq``: call_seq of the call closing /
    opening the burst, ``_open_call``: the opening call's name) from the run's logical messages
    (:func:`synthtrace.tracelib.merge.messages.logical_messages`): a message is sent by the burst its sending call
    closes, and received by the burst its receiving call opens, or closes when that call only posts the receive
    (``MPI_Irecv``: the burst before it). Names come from the logical identity: no time, no shift. ``achan``: the
    channel (as ``rchan``) of the message the burst's opening call completed (``c_call_seq``), when that call
    completed exactly one and is no set-completing call nor a test (``MPI_Waitall``, ``MPI_Test``, ...): the burst that
    follows an ``MPI_Waitany`` or an ``MPI_ANY_SOURCE`` receive works on the message that arrived (0: none);
    ``amsg``: that message's name (as ``rmsg``)."""
    name = (pl.when(pl.col("k").is_null()).then(pl.lit(UNNAMED, pl.UInt64))  # a message no count names
            .otherwise(pl.struct("appl", "comm", "sender", "receiver", "tag", "k").hash(7).clip(UNNAMED + 1)))
    chan = pl.struct("appl", "comm", "sender", "receiver", "tag", "bytes").hash(7).clip(1)
    m = messages.select(pl.col("appl").cast(pl.Int32), pl.col("sender").cast(pl.Int32),
                        pl.col("receiver").cast(pl.Int32), pl.col("s_thread").cast(pl.Int32), "s_call_seq",
                        pl.col("r_thread").cast(pl.Int32), "r_call_seq", "c_call_seq", name.alias("_msg"),
                        chan.alias("_chan"))
    b = bursts.with_row_index("_row").with_columns(pl.col("appl", "task", "thread").cast(pl.Int32))
    posts = pl.col("mpi_call").fill_null("").str.starts_with("MPI_I")
    opened_by_completion = ~pl.col("_open_call").fill_null("").str.starts_with("MPI_I")
    keys = ["appl", "task", "thread"]
    # each join of the rows' keys, row and message alone (a join's output carries every column of both sides:
    # the rows' call names were copied per message end, issue 23)
    closing, opening = [*keys, "_close_seq", "_row"], [*keys, "_open_seq", "_row"]
    ends_ = ["_msg", "_chan"]
    sends = b.select(closing).join(m.select("appl", "sender", "s_thread", "s_call_seq", *ends_),
                                   left_on=[*keys, "_close_seq"], right_on=["appl", "sender", "s_thread", "s_call_seq"])
    received = m.select("appl", "receiver", "r_thread", "r_call_seq", *ends_)
    recvs = pl.concat([
        b.filter(posts).select(closing).join(received, left_on=[*keys, "_close_seq"],
                                             right_on=["appl", "receiver", "r_thread", "r_call_seq"]),
        b.filter(opened_by_completion).select(opening).join(received, left_on=[*keys, "_open_seq"],
                                                            right_on=["appl", "receiver", "r_thread", "r_call_seq"])],
        how="diagonal_relaxed")
    out = np.zeros((4, bursts.height), np.uint64)
    for i, e in enumerate((sends, recvs)):  # a row that is the end of several messages keeps its first
        e = e.select("_row", "_msg", "_chan").sort("_row").unique("_row", keep="first")
        rows = e.get_column("_row").to_numpy()
        out[2 * i, rows] = e.get_column("_msg").to_numpy()
        out[2 * i + 1, rows] = e.get_column("_chan").to_numpy()
    # the message the burst's opening call completed, when it completed exactly one and is no set-completing call
    done = (m.filter(pl.col("c_call_seq").is_not_null())
            .group_by("appl", "receiver", "r_thread", "c_call_seq").agg(pl.len().alias("_n"), pl.col("_chan").first(),
                                                                        pl.col("_msg").first())  # [helper merge-pieces]
            .filter(pl.col("_n") == 1))
    one = ~pl.col("_open_call").fill_null("").is_in(list(NOT_ARRIVAL_CALLS))
    arr = (b.filter(one).select(opening).join(done, left_on=[*keys, "_open_seq"],
                                              right_on=["appl", "receiver", "r_thread", "c_call_seq"])
           .select("_row", "_chan", "_msg"))
    achan = np.zeros(bursts.height, np.uint64)
    achan[arr.get_column("_row").to_numpy()] = arr.get_column("_chan").to_numpy()
    # [helper merge-pieces] amsg: that message's logical name (as rmsg), what the burst works on in every run
    amsg = np.zeros(bursts.height, np.uint64)
    amsg[arr.get_column("_row").to_numpy()] = arr.get_column("_msg").to_numpy()
    return pl.DataFrame({"smsg": out[0], "rmsg": out[2], "schan": out[1], "rchan": out[3], "achan": achan,
                         "amsg": amsg},
                        schema=dict.fromkeys(["smsg", "rmsg", "schan", "rchan", "achan", "amsg"], pl.UInt64))


def ends(t: pl.DataFrame) -> Ends:
    """The message ends of a sequence table (columns ``smsg``, ``rmsg``, ``schan``, ``rchan`` and, when it has it,
    ``_tid``, the row's thread), less those on a channel several threads of a task send or receive on: with
    ``MPI_THREAD_MULTIPLE`` two threads receiving on one (communicator, source, tag) take its messages in the order
    they posted their receives, and two threads sending on one interleave as they run, so which thread holds the
    k-th message follows timing and differs per run (mergeattack23 P8). Such a message names no thread's position:
    its ends are left unnamed (0), unchecked."""
    e = Ends(*(t.get_column(c).to_numpy() for c in ("smsg", "rmsg", "schan", "rchan")))
    if "_tid" not in t.columns:
        return e
    tid = t.get_column("_tid").to_numpy()
    shared = np.union1d(_shared_channels(e.send_chan, tid), _shared_channels(e.recv_chan, tid))
    if not shared.size:
        return e
    return e._replace(send=np.where(np.isin(e.send_chan, shared), 0, e.send).astype(np.uint64),
                      recv=np.where(np.isin(e.recv_chan, shared), 0, e.recv).astype(np.uint64))


def _shared_channels(chan: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The channels (nonzero values of ``chan``, one per row) that rows of more than one thread (``tid``) hold."""
    held = chan > 0
    # a hash group-by: a sort of every row (np.lexsort) took 2.2 s CPU at 5M rows, and ends() runs several times
    # per alignment (review24 F6)
    return (pl.DataFrame({"c": chan[held], "t": tid[held]}).lazy().group_by("c")
            .agg(shared=pl.col("t").min() != pl.col("t").max()).filter("shared")
            .collect().get_column("c").sort().to_numpy())


def _pairs(e: Ends) -> tuple[np.ndarray, np.ndarray]:
    """(sending row, receiving row) of every named message of a run with both ends in it."""
    rows = np.arange(e.send.size)
    s, r = rows[e.send > UNNAMED], rows[e.recv > UNNAMED]
    s = s[np.argsort(e.send[s], kind="stable")]
    pos = np.searchsorted(e.send[s], e.recv[r])
    ok = pos < s.size
    ok[ok] = e.send[s][pos[ok]] == e.recv[r][ok]
    return s[pos[ok]], r[ok]


def _lookup(msgs: np.ndarray, msg: np.ndarray) -> np.ndarray:
    """Row of each named message ``msg`` in ``msgs`` (one run's ``send`` or ``recv``; -1: not in it)."""
    rows = np.flatnonzero(msgs > UNNAMED)
    rows = rows[np.argsort(msgs[rows], kind="stable")]
    pos = np.minimum(np.searchsorted(msgs[rows], msg), max(rows.size - 1, 0))
    ok = (msg > UNNAMED) & (rows.size > 0)
    ok[ok] = msgs[rows[pos[ok]]] == msg[ok]
    return np.where(ok, rows[pos] if rows.size else -1, -1)


def agreement(ref: Ends, other: Ends, out: np.ndarray) -> np.ndarray:
    """Per reference row: 1 when the message it sends or receives has both ends matched (``out``: other row per
    reference row, -1 unmatched) to the two ends of one message of the other run, 0 when they are matched to the
    ends of two different messages of its channel; -1 when the row is no end, an end of its message is unmatched
    or matched to an end on another channel (an ``MPI_ANY_SOURCE`` receive takes another partner's message in
    another order: that is the arrival order, not the alignment) or the other run names no message there (no
    decisive shift). A row that is the end of two messages (receives one, sends another) holds the worse."""
    s, r = _pairs(ref)
    so, ro = out[s], out[r]
    both = (so >= 0) & (ro >= 0)
    so, ro, s, r = so[both], ro[both], s[both], r[both]
    a, b = other.send[so], other.recv[ro]
    chan = ref.send_chan[s]
    same = (other.send_chan[so] == chan) & (other.recv_chan[ro] == chan) & (a > UNNAMED) & (b > UNNAMED)
    ok = np.where(same, (a == b).astype(np.int8), -1)
    res = np.full(out.size, 2, np.int8)  # 2: not set
    for rows in (s, r):
        np.minimum.at(res, rows, np.where(ok < 0, 2, ok).astype(np.int8))
        # an unchecked message leaves its ends unchecked unless another message checks them
    return np.where(res == 2, -1, res).astype(np.int8)


def bracketed(thread: np.ndarray, agree: np.ndarray, matched: np.ndarray) -> pl.Series:
    """Per reference row (rows of a thread contiguous, in order): whether the nearest checked message end at or
    before it and the nearest at or after it on its thread (``agree`` of :func:`agreement`: 1 agrees, 0 disagrees,
    -1 unchecked) both agree (a Boolean series); NULL when the row is not ``matched`` or its thread checks no message
    on either side. A pair between two agreeing messages lies where both runs' partners say it does: a shift of an
    iteration on one rank and not on its partner makes the messages around it disagree.

    Two passes of a kernel over the rows (one byte per row): a fill per thread by a window expression held several
    copies of the 1.3 M rows of a 550 MB run at the end of the alignment, its peak."""
    if thread.size > 1 and bool((thread[1:] < thread[:-1]).any()):  # threads not in order: each thread's rows, in order
        order = np.argsort(thread, kind="stable")
        code = np.empty(thread.size, np.int8)
        code[order] = _bracket(thread[order], agree[order].astype(np.int8), matched[order].astype(np.bool_))
    else:
        code = _bracket(thread, agree.astype(np.int8, copy=False), matched.astype(np.bool_, copy=False))
    return pl.Series("msg_consistent", code == 1, pl.Boolean).scatter(np.flatnonzero(code < 0), None)


@njit(cache=True, nogil=True)
def _bracket(thread: np.ndarray, agree: np.ndarray, matched: np.ndarray) -> np.ndarray:
    """Per row (rows of a thread contiguous): 1 when the nearest checked end (``agree`` >= 0) at or before it and at
    or after it on its thread both agree (1; none on one side counts as agreeing), 0 when one does not, -1 when the
    row is not ``matched`` or its thread checks none on either side."""
    n = thread.size
    out = np.empty(n, np.int8)
    prev = -1
    for i in range(n):  # the nearest checked end at or before the row (-1: none)
        if i == 0 or thread[i] != thread[i - 1]:
            prev = -1
        if agree[i] >= 0:
            prev = agree[i]
        out[i] = prev
    nxt = -1
    for i in range(n - 1, -1, -1):  # and at or after it
        if i == n - 1 or thread[i] != thread[i + 1]:
            nxt = -1
        if agree[i] >= 0:
            nxt = agree[i]
        p = out[i]
        if not matched[i] or (p < 0 and nxt < 0):
            out[i] = -1
        else:
            out[i] = 1 if (p < 0 or p == 1) and (nxt < 0 or nxt == 1) else 0
    return out


def implied_pairs(ref: Ends, other: Ends, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(reference row, other row): for each end of a reference message whose other end is matched to an end of a
    message of the other run, that message's corresponding end."""
    s, r = _pairs(ref)
    so, ro = out[s], out[r]
    from_s = so >= 0  # the sender's match names the receiver's partner
    from_r = ro >= 0
    ri = np.r_[r[from_s], s[from_r]]
    oj = np.r_[_lookup(other.recv, other.send[so[from_s]]), _lookup(other.send, other.recv[ro[from_r]])]
    keep = oj >= 0
    ri, oj = ri[keep], oj[keep]
    order = np.argsort(ri, kind="stable")
    ri, oj = ri[order], oj[order]
    first = np.r_[True, ri[1:] != ri[:-1]] if ri.size else np.zeros(0, bool)  # one per row (two messages: the first)
    return ri[first], oj[first]


def disagreeing(ref: Ends, thread: np.ndarray, agree: np.ndarray) -> pl.DataFrame:
    """Per thread whose messages disagree: ``t`` (a value of ``thread``, one per reference row), ``partners`` (the
    number of partner links on which most of its checked messages disagree, sends and receives apart) and
    ``misaligned``: over those links, at least ``MIN_ENDS`` of the messages it sends disagree, more than agree, and
    so do the messages it receives. A thread aligned an iteration off disagrees with every partner both ways; a
    channel whose shift one run's timing got wrong disagrees one way only, and so does not make its two threads
    misaligned."""
    s, r = _pairs(ref)
    ok = agree[s]
    m = pl.DataFrame({"a": thread[s], "b": thread[r], "bad": ok == 0, "good": ok == 1})
    links = (m.group_by("a", "b").agg(pl.col("bad").sum(), pl.col("good").sum())
             .filter(pl.col("bad") > pl.col("good")))
    ends_ = pl.concat([links.select(pl.col("a").alias("t"), pl.col("b").alias("p"), "bad", "good",
                                    pl.lit(True).alias("sends")),
                       links.select(pl.col("b").alias("t"), pl.col("a").alias("p"), "bad", "good",
                                    pl.lit(False).alias("sends"))])
    way = (ends_.group_by("t", "sends").agg(pl.col("p").n_unique(), pl.col("bad").sum(), pl.col("good").sum())
           .with_columns(((pl.col("bad") >= MIN_ENDS) & (pl.col("bad") > pl.col("good"))).alias("off")))
    both = (pl.col("off") & pl.col("sends")).any() & (pl.col("off") & ~pl.col("sends")).any()
    return way.group_by("t").agg(pl.col("p").sum().alias("partners"), both.alias("misaligned"))


def outvoted(ref: Ends, thread: np.ndarray, agree: np.ndarray) -> np.ndarray:
    """Threads (values of ``thread``) to re-align on their partners' messages: misaligned (:func:`disagreeing`) and
    disagreeing with more partner threads than any of those partners does (the rank an iteration off, not its
    neighbours, which disagree with it alone)."""
    d = disagreeing(ref, thread, agree)
    s, r = _pairs(ref)
    bad = agree[s] == 0
    links = pl.DataFrame({"t": np.r_[thread[s[bad]], thread[r[bad]]], "p": np.r_[thread[r[bad]], thread[s[bad]]]})
    most = (links.unique().join(d.select(pl.col("t").alias("p"), pl.col("partners").alias("pp")), on="p")
            .group_by("t").agg(pl.col("pp").max()))
    return (d.filter("misaligned").join(most, on="t", how="left")
            .filter(pl.col("partners") > pl.col("pp").fill_null(0)).get_column("t").to_numpy())


def follow_messages(out: np.ndarray, ref: Ends, other: Ends, r_off: np.ndarray, o_off: np.ndarray,
                    realign: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``out`` (other row per reference row; rows of thread t are ``r_off[t]:r_off[t+1]``, its other rows
    ``o_off[t]:o_off[t+1]``) with the :func:`outvoted` threads re-aligned by ``realign`` (the aligner's kernel on
    the given threads, with the given anchor per reference row) on the pairs their partners' messages imply (their
    longest monotone chain), where that leaves fewer of the thread's ends disagreeing; and the threads so
    re-aligned."""
    r_thread = np.repeat(np.arange(r_off.size - 1), np.diff(r_off))
    o_thread = np.repeat(np.arange(o_off.size - 1), np.diff(o_off))
    agree = agreement(ref, other, out)
    bad = outvoted(ref, r_thread, agree)
    if bad.size == 0:
        return out, bad
    ri, oj = implied_pairs(ref, other, out)
    keep = np.isin(r_thread[ri], bad) & (o_thread[oj] == r_thread[ri])
    ri, oj = ri[keep], oj[keep]
    anchor = np.full(out.size, -1, np.int64)
    chain = longest_chain(r_thread[ri], oj)
    anchor[ri[chain]] = oj[chain]
    bad = np.sort(bad)
    new = realign(bad, anchor)
    after = agreement(ref, other, new)
    kept = []
    for t in bad:  # one step per outvoted thread
        lo, hi = r_off[t], r_off[t + 1]
        if (after[lo:hi] == 0).sum() < (agree[lo:hi] == 0).sum():
            out[lo:hi] = new[lo:hi]
            kept.append(t)
    return out, np.array(kept, np.int64)
