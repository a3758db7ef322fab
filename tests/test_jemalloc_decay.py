"""The console script hands Polars' freed memory back sooner (issue 23): Polars' jemalloc kept the pages it freed
for 0.5 s + 1 s (Polars' own setting), ~80 MB resident at the peak of a merge of 2 x 550 MB runs. Its settings are
read once, from ``_RJEM_MALLOC_CONF``, when Polars is loaded: the command sets a shorter decay before that, unless
the user set the variable; under an address-space limit, with the one arena it needs there, in one setting string;
a library import sets nothing (a host program keeps its own allocator)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

from synthtrace.pipelines import address_space

VARIABLE = "_RJEM_MALLOC_CONF"
DECAY = address_space.JEMALLOC_DECAY
#: the console script's entry point on a command that loads nothing, then the variable as the process holds it
COMMAND = ("import os, sys; from synthtrace.pipelines.cli import main; main(['--version']); "
           f"print('polars' in sys.modules, os.environ.get({VARIABLE!r}))")


def _setting(code: str, user: str | None = None, limit: int | None = None) -> str:
    """What the process running ``code`` printed last (the variable's value), started with ``user`` as the
    variable (unset when None) and under the address-space ``limit`` (bytes) when given."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if user is not None:
        env[VARIABLE] = user
    preexec = (lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))) if limit else None
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       preexec_fn=preexec, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1]


def test_the_console_script_sets_a_shorter_decay_before_polars_loads() -> None:
    """No setting of the user's: the command's process carries the decay, set before Polars was imported."""
    assert _setting(COMMAND) == f"False {DECAY}"


def test_the_user_s_own_setting_is_kept() -> None:
    assert _setting(COMMAND, user="narenas:4,dirty_decay_ms:5000") == "False narenas:4,dirty_decay_ms:5000"
    assert _setting(COMMAND, user="narenas:4", limit=4 << 30) == "False narenas:4"


def test_under_an_address_space_limit_one_arena_and_the_decay_in_one_setting() -> None:
    assert _setting(COMMAND, limit=4 << 30) == f"False narenas:1,{DECAY}"


def test_a_library_import_changes_no_allocator() -> None:
    """``import synthtrace`` (and its merge API) sets nothing; a process that loaded Polars already is left as it is
    (its jemalloc read the variable then): ``main`` called in such a process changes nothing either."""
    assert _setting(f"import os, synthtrace; synthtrace.merge; print(os.environ.get({VARIABLE!r}))") == "None"
    code = ("import os, polars; from synthtrace.pipelines.cli import main; "
            f"before = os.environ.get({VARIABLE!r}); main(['--version']); "
            f"print(os.environ.get({VARIABLE!r}) == before)")
    assert _setting(code) == "True"
