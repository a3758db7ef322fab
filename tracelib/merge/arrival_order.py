"""Pairs whose work follows the order the messages arrived in, beyond the opening-message check (mergeattack21 M5,
M6): which burst of the other run holds the reference burst's work, or none.

Two ways a program's work follows arrival order that the aligner's position and the opening messages miss:

- **work that ran on** (M5): the code after a receive processes the message, and what comes after that processing
  depends on arrival: the *last* of a round of ``MPI_ANY_SOURCE`` receives is followed by the next phase without
  an MPI call between, so its processing and that phase are one burst, closed by the next phase's call (an
  ``MPI_Allreduce``), while the other messages' bursts are closed by the next receive. Which message is last differs
  between runs, so a burst's counterpart is either closed by another call (the same message, processed alone in
  one run and with the next phase in the other) or opened by another message (the same position: last message +
  next phase in both runs, other messages). Neither holds the reference burst's work: no burst of the other run
  is its counterpart. :func:`ran_on` finds them: a pair whose closing calls differ, or a burst whose opening
  message's burst in the other run (its twin) is closed by another call, and whose work differs from that burst's
  beyond ``tolerance`` (a closing call that differs over negligible work, e.g. the last result of a master-worker
  round processed before the round's collective in one run and before the next ``MPI_Iprobe`` in the other, is the
  same work: kept). Polls and completion calls close bursts in run-dependent numbers and places (a loop of tests
  ends when the message came) and count as one closing call (:data:`POLL_UNIT_CALLS`).
- **requests taken in request order** (M6): ``MPI_Irecv(MPI_ANY_SOURCE)`` requests completed together (an
  ``MPI_Waitall``) hold whichever messages arrived first, and code that then works on request 0, 1, ... (reading
  each status's source) unpacks another neighbour's message in each position when the runs' arrival orders differ.
  The trace names the request each message matched: a Paraver record's logical receive time lies in the posting
  ``MPI_Irecv`` (``r_call_seq``), its physical receive time in the completing call (``c_call_seq``).
  :func:`request_bursts` gives the j-th burst after such a completion (the span up to the next call that waits,
  receives or is collective: sends in between, e.g. a report per message, up to a send back on one of the set's
  channels, which starts the next exchange) the message of the j-th request.

Which model is right, position (the code after the set does the same whatever came) or message (it unpacks what
came: the usual code, since the status says whose data it is), the calls cannot say; the work can. The burst of the
same work differs between runs by their noise only (instructions by ~0.1-1 %), another message's by the difference
of the work too: per reference thread, when the request twins' typical log distance to the reference bursts' work
is ``CLEARER`` times smaller than the positional matches', the pairs follow the messages (:func:`by_request`);
when the position's is that much smaller, they stay; when the work cannot tell (alike neighbours), the pairs are
flagged like ``msg_mismatch``: their values may be another message's. A trace recording the receive in its
completing call (Score-P) names no request order: nothing is re-paired there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.merge.checks import call_unit
from synthtrace.tracelib.merge.messages import CHANNEL, MULTI_COMPLETION_CALLS, NO_COMM
from synthtrace.tracelib.merge.noise import NOISE_FLOOR
from synthtrace.tracelib.schema import THREAD_KEYS

#: calls after which the work of a set completion's span goes on (a report sent per message)
SPAN_CALLS: tuple[str, ...] = calls_with(roles=("send",))
#: the identity of a message (its channel and order on it) as the request tables name it
MESSAGE_KEY: list[str] = [*CHANNEL[1:], "k"]
REQUEST_SCHEMA: dict[str, pl.DataType] = {"appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(),
                                          "burst_seq": pl.Int64(), "comm": pl.Int64(), "sender": pl.Int32(),
                                          "receiver": pl.Int32(), "tag": pl.Int64(), "k": pl.Int64()}
_BK = [*THREAD_KEYS, "burst_seq"]
#: one pairing fits the work clearly better than the other when its typical distance (median |log ratio|) is this
#: many times smaller; distances under noise.NOISE_FLOOR (log) are noise alike
CLEARER = 3.0
#: two bursts hold the same work when their work differs by less than this (log), or than ``CLEARER`` times their
#: thread's typical pair difference where that is larger (the values a merge transfers are read within ~2 %)
SAME_WORK = 0.02


def _keys() -> list[pl.Expr]:
    return [pl.col(k).cast(pl.Int32) for k in THREAD_KEYS]


def request_bursts(bursts: pl.DataFrame, calls: pl.DataFrame, messages: pl.DataFrame | None) -> pl.DataFrame:
    """Per burst in the span after a set completion (:data:`MULTI_COMPLETION_CALLS` that completed two receives or
    more, each naming the call that posted it), the message of the request it works on (:data:`REQUEST_SCHEMA`): the
    span's j-th burst takes the j-th request's (requests in posting order). The span is the burst the completion
    opened and the bursts after it opened by sends (:data:`SPAN_CALLS`), at most one per request, up to the first
    send to a task the set received from on that communicator and tag (the next exchange's: its work is the next
    iteration's packing, not the requests' messages); a span of one burst (the work on the whole set) names none."""
    empty = pl.DataFrame(schema=REQUEST_SCHEMA)
    if messages is None or messages.height == 0 or calls.height == 0 or bursts.height == 0:
        return empty
    sets = calls.filter(pl.col("mpi_call").is_in(list(MULTI_COMPLETION_CALLS))).select(*_keys(), "call_seq")
    done = (messages.filter(pl.col("c_call_seq").is_not_null() & pl.col("r_call_seq").is_not_null()
                            & (pl.col("r_call_seq") != pl.col("c_call_seq")))
            .select(pl.col("appl").cast(pl.Int32), pl.col("receiver").cast(pl.Int32).alias("task"),
                    pl.col("r_thread").cast(pl.Int32).alias("thread"), pl.col("c_call_seq").alias("call_seq"),
                    "r_call_seq", *MESSAGE_KEY)
            .join(sets, on=[*THREAD_KEYS, "call_seq"])
            .sort("r_call_seq")
            .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(*THREAD_KEYS, "call_seq").alias("_j"),
                          pl.len().over(*THREAD_KEYS, "call_seq").alias("_n"))
            .filter(pl.col("_n") >= 2))
    if done.height == 0:
        return empty
    opening = calls.select(*_keys(), pl.col("end_ns").alias("start_ns"), pl.col("call_seq").alias("_open"),
                           pl.col("mpi_call").alias("_by"), pl.col("peer").cast(pl.Int32).alias("_peer"),
                           pl.col("comm").cast(pl.Int64).fill_null(NO_COMM).alias("_comm"),
                           pl.col("tag").fill_null(0).alias("_tag")).unique([*THREAD_KEYS, "start_ns"], keep="first")
    b = (bursts.select(*_keys(), "burst_seq", "start_ns").sort(*THREAD_KEYS, "start_ns")
         .join(opening, on=[*THREAD_KEYS, "start_ns"], how="left", maintain_order="left"))
    goes_on = pl.col("_by").is_in(list(SPAN_CALLS)).fill_null(False)
    b = (b.with_columns((~goes_on).cum_sum().over(THREAD_KEYS).alias("_span"))
         .with_columns(pl.col("_open").first().over(*THREAD_KEYS, "_span").alias("call_seq")))
    # [verdict23] a send back on one of the set's channels (to a task it received from, on that communicator and
    # tag) starts the next exchange (the next iteration's sends): the span ends before it
    back = (done.select(*THREAD_KEYS, "call_seq", pl.col("comm").alias("_comm"),
                        pl.col("sender").cast(pl.Int32).alias("_peer"), pl.col("tag").alias("_tag"))
            .unique().with_columns(pl.lit(True).alias("_back")))
    b = (b.join(back, on=[*THREAD_KEYS, "call_seq", "_comm", "_peer", "_tag"], how="left", maintain_order="left")
         .filter(~(goes_on & pl.col("_back").fill_null(False)).cum_sum().over(THREAD_KEYS, "_span").cast(pl.Boolean))
         .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(*THREAD_KEYS, "_span").alias("_j"),
                       pl.len().over(*THREAD_KEYS, "_span").alias("_in_span"))
         .filter(pl.col("_in_span") >= 2))  # one burst after the set works on all of it: no request order
    return (b.join(done, on=[*THREAD_KEYS, "call_seq", "_j"])
            .select([pl.col(k).cast(v) for k, v in REQUEST_SCHEMA.items()]))


def closing_unit(bursts: pl.DataFrame) -> pl.Series:
    """Per burst, the call closing it as the structure checks name it (:func:`synthtrace.tracelib.merge.checks.
    call_unit`: its call and call site, a poll or completion call whatever it is; none at a thread's end)."""
    return bursts.select(call_unit(bursts)).to_series()


def _rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The burst keys of ``frame`` with their row number (``_r``)."""
    return frame.select(*_keys(), "burst_seq").with_row_index("_r").with_columns(pl.col("_r").cast(pl.Int64))


@dataclass(frozen=True)
class ArrivalPairs:
    """What :func:`follow_arrival` did to a match table: per reference row, ``ran_on`` (its pair was dropped: no
    burst of the other run holds its work) and ``reordered`` (re-paired by the request its message matched) and
    ``undecided`` (its span's requests hold other messages in the two runs and the work cannot tell position from
    message: flagged like ``msg_mismatch``); ``paired``: the other run's row each reference row was paired with
    before the drop (the pairs the misfit judges: a misaligned pair the drop removed is still a misaligned one)."""

    ran_on: pl.Series
    reordered: pl.Series
    undecided: pl.Series
    paired: pl.Series


def ran_on(ref_opened: pl.DataFrame, other_opened: pl.DataFrame, reference: pl.DataFrame, source: pl.DataFrame,
           other_row: pl.Series, ref_work: pl.Series, other_work: pl.Series, tolerance: float) -> pl.Series:
    """Per reference row: no burst of the other run holds its work (see the module docstring): the pair's closing
    calls differ (:func:`closing_unit`), or its opening message's twin (the other run's burst opened by the same
    message at the same call) is closed by another call, the work differs from that burst's by more than
    ``tolerance`` (log) and from its pair's by more than the thread's noise (:data:`SAME_WORK`: a pair of the same
    work is kept whatever opened it). ``*_opened``: :func:`synthtrace.tracelib.merge.checks.opened_by` of both runs
    (the other's numbered as the reference's); ``*_work``: per row, the bursts' work (instructions, or duration)."""
    rc, oc = closing_unit(reference), closing_unit(source)
    rw, ow = ref_work.cast(pl.Float64).log(), other_work.cast(pl.Float64).log()
    hit = other_row.is_not_null()
    at = other_row.fill_null(0)
    dw = (rw - ow.gather(at)).abs()
    pair = (hit & (rc != oc.gather(at)) & (dw > tolerance)).fill_null(False)
    if ref_opened.height == 0 or other_opened.height == 0:
        return pair
    # the pair's own distance against its thread's noise: a pair of the same work (the position is the identity,
    # or the messages' processing is alike) differs by that noise only
    keys = reference.select(*_keys())
    noise = (keys.with_columns(dw.alias("_d"), hit.alias("_h"))
             .select(pl.max_horizontal(pl.lit(SAME_WORK), CLEARER * pl.col("_d").filter(pl.col("_h")).median()
                                        .over(THREAD_KEYS)).alias("_n")).to_series())
    other_work_pair = (hit & (dw > noise)).fill_null(False)  # an unmatched burst has nothing to drop
    twin = (ref_opened.join(_rows(reference), on=_BK)
            .join(other_opened.join(_rows(source).rename({"_r": "_t"}), on=_BK).drop(_BK),
                  on=[*MESSAGE_KEY, "site"])
            .select("_r", "_t"))
    r, t = twin.get_column("_r"), twin.get_column("_t")
    off = ((rc.gather(r) != oc.gather(t)) & ((rw.gather(r) - ow.gather(t)).abs() > tolerance)
           & other_work_pair.gather(r))
    flagged = r.filter(off.fill_null(False)).unique().to_numpy()
    out = pair.to_numpy().copy()
    out[flagged] = True
    return pl.Series("ran_on", out, pl.Boolean)


def by_request(ref_requests: pl.DataFrame, other_requests: pl.DataFrame, reference: pl.DataFrame,
               source: pl.DataFrame, other_row: pl.Series, ref_work: pl.Series,
               other_work: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """(other_row re-paired by request, reordered, undecided) per reference row (see the module docstring): a pair
    whose two bursts work on the requests of set completions that hold other messages (:func:`request_bursts`) takes
    the other run's burst of its own request's message (its twin) where, over its thread, the twins fit the work
    clearly better than the positional matches (median log distances, ``CLEARER``); it keeps its pair where the
    position fits clearly better, and is undecided otherwise. A burst the re-pairing takes from a pair that was
    not re-paired leaves that pair unmatched."""
    n = reference.height
    none = pl.Series([False] * n, dtype=pl.Boolean)
    if ref_requests.height == 0 or other_requests.height == 0:
        return other_row, none, none
    ow = other_work.cast(pl.Float64).log().to_numpy()
    pairs = pl.DataFrame({"_r": np.arange(n, dtype=np.int64), "_o": other_row.cast(pl.Int64),
                          "_w": ref_work.cast(pl.Float64).log()})
    o = other_requests.join(_rows(source), on=_BK).select(pl.col("_r").alias("_o"), *MESSAGE_KEY)
    r = ref_requests.join(_rows(reference), on=_BK).select("_r", *THREAD_KEYS, *MESSAGE_KEY)
    at = (r.join(pairs, on="_r").join(o, on="_o", suffix="_p")
          .filter(~pl.all_horizontal(pl.col(c) == pl.col(f"{c}_p") for c in MESSAGE_KEY))
          .join(o.rename({"_o": "_t"}), on=MESSAGE_KEY))  # a message no request burst of the other run holds: none
    if at.height == 0:
        return other_row, none, none
    twin = at.get_column("_t")
    at = at.with_columns(pl.Series("_pw", ow[at.get_column("_o").to_numpy()]), pl.Series("_tw", ow[twin.to_numpy()]))
    # per thread, the typical distance of each candidate to the reference burst's work: the burst of the same
    # work differs by the runs' noise only, another message's by the difference of the work too
    d_pos = (pl.col("_w") - pl.col("_pw")).abs().median().over(THREAD_KEYS)
    d_twin = (pl.col("_w") - pl.col("_tw")).abs().median().over(THREAD_KEYS)
    follows = (d_pos > CLEARER * pl.max_horizontal(d_twin, NOISE_FLOOR)).fill_null(False)
    stays = (d_twin > CLEARER * pl.max_horizontal(d_pos, NOISE_FLOOR)).fill_null(False)
    moved, undecided = at.filter(follows), at.filter(~follows & ~stays)
    rows = other_row.cast(pl.Int64).fill_null(-1).to_numpy().copy()
    who = moved.get_column("_r").to_numpy()
    rows[who] = moved.get_column("_t").to_numpy()
    taken = np.zeros(n, bool)
    taken[who] = True
    rows[~taken & np.isin(rows, rows[taken]) & (rows >= 0)] = -1  # taken twice: the pair not re-paired lets it go
    und = np.zeros(n, bool)
    und[undecided.get_column("_r").to_numpy()] = True
    return (pl.Series(other_row.name, rows, pl.Int64).scatter(np.flatnonzero(rows < 0), None),
            pl.Series("reordered", taken), pl.Series("undecided", und))


def follow_arrival(ref_opened: pl.DataFrame, other_opened: pl.DataFrame, ref_requests: pl.DataFrame,
                   other_requests: pl.DataFrame, matches: pl.DataFrame, reference: pl.DataFrame,
                   source: pl.DataFrame, ref_work: pl.Series, other_work: pl.Series,
                   tolerance: float) -> tuple[pl.DataFrame, ArrivalPairs]:
    """The match table (rows of ``reference``, ``other_row`` indexing ``source``, ``other_seq``) re-paired by the
    requests' messages (:func:`by_request`) and with the pairs whose work ran on dropped (:func:`ran_on`), and what
    was done. ``*_requests``: :func:`request_bursts` of both runs (the other's numbered as the reference's)."""
    before = matches.get_column("other_row")
    row, reordered, undecided = by_request(ref_requests, other_requests, reference, source, before, ref_work,
                                           other_work)
    dropped = ran_on(ref_opened, other_opened, reference, source, row, ref_work, other_work, tolerance)
    # scatter writes into the Series it is called on (``row`` may be ``before`` itself): a copy keeps both
    paired, row = row, (row.clone().scatter(np.flatnonzero(dropped.to_numpy()), None) if dropped.any() else row)
    changed = (row.ne_missing(before.cast(pl.Int64))).fill_null(False)
    seq = source.get_column("burst_seq").gather(row.fill_null(0)).alias("_seq")
    m = matches.with_columns(row.alias("other_row"),
                             pl.when(changed).then(pl.when(row.is_not_null()).then(seq)).otherwise(pl.col("other_seq"))
                             .alias("other_seq"),
                             pl.when(row.is_null()).then(None).otherwise(pl.col("match_score")).alias("match_score"))
    return m, ArrivalPairs(dropped, reordered, undecided & ~dropped & ~reordered, paired.alias("other_row"))
