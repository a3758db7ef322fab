"""What a collective record may say, the same rules for every trace reader as for a point-to-point message: a size
(bytes) no signed 64-bit column holds is refused (one wording for both: :func:`size_reason`), and so is a root that
is no rank of its communicator."""
from __future__ import annotations

import numpy as np

#: the first size (bytes) past what a signed 64-bit column holds
SIZE_LIMIT = 2**63


def first_bad_size(sizes: np.ndarray) -> int:
    """Index of the first size (bytes, int64; a uint64 of 2^63 or more reads negative) no signed 64-bit column
    holds, -1 if none."""
    bad = np.flatnonzero(sizes < 0)
    return int(bad[0]) if bad.size else -1


def first_root_outside(roots: np.ndarray, n_ranks: np.ndarray) -> int:
    """Index of the first root (0-based rank) that is no rank of a communicator of ``n_ranks`` ranks, -1 if none."""
    bad = np.flatnonzero((roots < 0) | (roots >= n_ranks))
    return int(bad[0]) if bad.size else -1


def size_reason(what: str, size: int, time_ns: int) -> str:
    """Why ``what`` ("a message", "a collective") of ``size`` bytes at ``time_ns`` is refused: a uint64 of 2^63 or
    more (OTF2; give it unsigned) is past what a signed 64-bit column holds, a negative size (Paraver) is none."""
    why = "past what a signed 64-bit size holds" if size >= SIZE_LIMIT else "a size is no negative number"
    return f"{what} of {size} bytes at {time_ns} ns, {why}"


def root_reason(root: int, n_ranks: int, comm: int | None, time_ns: int) -> str:
    """Why a collective whose root is rank ``root`` of a communicator of ``n_ranks`` ranks is refused."""
    of = f"communicator {comm}" if comm is not None else "the world"
    return f"a collective at {time_ns} ns rooted at rank {root} of {of}, outside its {n_ranks} ranks"
