"""A command stopped by a signal (Ctrl-C, SIGTERM from ``kill``, ``timeout`` or a batch system's ``scancel``) says
in one line how it ended: "aborted" when it had stored nothing, else what it had stored (whole, kept); its exit code
is 128 + the signal. A night stops at once, without Prefect's crash reports (attack 6 F15, F22)."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testing.model_campaigns import predictor_campaign
from testing.prefect_server import server_env
from testing.traces import PRIME, copy_trace


@pytest.fixture(scope="module")
def trainable(tmp_path_factory) -> Path:
    """A small warehouse of merged experiments of three applications (enough to train and evaluate a model)."""
    root = tmp_path_factory.mktemp("signals") / "wh"
    predictor_campaign(root, n_apps=3, n_kernels=3, n_iters=2, seed=1)
    return root


@pytest.fixture
def wh(trainable, tmp_path) -> Path:
    return Path(shutil.copytree(trainable, tmp_path / "wh"))


def test_ctrl_c_after_train_stored_its_model_says_so(wh, run_cli, monkeypatch):
    """Attack 6 F22: a Ctrl-C in the last second of `train` ended with exit 0 and nothing said, or "aborted" with the
    model registered. Stopped while it prints its table (the model committed), it says the model was stored."""
    from synthtrace.pipelines import cli_models

    def ctrl_c(table: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_models, "print_table", ctrl_c)
    code, out, err = run_cli("train", "--model", "linear", "--folds", "2", "-w", wh)
    stored = sorted((wh / "models").iterdir())
    assert code == 130 and len(stored) == 1, err
    assert err.splitlines() == [f"aborted after it stored {stored[0]}; what it stored is whole and stays"]


def test_ctrl_c_before_train_stored_its_model_is_aborted(wh, run_cli, monkeypatch):
    from synthtrace.warehouse import model_store

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(model_store, "write_model", ctrl_c)
    code, _, err = run_cli("train", "--model", "linear", "--folds", "2", "-w", wh)
    assert code == 130 and err.splitlines() == ["aborted"], err
    assert not (wh / "models").exists() or not any((wh / "models").iterdir())


def test_a_ctrl_c_once_the_command_finished_is_said(tmp_path):
    """Attack 6 F22: a Ctrl-C in the last second of `train` ended with exit 0 and nothing said: it came while the
    interpreter tore itself down (0.6-1 s of garbage collection), where no handler runs. The console script's
    process now ends without that teardown, and a Ctrl-C that comes while it ends is said and is the exit code."""
    script = textwrap.dedent("""
        import atexit, os, signal, sys
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C while the finished command exits
        from synthtrace.pipelines.cli import main
        sys.argv = ["synthtrace", "--version"]
        sys.exit(main())
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert p.stdout.startswith("synthtrace ")  # the command's output, whole
    assert p.returncode == 130 and p.stderr.splitlines() == [
        "interrupted (SIGINT) after the command finished; what it printed and stored is whole"], p.stderr


def _interrupted_at(hook: str, signum: int, *args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``synthtrace ARGS`` in a fresh interpreter whose ``hook`` (module:function) sends the process ``signum``
    and then waits (as work does), up to 2 minutes, before doing its job."""
    module, function = hook.split(":")
    script = textwrap.dedent(f"""
        import os, signal, sys, threading
        import {module} as target
        real = target.{function}
        def interrupted(*args, **kwargs):
            os.kill(os.getpid(), {int(signum)})
            threading.Event().wait(120)
            return real(*args, **kwargs)
        target.{function} = interrupted
        from synthtrace.pipelines.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def test_sigterm_stops_a_command_as_ctrl_c_does(tmp_path):
    """Attack 6 F15: SIGTERM killed a command without a word (exit -15). It stops it as Ctrl-C does: what it was
    writing is removed, one line, exit 143."""
    p = _interrupted_at("synthtrace.warehouse.ingest:_write_run", signal.SIGTERM, "ingest", PRIME, "-w",
                        tmp_path / "wh")
    assert p.returncode == 143 and p.stderr.splitlines() == ["terminated (SIGTERM): nothing was stored"], \
        (p.returncode, p.stderr)
    assert not (tmp_path / "wh").exists()  # the warehouse this ingest made is gone again, with its staging


def test_sigterm_stops_a_night_at_once_in_one_line(tmp_path, prefect_api):
    """Attack 6 F15: SIGTERM to `nightly` (a batch system's scancel or time limit) printed ~140 lines of Prefect
    crash reports and tracebacks and took ~70 s to exit, past the grace period before SIGKILL. The night stops at
    once, whatever its stages' threads are doing (here an ingest that goes on for 2 minutes): one line, exit 143.
    (Ctrl-C takes the same way, "aborted", 130.)"""
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop)
    env = server_env(tmp_path / "prefect", prefect_api)
    p = _interrupted_at("synthtrace.pipelines.jobs:ingest", signal.SIGTERM, "nightly", "--drop", drop, "-w", wh,
                        "--settle", "0", env=env)  # [helper drop] the trace was copied just before: complete
    assert p.returncode == 143, (p.returncode, p.stderr[-3000:])
    assert p.stderr.splitlines()[-1] == \
        "terminated (SIGTERM): nothing was stored; the next night finishes what this one left", p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "Crash detected" not in p.stderr, p.stderr[-3000:]
    assert not (wh / "runs").exists() or not any((wh / "runs").iterdir())
