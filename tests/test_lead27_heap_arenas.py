"""attack27 A6: a night on a many-core node runs a task thread a core, and glibc gives each thread that allocates
beside others a malloc arena of its own (8 a core), which keeps what the thread's jobs freed: a night as on a 40-core
node over 40 small traces held 1,618 MB, 1,183 MB with the arenas bounded (benchmarks/RESULTS.md "session 27,
lead"). The console script bounds them before any thread exists (glibc fixes its limit at the first thread's
arena: a bound set later, once Prefect's threads ran, changed nothing: 1,598 MB)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from synthtrace.pipelines import entry, memory_budget


def test_the_console_script_bounds_the_heap_arenas_before_the_command_runs(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(memory_budget, "bound_heap_arenas", lambda: calls.append("bound") or True)
    monkeypatch.setattr(sys, "argv", ["synthtrace", "--help"])
    assert entry.main() == 0 and calls == ["bound"]
    assert "nightly" in capsys.readouterr().out


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="glibc's mallopt")
def test_glibc_takes_the_bound_unless_the_environment_sets_one():
    code = "from synthtrace.pipelines.memory_budget import bound_heap_arenas; print(bound_heap_arenas())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    run = [sys.executable, "-c", code]
    assert subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.split() == ["True"]
    assert subprocess.run(run, env={**env, "MALLOC_ARENA_MAX": "4"}, capture_output=True, text=True,
                          check=True).stdout.split() == ["False"]
