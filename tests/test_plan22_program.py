"""mergeattack22 N3: another binary version, one collective more per iteration in one run, merged ``ok``.

The same-program check compared each thread's consecutive MPI calls counted on the shorter run only: every pair
of calls of the run without the extra collective is found in the one with it, so the share was 1. Two runs of one
binary on one input repeat the same kinds of consecutive calls (an iteration more or less, a run cut short, polling
loops collapsed, change only how often); a version with a collective more per iteration makes kinds of its own.
"""
from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.checks import call_structure, kinds_share, structure_kinds, structure_sums
from synthtrace.tracelib.merge.merge_runs import NotSameProgramError, merge_runs
from testing.simulator_campaigns import read_campaign

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _merged(tmp_path, plans: tuple[mech.RunPlan, ...]):
    spec = replace(mech.campaign("version_reduce", 1), plans=plans)
    res = merge_runs(read_campaign(mech.simulate(tmp_path, spec)))
    q = res.quality.filter(pl.col("method") != "recorded")
    return set(q.get_column("verdict")), q.get_column("verdict_reason").drop_nulls().to_list(), res.warnings


def test_a_collective_more_per_iteration_is_flagged(tmp_path):
    """Run 1's binary reduces twice per iteration (the simulator's ``version_reduce``): refused, or not ``ok`` with
    the reason that the call structure differs (before: ``ok``, every burst of run 0 matched, share 1)."""
    try:
        verdicts, reasons, warnings = _merged(tmp_path, mech.campaign("version_reduce", 1).plans)
    except NotSameProgramError:
        return
    assert verdicts & {"suspect", "bad"}, (verdicts, warnings)
    assert any("another call structure" in r for r in reasons), reasons


@pytest.mark.parametrize("plan", [mech.RunPlan(), mech.RunPlan(tail=-2)])
def test_the_same_binary_or_a_run_cut_short_stays_ok(plan, tmp_path):
    """The same binary, or run 1 two iterations short (cut by its time budget): ``ok``."""
    verdicts, reasons, _ = _merged(tmp_path, (mech.RunPlan(), plan))
    assert verdicts == {"ok"}, reasons


def test_kinds_ignore_how_often_a_run_repeats_them():
    """A run cut short and one with an extra iteration repeat the same kinds of consecutive calls (share 1); a
    second Allreduce per iteration makes a kind of its own in every iteration."""
    def calls(iterations: int, reductions: int) -> pl.DataFrame:
        seq = ["MPI_Irecv", "MPI_Isend", "MPI_Waitall", *["MPI_Allreduce"] * reductions] * iterations
        return pl.DataFrame({"appl": 1, "task": 1, "thread": 1, "call_seq": range(len(seq)), "mpi_call": seq},
                            schema_overrides={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32})

    def share(a: pl.DataFrame, b: pl.DataFrame) -> float | None:
        ra, rb = call_structure(a, False), call_structure(b, False)
        n_a, n_b, _ = structure_sums(ra, rb)
        return kinds_share(n_a, n_b, *structure_kinds(ra, rb))

    assert share(calls(20, 1), calls(11, 1)) == 1.0
    assert share(calls(20, 1), calls(21, 1)) == 1.0
    assert share(calls(20, 1), calls(20, 2)) < 0.9
