"""The CLI's edges (attack 23 F9, F2). F9: a shell's completion script into a full standard output said
"[Errno 28] No space left on device" where every other output says "standard output: cannot write it". F2:
``simulate --pattern master_worker --ranks 56`` (or more) ended in an IndexError's traceback: the master's bursts
of worker 50 and of its first wait shared a logical id, and a fault of the simulator was no line at the edge."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.pipelines.cli import main
from synthtrace.simulator.patterns.master_worker import MAX_WORKERS
from tests.test_b1fix22_full_stdout import FULL, LINE, _into_full


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_a_completion_script_into_a_full_standard_output_is_the_one_line(shell):
    p = _into_full("--show-completion", shell)
    assert (p.returncode, p.stderr) == (2, LINE)


def test_a_master_worker_campaign_of_64_ranks_is_simulated_each_burst_its_own_id(tmp_path, run_cli):
    out = tmp_path / "mw"
    code, _, err = run_cli("simulate", out, "--pattern", "master_worker", "--ranks", 64, "--iterations", 4,
                           "--runs", 2, "--seed", 3)
    assert code == 0, err
    truth = pl.read_parquet(out / "ground_truth" / "bursts" / "master_worker.parquet")
    per_run = truth.group_by("run_name").agg(pl.len().alias("bursts"), pl.col("logical_id").n_unique().alias("ids"))
    assert per_run.height == 2 and (per_run["bursts"] == per_run["ids"]).all(), per_run
    oracle = pl.read_parquet(out / "ground_truth" / "oracle.parquet")  # run 1 against run 0, burst by burst
    assert oracle.filter(pl.col("counter") == "PAPI_TOT_INS")["n_bursts"].item() > 0, oracle


def test_more_master_worker_ranks_than_its_ids_tell_apart_is_one_line(tmp_path, run_cli):
    code, out, err = run_cli("simulate", tmp_path / "mw", "--pattern", "master_worker", "--ranks", MAX_WORKERS + 2)
    assert code == 2 and err.count("\n") == 1 and f"1 and {MAX_WORKERS + 1} for the master_worker" in err, err
    assert not (tmp_path / "mw").exists()


def test_a_fault_of_the_simulator_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from synthtrace.simulator import truth

    def broken(*args, **kwargs):
        raise IndexError("index 553 is out of bounds for axis 0 with size 504")

    monkeypatch.setattr(truth.OracleAccumulator, "add", broken)
    code = main(["simulate", str(tmp_path / "halo"), "--pattern", "halo", "--ranks", "4", "--iterations", "2",
                 "--runs", "2"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert "IndexError" in err and "simulator failed" in err and "Traceback" not in err
    assert not (tmp_path / "halo").exists()
