"""Commands under an address-space limit (``ulimit -v``, as login nodes and batch systems set it; attack 7 A10).

The limit counts address space reserved: glibc's 64 MiB malloc arena per allocating thread and one pool thread per
core in each of Polars, Numba, DuckDB and OpenMP reserved several GiB for a 300 kB trace, and an ingest under 1.5 GiB
ended in a MemoryError traceback (1.2 GiB: a Rust panic; 1.0 GiB: an abort, exit 134)."""
from __future__ import annotations

import errno
import resource
import subprocess
import sys

import pytest

from synthtrace.pipelines.address_space import out_of_memory_line

LIMIT = 1536 << 20  # bytes


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.real_traces
def test_an_ingest_fits_in_a_modest_address_space_limit(tmp_path):
    code = ("import sys; from synthtrace.pipelines.cli import main; "
            "sys.exit(main(['ingest', '../shared/traces/paraver/prime_v0.prv', '-w', sys.argv[1]]))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "wh")], capture_output=True, text=True,
                       timeout=300, preexec_fn=_limited, check=False)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert (tmp_path / "wh" / "runs").is_dir()


def test_an_allocation_failure_is_one_line_naming_the_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda what: (LIMIT, resource.RLIM_INFINITY))
    line = out_of_memory_line(MemoryError())
    assert line == "out of memory (MemoryError); under the address-space limit of 1.50 GiB (ulimit -v): raise it, " \
                   "or run where more memory may be reserved"
    assert out_of_memory_line(ImportError("x.so: failed to map segment from shared object")).startswith("out of")
    assert out_of_memory_line(RuntimeError("can't start new thread")).startswith("out of memory")  # attack 7 A20
    assert out_of_memory_line(ValueError("no")) is None and out_of_memory_line(OSError(2, "No such file")) is None
    # attack 12 F8: ENOMEM, from Python or as the text of Polars' error, is no file's fault
    assert out_of_memory_line(OSError("Cannot allocate memory (os error 12)")) == (
        "out of memory (Cannot allocate memory (os error 12)); under the address-space limit of 1.50 GiB (ulimit -v): "
        "raise it, or run where more memory may be reserved")
    assert out_of_memory_line(OSError(errno.ENOMEM, "Cannot allocate memory")).startswith("out of memory")


@pytest.mark.slow
@pytest.mark.real_traces
def test_a_merge_that_passes_under_a_limit_passes_under_a_higher_one(tmp_path, merged_lulesh):
    """What fits grows with the limit: Arrow's mimalloc reserved 1 GiB at a time whenever that fit under the limit
    (128 MiB when it did not), so a merge of the demo passed at 1.6 and 2.0 GiB and failed at 1.85-1.95 GiB with
    the out-of-memory line (attack 7 A27). The LULESH pair's merge passes at 1.6 GiB and so at 1.9 GiB."""
    import shutil

    w = tmp_path / "wh"
    shutil.copytree(merged_lulesh, w)
    code = ("import sys; from synthtrace.pipelines.cli import main; "
            "sys.exit(main(['merge', 'lulesh-8r', '-w', sys.argv[1]]))")
    for gib in (1.6, 1.9):
        limit = int(gib * (1 << 30))
        p = subprocess.run([sys.executable, "-c", code, str(w)], capture_output=True, text=True, timeout=300,
                           preexec_fn=lambda limit=limit: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
                           check=False)
        assert p.returncode == 0, (gib, p.stderr[-2000:])
