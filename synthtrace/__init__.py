"""synthtrace: merge multi-run hardware-counter traces of MPI applications into one synthetic trace.

The small Python API over the four layers (``synthtrace.tracelib`` formats and merge, ``synthtrace.warehouse``
storage, ``synthtrace.models`` learning, ``synthtrace.pipelines`` flows and CLI)::

    import synthtrace

    bursts, calls = synthtrace.read_trace("lulesh.run0.prv")        # one trace as two Polars tables
    wh = synthtrace.open_warehouse("synthtrace-warehouse")         # Parquet + DuckDB views
    synthtrace.ingest(wh, "traces/lulesh/", experiment="lulesh")    # files or folders
    result = synthtrace.merge(wh, "lulesh")                          # MergeResult: merged, quality, matches
    labels = synthtrace.classify(result.merged).archetypes          # the 13 archetypes, one row per unit
    synthtrace.sql(wh, "SELECT * FROM merge_quality")                # read-only SQL, a Polars frame

Every function imports what it needs when called, so ``import synthtrace`` stays cheap (the CLI starts from it).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

# On a shared node (a login node, a CI runner, a nightly job beside other work) OpenMP's default active wait
# makes scikit-learn's threaded fits spin against the other processes: gradient boosting and k-means measured
# 9-85x slower than with a passive wait on 2 shared cores (benchmarks/results/openmp_wait.md). Threads that
# sleep while they wait cost little on an idle machine. Set before any OpenMP runtime loads; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# [helper security, issue 23] Numba colours its error messages through colorama, whose init/deinit replace
# sys.stderr process-wide each time a message is built; Numba builds some at the import of its modules, which the
# reader's kernel warm-up does in a background thread: a command's error line went to a stream from before (a
# caller's old capture), and the command exited 2 with nothing on its stderr (attack reruns 4 and 5).
os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")

# Run from a checkout (`python -m pytest` puts the current folder first on sys.path, so this folder is imported
# before any installed copy), the layers are the folders beside this one, not inside it as in site-packages: they
# are looked up there too, so that a checkout imports as the installed package does, installed or not.
_CHECKOUT = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "tracelib").is_dir() and (_CHECKOUT / "tracelib" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

if TYPE_CHECKING:  # pragma: no cover - names for type checkers only
    import polars as pl

    from synthtrace.models.analysis import AnalysisResult
    from synthtrace.tracelib.formats.source import TraceSource
    from synthtrace.tracelib.domain.machine import Machine
    from synthtrace.tracelib.merge.merge_runs import MergeResult
    from synthtrace.warehouse.ingest import IngestResult
    from synthtrace.warehouse.layout import Warehouse


def __getattr__(name: str) -> str:
    """``synthtrace.__version__``, read from the installed metadata on first use (importing importlib.metadata
    costs ~50 ms, which ``synthtrace --help`` need not pay)."""
    if name != "__version__":
        raise AttributeError(f"module 'synthtrace' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("synthtrace")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
        return "0+unknown"


#: The warehouse folder used when none is given (also the CLI's default, overridden by $SYNTHTRACE_WAREHOUSE).
DEFAULT_WAREHOUSE = Path("synthtrace-warehouse")

__all__ = ["DEFAULT_WAREHOUSE", "__version__", "classify", "ingest", "merge", "open_trace", "open_warehouse",
           "read_trace", "sql"]


def open_trace(path: str | Path) -> TraceSource:
    """Open a trace (Paraver ``.prv``/``.prv.gz`` with its ``.pcf``/``.row``, or an OTF2 ``.otf2`` anchor) lazily:
    header, resources and start date are read; the records only when its tables are asked for."""
    from synthtrace.tracelib.formats.source import open_trace as _open
    return _open(path)


def read_trace(path: str | Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A whole trace in memory as ``(bursts, mpi_calls)``: one row per computation burst (times in ns, one column
    per counter, counts) and one per MPI call (bytes, peer, communicator, tag). For traces that fit in memory;
    :func:`ingest` streams larger ones into a warehouse."""
    bursts, calls, _ = open_trace(path).read_tables()
    return bursts, calls


def open_warehouse(root: str | Path = DEFAULT_WAREHOUSE) -> Warehouse:
    """The warehouse at ``root`` (created on first write)."""
    from synthtrace.warehouse.layout import Warehouse
    return Warehouse(root)


def _warehouse(wh: Warehouse | str | Path) -> Warehouse:
    return wh if not isinstance(wh, (str, Path)) else open_warehouse(wh)


def ingest(wh: Warehouse | str | Path, *paths: str | Path, experiment: str | None = None) -> list[IngestResult]:
    """Ingest trace files or folders into the warehouse (idempotent: the same content is stored once). Without
    ``experiment`` each run goes to the experiment named by its folder, or by its app when the folder holds
    several apps (as ``synthtrace ingest`` does)."""
    from synthtrace.tracelib.formats.source import find_traces
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace
    w = _warehouse(wh)
    files = find_traces([Path(p) for p in paths])
    defaults, _ = experiment_names(files, w) if experiment is None else ({}, [])
    return [ingest_trace(w, p, experiment=experiment, default_experiment=defaults.get(p)) for p in files]


def merge(wh: Warehouse | str | Path, experiment: str, *, reference: str | None = None) -> MergeResult:
    """Align the experiment's runs, merge their counters into the reference run's bursts and commit the result
    (``merged_bursts``, ``merge_quality``, ``merge_matches``)."""
    from synthtrace.pipelines.jobs import merge_experiment
    from synthtrace.tracelib.merge.merge_runs import MergeOptions
    return merge_experiment(_warehouse(wh).experiment(experiment), MergeOptions(reference=reference))


def classify(bursts: pl.DataFrame, calls: pl.DataFrame | None = None, *,
             machine: Machine | str | None = None) -> AnalysisResult:
    """Metrics and the 13 performance archetypes of a bursts table (one run, or a merged experiment) and,
    when given, its MPI calls; ``machine`` is a profile, a preset name or a TOML path (default preset)."""
    from synthtrace.models.analysis import analyse
    from synthtrace.tracelib.domain.machine import Machine, load_machine
    m = machine if isinstance(machine, Machine) else load_machine(machine)
    return analyse(bursts, calls, machine=m)


def sql(wh: Warehouse | str | Path, query: str) -> pl.DataFrame:
    """Run a read-only SQL query over the warehouse views; returns a Polars frame."""
    import polars as pl

    from synthtrace.warehouse.sql import query as _query
    return pl.from_arrow(_query(_warehouse(wh), query))
