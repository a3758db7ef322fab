"""Same program or not (issue 22 item 7): decided from timing-free structure, the calls of each thread in order with
every loop of polls and completion calls as one unit, never from how many polls a run happened to make."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.simulator.mechanisms import campaign, simulate
from synthtrace.tracelib.merge.checks import same_structure
from synthtrace.tracelib.merge.merge_runs import MergeOptions, NotSameProgramError, merge_runs
from testing.simulator_campaigns import mechanism_score, read_campaign


def _calls(task_calls: dict[int, list[str]], site: str = "halo (a.c:{i})") -> pl.DataFrame:
    """MPI calls of single-threaded tasks, in order (call sites numbered by position unless all the same)."""
    rows = [{"appl": 1, "task": t, "thread": 1, "call_seq": i, "mpi_call": c, "call_site": site.format(i=c)}
            for t, calls in task_calls.items() for i, c in enumerate(calls)]
    return pl.DataFrame(rows, schema_overrides={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32})


def _iteration(polls: int, tests: str = "MPI_Testall") -> list[str]:
    return ["MPI_Irecv", "MPI_Irecv", "MPI_Isend", "MPI_Isend", *[tests] * polls, "MPI_Waitall", "MPI_Allreduce"]


def test_polls_and_completions_count_as_one_unit_whatever_their_number():
    """Two runs of one halo: a Testall loop polls 1-40 times per iteration in one run, 30-70 in the other, and
    sometimes its messages came before the loop's final Waitall was needed (Testsome in their place): the call
    structure is the same (share 1); another program (a Bcast-based one) shares none of it."""
    a = _calls({t: sum((_iteration(1 + (7 * i + t) % 40) for i in range(20)), []) for t in (1, 2)})
    b = _calls({t: sum((_iteration(30 + (3 * i + t) % 40, "MPI_Testsome") for i in range(20)), []) for t in (1, 2)})
    assert same_structure(a, b) == pytest.approx(1.0)
    other = _calls({t: ["MPI_Bcast", "MPI_Reduce"] * 100 for t in (1, 2)})
    assert same_structure(a, other) == 0.0
    # a call more costs only its share (a housekeeping MPI_Comm_rank in one iteration); a run cut short nothing
    extra = [_iteration(5) + (["MPI_Comm_rank"] if i == 5 else []) for i in range(20)]
    assert 0.99 < same_structure(a, _calls({1: sum(extra, []), 2: sum(extra, [])})) < 1.0
    assert same_structure(a, _calls({t: sum((_iteration(5) for _ in range(12)), []) for t in (1, 2)})) == 1.0


def test_the_order_of_the_calls_counts():
    """The same calls in another order (sends before receives, the reduction first) is another structure."""
    a = _calls({1: ["MPI_Irecv", "MPI_Isend", "MPI_Waitall", "MPI_Allreduce"] * 50}, site="x")
    b = _calls({1: ["MPI_Allreduce", "MPI_Isend", "MPI_Irecv", "MPI_Waitall"] * 50}, site="x")
    assert same_structure(a, b) < 0.5


def test_heavy_polling_campaign_is_not_refused(tmp_path):
    """A 12-rank halo with Testall polling between compute chunks and an Iprobe loop in a gather (plain seed 173 at
    10 iterations): most bursts are polls whose number follows timing. On the merge before this check it was
    refused ('not the same program: only 26 % of the bursts ... align'); it is one program, merged >= 99.5 % right
    and ok; the same run with every call replaced by another is refused."""
    c = simulate(tmp_path, campaign("plain", 173, ranks=12, iterations=10))
    runs = read_campaign(c)
    res = merge_runs(runs)
    assert mechanism_score(c.truth, res.reference_run_id, runs[1].run_id, res.matches)[0] >= 0.995
    assert set(res.quality.get_column("verdict")) == {"ok"}, res.quality.get_column("verdict_reason").to_list()
    other = runs[1]
    bcast = [pl.lit("MPI_Bcast").alias("mpi_call"), pl.lit("elsewhere (y.c:1)").alias("call_site")]
    with pytest.raises(NotSameProgramError, match="not the same program: only 0% .* align by MPI structure"):
        merge_runs([runs[0], type(other)(other.run_id, other.run_name, other.bursts.with_columns(bcast),
                                         other.mpi_calls.with_columns(bcast), other.messages)],
                   MergeOptions(map_ranks=False))
