"""A Ctrl-C in the console script's first second (bench25 M1): before ``synthtrace.pipelines.cli.main`` entered its
guard (the command line's imports, the address-space set-up) a SIGINT ended in a KeyboardInterrupt traceback and a
death by the signal (exit -2). The console script's entry module now defers Ctrl-C from the program's first line
until the guard, which says "aborted" and exits 130 as for a Ctrl-C later on.

The console script is run as pip writes it, from the entry point pyproject.toml declares, under ``python -X
importtime``: the child says on stderr each module it has imported, and the SIGINT is sent as soon as the named one
is, so it lands in the window after it, whatever the machine's load."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "traces" / "paraver" / "prime_v0.prv"


def _console_script() -> str:
    """The code of the ``synthtrace`` script pip writes for the entry point pyproject.toml declares."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["synthtrace"]
    module, function = entry.split(":")
    return f"import sys\nfrom {module} import {function}\nsys.argv[0] = 'synthtrace'\nsys.exit({function}())\n"


def _interrupted_after(module: str, tmp_path: Path) -> tuple[int, str]:
    """(exit code, stderr without the import lines) of ``synthtrace ingest`` sent SIGINT as soon as it has
    imported ``module``."""
    child = subprocess.Popen([sys.executable, "-X", "importtime", "-c", _console_script(), "ingest", str(TRACE),
                              "-w", str(tmp_path / "wh")], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said = []
    try:
        for line in child.stderr:
            if line.startswith("import time:"):
                if line.split("|")[-1].strip() == module and child.returncode is None:
                    child.send_signal(signal.SIGINT)
                continue
            said.append(line)
        return child.wait(timeout=300), "".join(said)
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not TRACE.is_file(), reason="the real traces are not here")
@pytest.mark.parametrize("module", ["synthtrace.pipelines.entry", "synthtrace.pipelines.cli", "ctypes",
                                    "synthtrace.pipelines.address_space"])
def test_a_ctrl_c_while_the_command_line_starts_is_aborted_exit_130(tmp_path, module):
    for attempt in range(3):
        code, said = _interrupted_after(module, tmp_path / str(attempt))
        assert (code, said.strip().splitlines()[-1:]) == (130, ["aborted"]), said
        assert "Traceback" not in said and not (tmp_path / str(attempt) / "wh" / "runs").exists()
