"""verdict24: messages on a channel several threads of a task share name no thread's position (mergeattack23 P8).

With ``MPI_THREAD_MULTIPLE``, two threads of a task receiving on one (communicator, source, tag) take its messages
in the order they posted their receives, and two threads sending on one interleave as they run: which thread holds
the channel's k-th message follows timing and differs per run. The message graph took the thread holding an end as
the message's place, so every such message "disagreed" and a right alignment was ``bad`` ("misaligned", while 99.7 %
of the values were right). Such channels' messages are now left unchecked; a channel one thread holds is still
checked.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.message_graph import agreement, disagreeing, ends

ITERATIONS = 12


def _name(chan: int, k: int) -> int:
    return 1000 * chan + k + 2  # a message's name (> UNNAMED)


def _run(swapped: set[int], chans: tuple[int, int, int, int] = (11, 11, 12, 12), late: int = 0) -> pl.DataFrame:
    """A sequence table: task 1's threads (0, 1) each send task 2 one message per iteration and receive its
    reply; task 2's threads (2, 3) receive one and reply. ``chans``: the channel of thread 0's and 1's messages and
    of thread 2's and 3's replies (one channel shared by the two threads, or one each); the sending threads send in
    one order, and in the ``swapped`` iterations the two receiving threads of each task take each other's message
    (their receives posted in the other order); ``late``: thread 3's messages are named ``late`` iterations on (a
    thread aligned off)."""
    rows = {t: [] for t in range(4)}
    for i in range(ITERATIONS):
        x = i in swapped
        for t in (0, 1):  # sends the iteration's k-th message of its channel, receives a reply
            k = 2 * i + (t if chans[0] == chans[1] else 0)
            rk = 2 * i + ((t ^ x) if chans[2] == chans[3] else 0)
            rows[t] += [(_name(chans[t], k), 0, chans[t], 0), (0, _name(chans[2 + t], rk), 0, chans[2 + t])]
        for t in (2, 3):
            j = i + (late if t == 3 else 0)
            k = 2 * j + (((t - 2) ^ x) if chans[0] == chans[1] else 0)
            sk = 2 * j + ((t - 2) if chans[2] == chans[3] else 0)
            rows[t] += [(0, _name(chans[t - 2], k), 0, chans[t - 2]), (_name(chans[t], sk), 0, chans[t], 0)]
    return pl.DataFrame([(*r, t) for t in range(4) for r in rows[t]],
                        schema={"smsg": pl.UInt64, "rmsg": pl.UInt64, "schan": pl.UInt64, "rchan": pl.UInt64,
                                "_tid": pl.Int64}, orient="row")


def _judged(ref: pl.DataFrame, other: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """agreement per reference row and the misaligned threads, under the true alignment (row i to row i)."""
    agree = agreement(ends(ref), ends(other), np.arange(ref.height))
    return agree, disagreeing(ends(ref), ref.get_column("_tid").to_numpy(), agree).filter("misaligned")


def test_threads_sharing_a_channel_are_not_misaligned():
    """The two threads of each task take each other's message in 8 of the 12 iterations of the other run: no
    message disagrees, no thread is misaligned. Failed first: 64 disagreeing ends, all 4 threads misaligned."""
    agree, misaligned = _judged(_run(set()), _run({i for i in range(ITERATIONS) if i % 3}))
    assert (agree == 0).sum() == 0 and misaligned.height == 0, ((agree == 0).sum(), misaligned)


def test_a_thread_on_its_own_channel_is_still_checked():
    """Control: a channel per thread (``MPI_THREAD_MULTIPLE`` with a tag each), thread 3 aligned an iteration off:
    its messages disagree both ways, it is misaligned; the threads sharing nothing still agree."""
    own = (11, 13, 12, 14)
    agree, misaligned = _judged(_run(set(), own), _run(set(), own, late=1))
    assert 3 in misaligned.get_column("t").to_list()
    assert (agree[ends(_run(set(), own)).send_chan == 11] == 1).all()
