"""The nightly flow: quarantine, idempotence, crash safety, SQL during a night, and the Dask runner."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.prefect_server import server_env
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, TRACES, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # every test starts Prefect or runs a night
OTF2 = TRACES / "otf2" / "ping-pong-otf2"


def _count(wh: Path, sql: str) -> int:
    return query(Warehouse(wh), sql).column(0)[0].as_py()


@pytest.fixture
def drop(tmp_path) -> Path:
    d = tmp_path / "drop"
    copy_trace(PRIME, d / "prime")
    copy_trace(LULESH_B, d / "lulesh")
    (d / "lulesh" / "broken.prv").write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n1:1:1:5:1:0:10:1\n")
    return d


def test_night_ingests_quarantines_and_is_idempotent(prefect_harness, tmp_path, drop):
    """The first night run as the deployed flow runs (``synthtrace serve``), whose final state says what happened;
    the second as ``synthtrace nightly`` runs it. (The final state was a test of its own, one more full night.)"""
    from synthtrace.pipelines.nightly import nightly_flow, run_night
    wh = tmp_path / "wh"
    state = nightly_flow(drop=str(drop), warehouse=str(wh), settle_s=0, return_state=True)
    assert state.is_completed()
    assert state.message.startswith("2 runs ingested, 1 quarantined")
    s = state.result()
    assert {r["run_name"] for r in s.ingested} == {"prime_v0", LULESH_B.stem}
    assert len(s.quarantined) == 1 and "task 5" in s.quarantined[0]["reason"]
    [folder] = (drop / ".quarantine").iterdir()
    assert (folder / "broken.prv").is_file()
    reason = (folder / "reason.txt").read_text()
    assert "outside the header's resource model" in reason and str(drop / "lulesh" / "broken.prv") in reason
    assert not (drop / "lulesh" / "broken.prv").exists()
    assert _count(wh, "SELECT count(*) FROM runs") == 2

    # a second night over the same folder, with a renamed copy re-dropped, ingests nothing
    copy_trace(PRIME, drop / "again", "prime_renamed")
    s2 = run_night(drop, Warehouse(wh), settle_s=0)
    assert s2.ingested == [] and s2.quarantined == []
    assert _count(wh, "SELECT count(*) FROM runs") == 2


def test_quarantine_never_overwrites_and_moves_whole_otf2_archives(prefect_harness, tmp_path):
    """Two broken traces of one name, and two broken OTF2 archives (same anchor name): each gets a folder of
    its own, an archive moves whole (anchor, .def, event folder), and the good traces are ingested."""
    from synthtrace.pipelines.nightly import run_night
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    for sub, task in (("a", 5), ("b", 7)):
        (drop / sub).mkdir(parents=True)
        (drop / sub / "broken.prv").write_text(
            f"#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n1:1:1:{task}:1:0:10:1\n")
        (drop / sub / "broken.pcf").write_text("DEFAULT_OPTIONS\n")
    for sub in ("otf-a", "otf-b"):
        archive = shutil.copytree(OTF2, drop / sub / "run")
        (archive / "traces.def").write_bytes((archive / "traces.def").read_bytes()[:200])  # cut definitions
    s = run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0,
                  skip=["merge", "archetypes", "detect", "retrain", "report"])
    assert [r["run_name"] for r in s.ingested] == ["prime_v0"]
    assert len(s.quarantined) == 4
    folders = sorted((drop / ".quarantine").iterdir())
    assert len(folders) == 4
    contents = sorted(tuple(sorted(p.name for p in f.iterdir())) for f in folders)
    assert contents == [("broken.pcf", "broken.prv", "reason.txt")] * 2 + [("reason.txt", "traces", "traces.def",
                                                                             "traces.otf2")] * 2
    tasks = sorted((f / "broken.prv").read_text().split(":")[-5] for f in folders if (f / "broken.prv").exists())
    assert tasks == ["5", "7"]
    for sub in ("otf-a", "otf-b"):  # what is not part of the trace stays
        assert sorted(p.name for p in (drop / sub / "run").iterdir()) == ["MANIFEST.md", "scorep.cfg"]


def test_night_names_experiments_as_ingest_does(prefect_harness, tmp_path):
    """A drop folder holding two applications gives one experiment per application (named by the app), as
    ``synthtrace ingest`` does; a folder of one application is one experiment named by the folder."""
    from synthtrace.pipelines.nightly import run_night
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "mixed")
    copy_trace(JACOBI, drop / "mixed")
    copy_trace(PRIME, drop / "primes", "prime.night1")
    (drop / "primes" / "prime.night1.prv").write_bytes((drop / "primes" / "prime.night1.prv").read_bytes() + b"\n")
    s = run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0,
                  skip=["merge", "archetypes", "detect", "retrain", "report"])
    assert {(r["run_name"], r["experiment"]) for r in s.ingested} == {
        ("prime_v0", "prime_v0"), (JACOBI.stem, JACOBI.stem), ("prime.night1", "primes")}
    from synthtrace.tracelib.formats.source import find_traces
    from synthtrace.warehouse.ingest import experiment_names

    named, _ = experiment_names(find_traces([drop]))  # the rule of `synthtrace ingest DROP`
    assert {r["experiment"] for r in s.ingested} == set(named.values())


def test_runs_of_one_recorded_binary_under_other_file_names_are_one_experiment(tmp_path, run_cli):
    """Attack 10 D7: a drop folder holding the two LULESH runs (``lulesh_4+4...``, ``lulesh_7+1...``) became two
    one-run experiments, named by stem, so the night never merged them, while both record the binary lulesh2.0 (the
    app ``runs`` shows). A folder's apps are what its traces record; other programs beside them stay apart."""
    from synthtrace.tracelib.formats.source import find_traces
    from synthtrace.warehouse.ingest import experiment_names

    copy_trace(LULESH_A, tmp_path / "lulesh")
    copy_trace(LULESH_B, tmp_path / "lulesh")
    code, out, err = run_cli("ingest", tmp_path / "lulesh", "-w", tmp_path / "wh")
    assert code == 0 and "applications" not in err, err
    assert {r["experiment"] for r in query(Warehouse(tmp_path / "wh"), "SELECT experiment FROM runs").to_pylist()} \
        == {"lulesh"}
    copy_trace(PRIME, tmp_path / "lulesh")
    named, notes = experiment_names(find_traces([tmp_path / "lulesh"]))
    assert sorted(named.values()) == ["lulesh2.0", "lulesh2.0", "prime_v0"] and len(notes) == 1, (named, notes)


def test_a_folders_next_run_goes_where_its_runs_of_that_binary_went(prefect_harness, tmp_path):
    """Attack 11 E6: the 4+4 LULESH run dropped alone in ``lulesh/`` went to experiment ``lulesh``; the next night
    the 7+1 run of the same binary arrived beside an unrelated trace, the folder was judged mixed on that night's
    traces, and 7+1 went to ``lulesh2.0``: two one-run experiments, never merged. A broken file beside a run did the
    same. A trace goes where its folder's earlier runs of its binary went; one that does not open counts for no app."""
    from synthtrace.pipelines.nightly import run_night
    from synthtrace.tracelib.formats.source import find_traces

    drop, wh = tmp_path / "drop", Warehouse(tmp_path / "wh")
    copy_trace(LULESH_A, drop / "lulesh")
    run_night(drop, wh, settle_s=0, skip=["archetypes", "pop", "detect", "retrain", "report"])
    copy_trace(LULESH_B, drop / "lulesh")
    copy_trace(PRIME, drop / "lulesh")
    s = run_night(drop, wh, settle_s=0, skip=["archetypes", "pop", "detect", "retrain", "report"])
    runs = {r["run_name"]: r["experiment"] for r in query(wh, "SELECT run_name, experiment FROM runs").to_pylist()}
    assert runs == {LULESH_A.stem: "lulesh", LULESH_B.stem: "lulesh", PRIME.stem: PRIME.stem}, runs
    assert [m["experiment"] for m in s.merged] == ["lulesh"], s
    app = tmp_path / "other" / "app"
    copy_trace(PRIME, app)
    (app / "broken.prv").write_bytes(b"\x00random bytes\n" * 10)
    from synthtrace.warehouse.ingest import experiment_names

    named, notes = experiment_names(find_traces([app]), wh)
    assert named[app / f"{PRIME.stem}.prv"] == "app" and not notes, (named, notes)


def test_score_p_archives_of_one_executable_are_one_experiment(tmp_path, run_cli):
    """Attack 11 E3: the two ping-pong archives dropped as Score-P names them (``scorep-<date>_<id>``) became two
    one-run experiments and the night merged nothing: an OTF2 archive recorded no binary for the folder's grouping.
    Score-P records the executable (its program region): the folder's apps are what its archives record."""
    from synthtrace.tracelib.formats.source import find_traces
    from synthtrace.warehouse.ingest import experiment_names

    drop = tmp_path / "pingpong"
    shutil.copytree(OTF2, drop / "scorep-20261201_0200_1234")
    shutil.copytree(TRACES / "otf2" / "ping-pong-otf2-papi", drop / "scorep-20261201_0300_5678")
    named, notes = experiment_names(find_traces([drop]))
    assert set(named.values()) == {"pingpong"} and not notes, (named, notes)
    code, out, err = run_cli("ingest", drop, "-w", tmp_path / "wh")
    assert code == 0 and "applications" not in err, err
    assert {(r["experiment"], r["app"]) for r in query(Warehouse(tmp_path / "wh"), "SELECT experiment, app FROM runs")
            .to_pylist()} == {("pingpong", "ping-pong.otf2")}


def test_a_trace_that_raises_anything_is_quarantined_and_the_night_goes_on(prefect_harness, tmp_path,
                                                                             monkeypatch):
    """Not only format errors: whatever one trace raises (here a bug's RuntimeError in the reader, and a header
    with a 30-digit field) quarantines that trace; the other traces are ingested and merged."""
    from synthtrace.pipelines import nightly
    from synthtrace.warehouse import ingest as ingest_mod
    drop = tmp_path / "drop"
    copy_trace(LULESH_A, drop / "lulesh", "lulesh.4x2")  # one app (stem up to its first dot): one experiment
    copy_trace(LULESH_B, drop / "lulesh", "lulesh.7x1")
    poison = copy_trace(PRIME, drop / "poison", "poison")
    header, rest = poison.read_text().split("\n", 1)
    poison.write_text(re.sub(r"\):\d+", "):" + "9" * 30, header, count=1) + "\n" + rest)  # a 30-digit duration
    copy_trace(JACOBI, drop / "jacobi", "bug")
    real = ingest_mod.ingest_trace

    def buggy(wh, path, **kw):
        if Path(path).stem == "bug":
            raise RuntimeError("a bug, not bad input")
        return real(wh, path, **kw)

    monkeypatch.setattr(ingest_mod, "ingest_trace", buggy)  # what jobs.ingest calls
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), settle_s=0, skip=["detect", "retrain", "report"])
    assert sorted(r["run_name"] for r in s.ingested) == ["lulesh.4x2", "lulesh.7x1"]
    assert sorted(Path(q["path"]).name for q in s.quarantined) == ["bug.prv", "poison.prv"]
    assert any("RuntimeError: a bug" in q["reason"] for q in s.quarantined)
    assert all("\n" not in q["reason"] for q in s.quarantined)
    assert [m["experiment"] for m in s.merged] == ["lulesh"] and set(s.archetypes) == {"lulesh"}


def test_drop_folder_must_exist(tmp_path, run_cli):
    missing = tmp_path / "no" / "such" / "dir"
    code, out, err = run_cli("nightly", "--drop", missing, "-w", tmp_path / "wh")
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1, err
    assert not missing.exists() and not (tmp_path / "no").exists() and not (tmp_path / "wh").exists()


def test_dask_runner_on_a_temporary_cluster_of_processes(prefect_harness, tmp_path, drop, run_cli, monkeypatch):
    """Attack 14 F15: ``nightly --runner dask`` without ``--dask-address`` (a temporary local cluster of worker
    processes) failed every night, rc 1 and a ~290-line pickling traceback: Prefect pickles the flow object into
    every task it hands a worker process, and the night's flow held its progress display (a lock). The night runs
    on the workers; one worker process of one thread (the night's cores), the command as a user runs it, and the
    night's output is its own (not Dask's log)."""
    pytest.importorskip("distributed")
    from synthtrace.pipelines import nightly

    monkeypatch.setattr(nightly, "cores", lambda: 1)
    code, out, err = run_cli("nightly", "--drop", drop, "-w", tmp_path / "wh", "--settle", "0", "--runner", "dask")
    assert code == 0 and "Traceback" not in err, err
    assert "distributed." not in err, err  # Dask's INFO records (~35 lines: addresses, workers) are not said
    assert re.search(r"^ingest +.* 3/3 ", err, re.M) and re.search(r"^report +.* 1/1 ", err, re.M), err  # its bars
    assert "2 runs ingested, 1 quarantined" in out, out
    assert _count(tmp_path / "wh", "SELECT count(*) FROM runs") == 2


def _night_cmd(drop: Path, wh: Path) -> list[str]:
    """The night as a separate process, ingest only: these tests are about ingest and readers, not analysis."""
    skip = [a for s in ("merge", "archetypes", "detect", "retrain", "report") for a in ("--skip", s)]
    return [sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
            "nightly", "--drop", str(drop), "--warehouse", str(wh), "--settle", "0", *skip]


@pytest.mark.slow
def test_killed_night_leaves_no_partial_run_and_next_night_completes(tmp_path, big_lulesh):
    """Both nights on the ephemeral Prefect server a night starts when no PREFECT_API_URL is set, as a user without
    a server meets it (the other tests' nights talk to the session's server)."""
    drop = tmp_path / "drop"
    copy_trace(big_lulesh, drop / "exp")
    wh = tmp_path / "wh"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    # its own session, so the kill takes the flow's ephemeral Prefect server (a child process) with it
    proc = subprocess.Popen(_night_cmd(drop, wh), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if (wh / ".staging").exists() and list((wh / ".staging").glob("*/bursts/part-*")):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the night ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _count(wh, "SELECT count(*) FROM runs") == 0
    done = subprocess.run(_night_cmd(drop, wh), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _count(wh, "SELECT count(*) FROM runs") == 1
    assert _count(wh, "SELECT count(*) FROM bursts") == 2140 * 150


@pytest.mark.slow
def test_sql_answers_while_a_night_is_running(tmp_path, big_lulesh, run_cli, prefect_api):
    drop = tmp_path / "drop"
    copy_trace(big_lulesh, drop / "exp")
    copy_trace(PRIME, drop / "small")
    wh = tmp_path / "wh"
    env = server_env(tmp_path / "prefect", prefect_api)
    proc = subprocess.Popen(_night_cmd(drop, wh), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    answers = []
    while proc.poll() is None:
        if (wh / "runs").exists():
            code, out, err = run_cli("sql", "SELECT count(*) FROM runs", "-w", wh, "-f", "csv")
            assert code == 0, err
            answers.append(int(out.splitlines()[1]))
        time.sleep(0.3)
    assert proc.returncode == 0
    assert answers, "no query ran during the night"
    assert set(answers) <= {0, 1, 2}


def test_prefect_that_does_not_start_is_one_line(tmp_path):
    """An ephemeral Prefect server that does not answer in time (here: no time at all) is tried twice, then
    reported in one line; nothing is ingested and no server process is left behind."""
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    code = ("import sys; from synthtrace.pipelines import nightly; nightly.STARTUP_TIMEOUTS_S = (0, 0); "
            "from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="0")
    done = subprocess.run([sys.executable, "-c", code, "nightly", "--drop", str(drop), "-w", str(tmp_path / "wh"),
                           "--settle", "0"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Prefect server did not start" in lines[0] and "Traceback" not in done.stderr, (
        done.stderr
    )
    assert not list((tmp_path / "wh").glob("runs/*"))
    marker = f"PREFECT_HOME={tmp_path / 'prefect'}".encode()
    left = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes():
                left.append(environ.parent.name)
        except OSError:
            continue
    assert left == [], f"server processes left behind: {left}"


def test_a_prefect_server_lost_during_the_night_is_one_line(tmp_path, run_cli, monkeypatch):
    """Attack 10 D4: the configured Prefect server killed mid-night ended the night, after its stages had run, in
    four httpx tracebacks and exit 1 with no error line. The client's transport error, however deep in what the
    flow raised, is one line naming the server and saying what is kept. Fault-injected: the flow raises as
    Prefect's engine does when the server refuses its final state."""
    import httpx

    from synthtrace.pipelines import nightly

    def lost_server_flow(*_args, **_kw):
        def night(**_kw):
            try:
                raise httpx.ConnectError("[Errno 111] Connection refused")
            except httpx.ConnectError as exc:
                raise RuntimeError("Encountered exception during execution") from exc
        return night

    monkeypatch.setattr(nightly, "configured_server", lambda: "http://127.0.0.1:9/api")
    monkeypatch.setattr(nightly, "night_flow", lost_server_flow)
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    code, out, err = run_cli("nightly", "--drop", drop, "-w", tmp_path / "wh", "--settle", "0")
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "http://127.0.0.1:9/api" in lines[0] and "stopped answering during the night" in lines[0], lines
    assert "Connection refused" in lines[0]
