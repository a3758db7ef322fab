"""The night's memory budget (issue 23: a night's process <= 1.5 GB): its ingests and experiment stages run side by
side only while their estimated working sets fit in it; one larger than it runs alone; a failing job gives its share
back; the night's results do not depend on it."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from synthtrace.pipelines import jobs, nightly
from synthtrace.pipelines.memory_budget import (
    LEAST_JOBS_MB,
    MEMORY_ENV,
    PROCESS_BASE_MB,
    MemoryBudget,
    _cgroup_left_mb,
    jobs_mb,
    local_workers,
    night_memory_mb,
)
from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import Warehouse
from testing.traces import LULESH_A, LULESH_B, PRIME, TRACES, copy_trace

#: seconds an ingest waits for another to start beside it (the night's tasks overlap only if both run at once)
MEET_S = 3.0
SKIP_LATER = ["archetypes", "pop", "detect", "retrain", "report"]


class ConcurrentIngests:
    """A spy in place of :func:`jobs.ingest`: counts the ingests running at once (the most), each waiting up to
    :data:`MEET_S` for a second one to start, so that two the night lets run together are seen together."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.met = threading.Event()
        self.real = jobs.ingest
        self.meet_s = MEET_S

    def __call__(self, wh, path, **options):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running >= 2:
                self.met.set()
        try:
            self.met.wait(self.meet_s)
            return self.real(wh, path, **options)
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def drop(tmp_path) -> Path:
    d = tmp_path / "drop"
    copy_trace(LULESH_A, d / "lulesh", "lulesh.4x2")  # one app: one experiment, merged
    copy_trace(LULESH_B, d / "lulesh", "lulesh.7x1")
    copy_trace(PRIME, d / "prime")
    return d


@pytest.fixture
def spy(monkeypatch) -> ConcurrentIngests:
    s = ConcurrentIngests()
    monkeypatch.setattr(jobs, "ingest", s)
    monkeypatch.setattr(nightly, "cores", lambda: 4)  # 4 threads whatever the machine: only the budget limits them
    return s


@pytest.fixture
def budget(monkeypatch) -> MemoryBudget:
    """A fresh process budget (its high-water marks are this test's)."""
    b = MemoryBudget(1)
    monkeypatch.setattr(nightly, "PROCESS_BUDGET", b)
    return b


@pytest.mark.real_traces
@pytest.mark.slow
def test_ingests_larger_than_half_the_budget_run_one_at_a_time(prefect_harness, tmp_path, drop, spy, budget,
                                                                monkeypatch):
    """Three traces whose ingests are each estimated at more than half of the night's budget: never two at once."""
    monkeypatch.setattr(jobs, "INGEST_FLOOR_MB", LEAST_JOBS_MB // 2 + 10)
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0, skip=["merge", *SKIP_LATER], memory_mb=64)
    assert len(s.ingested) == 3 and not s.errors
    assert budget.capacity_mb == LEAST_JOBS_MB
    assert spy.most == 1
    assert budget.peak_holders == 1 and budget.peak_mb <= budget.capacity_mb
    assert budget.held_mb == 0 and budget.holders == 0


@pytest.mark.real_traces
@pytest.mark.slow
def test_small_traces_still_ingest_side_by_side(prefect_harness, tmp_path, drop, spy, budget):
    """The default budget holds several small traces' ingests at once: the budget does not make a night of small
    traces slower (and this test can see two ingests at once: each waits up to a minute for a second, review27 R5,
    as at high load the night's second thread may start seconds after the first)."""
    spy.meet_s = 60.0
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0, skip=["merge", *SKIP_LATER], memory_mb=1500)
    assert len(s.ingested) == 3
    assert spy.most >= 2 and budget.peak_holders >= 2
    assert budget.peak_mb <= budget.capacity_mb == 1500 - PROCESS_BASE_MB


@pytest.mark.real_traces
@pytest.mark.slow
def test_a_trace_larger_than_the_whole_budget_ingests_alone(prefect_harness, tmp_path, drop, spy, budget,
                                                             monkeypatch):
    monkeypatch.setattr(jobs, "INGEST_FLOOR_MB", 10 * LEAST_JOBS_MB)
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0, skip=["merge", *SKIP_LATER], memory_mb=64)
    assert sorted(r["run_name"] for r in s.ingested) == ["lulesh.4x2", "lulesh.7x1", "prime_v0"]
    assert spy.most == 1 and budget.peak_holders == 1 and budget.peak_mb == budget.capacity_mb


@pytest.mark.real_traces
@pytest.mark.slow
def test_a_night_under_a_tight_budget_stores_what_one_without_stores(prefect_harness, tmp_path, drop, monkeypatch):
    """Same runs ingested, same merged table, whether the jobs ran one at a time or side by side."""
    skip = ["archetypes", "detect", "retrain", "report"]
    free = nightly.run_night(drop, Warehouse(tmp_path / "free"), settle_s=0, skip=skip, memory_mb=100_000)
    monkeypatch.setattr(jobs, "INGEST_FLOOR_MB", 10 * LEAST_JOBS_MB)
    monkeypatch.setattr(jobs, "STAGE_FLOOR_MB", 10 * LEAST_JOBS_MB)
    monkeypatch.setattr(nightly, "PROCESS_BUDGET", budget := MemoryBudget(1))  # its marks: the tight night's
    tight = nightly.run_night(drop, Warehouse(tmp_path / "tight"), settle_s=0, skip=skip, memory_mb=64)
    assert budget.peak_holders == 1
    ids = [sorted(r["run_id"] for r in s.ingested) for s in (free, tight)]
    assert ids[0] == ids[1] and len(ids[0]) == 3
    assert free.merged == tight.merged and [m["experiment"] for m in free.merged] == ["lulesh"]
    for table in ("merged_bursts", "merge_quality", "merge_matches"):
        free_table, tight_table = (Warehouse(tmp_path / w).experiment("lulesh").stored(table)
                                   for w in ("free", "tight"))
        assert free_table is not None and free_table.height > 0
        assert free_table.equals(tight_table), table


@pytest.mark.real_traces
@pytest.mark.slow
def test_a_stage_that_raises_gives_its_share_back(prefect_harness, tmp_path, budget, monkeypatch):
    """A merge that raises for one experiment (LULESH; the OTF2 pair the other), each job estimated at the whole
    budget: the failure is reported, the other experiment's merge and the next stage still run (no job waits for a
    share never given back)."""
    drop = tmp_path / "drop"
    copy_trace(LULESH_A, drop / "lulesh", "lulesh.4x2")
    copy_trace(LULESH_B, drop / "lulesh", "lulesh.7x1")
    shutil.copytree(TRACES / "otf2" / "ping-pong-otf2", drop / "pingpong" / "scorep-20261201_0200_1234")
    shutil.copytree(TRACES / "otf2" / "ping-pong-otf2-papi", drop / "pingpong" / "scorep-20261201_0300_5678")
    real = jobs.merge

    def failing(wh, experiment, settings):
        if experiment == "lulesh":
            raise RuntimeError("a merge's bug")
        return real(wh, experiment, settings)

    monkeypatch.setattr(jobs, "JOBS", tuple(jobs.Job(j.name, j.scope, failing if j.name == "merge" else j.run,
                                                     j.invalidates, j.summary, j.bytes_per_burst) for j in jobs.JOBS))
    monkeypatch.setattr(jobs, "STAGE_FLOOR_MB", 10 * LEAST_JOBS_MB)
    monkeypatch.setattr(jobs, "INGEST_FLOOR_MB", 10 * LEAST_JOBS_MB)
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0, skip=["detect", "retrain", "report"],
                          memory_mb=64)
    assert [e["stage"] for e in s.errors] == ["merge"] and "a merge's bug" in s.errors[0]["error"]
    assert [m["experiment"] for m in s.merged] == ["pingpong"] and set(s.archetypes) == {"pingpong"}
    assert budget.held_mb == 0 and budget.holders == 0 and budget.peak_holders == 1


def test_a_holder_that_raises_releases_its_share():
    budget = MemoryBudget(100)
    with pytest.raises(RuntimeError), budget.held(80):
        raise RuntimeError("a job's failure")
    assert budget.held_mb == 0
    entered = threading.Event()

    def second() -> None:
        with budget.held(80):
            entered.set()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    t.join(10)
    assert entered.is_set()


def test_holders_never_pass_the_capacity_and_a_larger_one_runs_alone():
    """Four threads of 60 MB each in a 100 MB budget, then one of 500 MB beside one of 10: one at a time each."""
    budget = MemoryBudget(100)
    inside: list[int] = []
    lock = threading.Lock()
    go = threading.Barrier(4)

    def job(mb: int) -> None:
        go.wait()
        with budget.held(mb) as share, lock:
            inside.append(share)

    threads = [threading.Thread(target=job, args=(60,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert inside == [60] * 4 and budget.peak_holders == 1 and budget.peak_mb == 60
    with budget.held(10):
        done = threading.Event()

        def large() -> None:
            with budget.held(500) as share:
                assert share == 100 and budget.holders == 1
            done.set()

        t = threading.Thread(target=large, daemon=True)
        t.start()
        assert not done.wait(0.2)  # waits for the 10 MB holder
    t.join(10)
    assert done.is_set() and budget.peak_mb == 100 and budget.held_mb == 0


def test_the_memory_target_comes_from_the_option_the_environment_or_the_machine(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "3000")
    assert night_memory_mb(800) == 800
    assert night_memory_mb() == 3000
    for bad in ("-5", "0", "1.5GB"):
        monkeypatch.setenv(MEMORY_ENV, bad)
        with pytest.raises(BadInputError, match=MEMORY_ENV):
            night_memory_mb()
    monkeypatch.delenv(MEMORY_ENV)
    monkeypatch.setattr("synthtrace.pipelines.memory_budget.available_mb", lambda: 2000)
    assert night_memory_mb() == 1000  # half what is available when that is under 1.5 GB
    monkeypatch.setattr("synthtrace.pipelines.memory_budget.available_mb", lambda: 64_000)
    assert night_memory_mb() == 1500
    assert jobs_mb(1500) == 1500 - PROCESS_BASE_MB and jobs_mb(100) == LEAST_JOBS_MB


def test_a_batch_jobs_cgroup_limit_bounds_the_target(tmp_path, monkeypatch):
    """cgroup v2: ``memory.max`` less ``memory.current`` of this process's group; "max" is no limit."""
    group = tmp_path / "job.slice"
    group.mkdir()
    (group / "memory.max").write_text(f"{4 * 2**30}\n")
    (group / "memory.current").write_text(f"{1 * 2**30}\n")
    real = Path.read_text

    def read_text(self, *a, **k):
        return "0::/job.slice\n" if str(self) == "/proc/self/cgroup" else real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert _cgroup_left_mb(tmp_path) == 3 * 1024
    (group / "memory.max").write_text("max\n")
    assert _cgroup_left_mb(tmp_path) is None


def test_a_limit_above_the_process_group_bounds_the_target(tmp_path, monkeypatch):
    """review27 R2: Slurm (cgroup v2) limits the job's group and leaves its steps' and tasks' groups at "max"; the
    least any level above leaves counts. Failed first: None (only the leaf's "max" was read)."""
    leaf = tmp_path / "system.slice" / "slurmstepd.scope" / "job_7" / "step_0" / "user" / "task_0"
    leaf.mkdir(parents=True)
    for folder in (leaf, *leaf.parents):
        if folder == tmp_path:
            break
        (folder / "memory.max").write_text("max\n")
        (folder / "memory.current").write_text(f"{2**30}\n")
    (tmp_path / "system.slice" / "slurmstepd.scope" / "job_7" / "memory.max").write_text(f"{3 * 2**30}\n")
    real = Path.read_text

    def read_text(self, *a, **k):
        if str(self) == "/proc/self/cgroup":
            return "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n"
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert _cgroup_left_mb(tmp_path) == 2 * 1024


def test_a_temporary_dask_cluster_has_the_workers_the_target_holds():
    """As many workers (each a process's base and its largest job) as fit beside the night's process: at least one,
    at most the cores."""
    each = PROCESS_BASE_MB + jobs.INGEST_CEILING_MB
    assert local_workers(1500, 64, jobs.INGEST_CEILING_MB) == 1
    for target in (4_000, 64_000):
        n = local_workers(target, 64, jobs.INGEST_CEILING_MB)
        assert 1 < n < 64 and PROCESS_BASE_MB + n * each <= target < PROCESS_BASE_MB + (n + 1) * each
    assert local_workers(1_000_000, 64, jobs.INGEST_CEILING_MB) == 64


def test_an_ingests_estimate_grows_with_the_trace_and_levels_off(tmp_path):
    small = jobs.ingest_working_mb(PRIME)
    otf2 = jobs.ingest_working_mb(TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2")
    assert jobs.INGEST_FLOOR_MB <= small < jobs.INGEST_FLOOR_MB + 20 and otf2 >= jobs.INGEST_FLOOR_MB
    big = tmp_path / "big.prv"
    with big.open("wb") as f:
        f.truncate(2**30)  # sparse: its size is what counts
    assert jobs.ingest_working_mb(big) == jobs.INGEST_CEILING_MB
    assert jobs.ingest_working_mb(tmp_path / "gone.prv") == jobs.INGEST_FLOOR_MB
