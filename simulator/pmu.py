"""PMU constraint: which counters each run records (fixed counters + N programmable slots).

Every run records the fixed counters (``PAPI_TOT_INS``, ``PAPI_TOT_CYC``, ``PAPI_REF_CYC``: Intel's fixed-function
counters) plus at most ``slots`` programmable ones. The programmable counters are shuffled once per experiment
(seeded) and dealt to the runs in groups of ``slots``; with more runs than groups the groups repeat, so some
counters are recorded in several runs.
"""
from __future__ import annotations

import math

import numpy as np

from synthtrace.tracelib.errors import BadInputError
from synthtrace.simulator.counter_model import FIXED_COUNTERS, PROGRAMMABLE_COUNTERS

DEFAULT_SLOTS = 4


def runs_needed(slots: int = DEFAULT_SLOTS) -> int:
    """Runs needed to record every programmable counter once."""
    return math.ceil(len(PROGRAMMABLE_COUNTERS) / slots)


def assign_counter_sets(n_runs: int, slots: int, rng: np.random.Generator) -> list[list[str]]:
    """The counters of each run: fixed ones first, then its programmable group (in catalogue order)."""
    if slots < 1:
        raise BadInputError(f"--counters-per-run must be at least 1 (got {slots})")
    if n_runs < 1:
        raise BadInputError(f"--runs must be at least 1 (got {n_runs})")
    order = list(rng.permutation(len(PROGRAMMABLE_COUNTERS)))
    groups = [sorted(order[i:i + slots]) for i in range(0, len(order), slots)]
    return [list(FIXED_COUNTERS) + [PROGRAMMABLE_COUNTERS[j] for j in groups[r % len(groups)]] for r in range(n_runs)]
