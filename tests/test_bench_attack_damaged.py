"""The damaged-file family of benchmarks/bench_attack.py judges the product, not itself (attack 16's reruns: its
report/export cases wrote into a ``{out}/`` folder it never made, and it counted ``detect`` as a reader of stored
tables, which with one night of history reads none: 6 "violations" of the harness's own)."""
from __future__ import annotations

import random

import pytest

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # a LULESH pair ingested, merged and damaged, in a process


class _Scripted(random.Random):
    """Picks the table, damage and command of each case in turn from a script, the rest as a seeded Random."""

    def __init__(self, script: list[tuple[str, str, int]]) -> None:
        super().__init__(16)
        self.picks = [p for case in script for p in case]

    def choice(self, seq):  # type: ignore[override]
        pick = self.picks.pop(0)
        return seq[pick] if isinstance(pick, int) else pick


def test_damaged_cases_of_every_command_of_a_damaged_table_are_no_violations(tmp_path):
    from benchmarks.bench_attack import damaged_family
    from testing.attack_cases import STORED_READERS

    script = [("mpi_calls", "random", i) for i in range(len(STORED_READERS["mpi_calls"][1]))]
    script += [("bursts", "empty", i) for i in range(len(STORED_READERS["bursts"][1]))]
    out = damaged_family(tmp_path, len(script), _Scripted(script), case_timeout_s=300)
    assert out["cases"] == len(script) and not out["violations"], out["violations"]
