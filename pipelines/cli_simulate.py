"""``synthtrace simulate``: write simulated multi-run campaigns (Paraver traces + Parquet ground truth)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from synthtrace.models.archetypes import simulator_labeller
from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    WarehouseOption,
    console,
)
from synthtrace.pipelines.cli_base import app_option, check_folder, folder_option, progress_bar, staged_folder
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.simulator import (
    PATTERNS,
    ExperimentSpec,
    TruthStore,
    Variation,
    simulate_experiment,
)
from synthtrace.simulator.campaign import (
    REGRESSION_KINDS,
    parse_injection,
    random_injections,
    simulate_campaign,
)
from synthtrace.simulator.engine import DEFAULT_DATE
from synthtrace.simulator.pmu import DEFAULT_SLOTS
from synthtrace.simulator.truth import TRUTH_DIR
from synthtrace.simulator.variants import DEFAULT_SPREAD, app_variants
from synthtrace.tracelib.errors import BadInputError, SynthtraceError
from synthtrace.tracelib.domain.machine import load_machine


#: applications per pattern at most (each is a whole experiment of traces)
MAX_APPS_PER_PATTERN = 1000
#: runs per experiment at most: far above the 18 that record every counter one per run, and one file stays open per
#: run while an experiment is written (attack 12: 30,000 ran into "Too many open files" at the descriptor limit,
#: 1,024 by default)
MAX_RUNS = 500


def _apps(app: str | None, pattern: str, per_pattern: int = 1) -> dict[str, str]:
    """app name -> pattern for the requested pattern(s); ``per_pattern`` > 1 numbers the applications of each
    pattern (``halo_1``, ``halo_2``, ...)."""
    patterns = list(PATTERNS) if pattern == "all" else [pattern]
    if pattern != "all" and pattern not in PATTERNS:
        raise BadInputError(f"--pattern {pattern!r}: unknown (known: all, {', '.join(PATTERNS)})")
    if not 1 <= per_pattern <= MAX_APPS_PER_PATTERN:  # attack 7 A24: 1e9 took 6 GB listing the names, silently
        raise BadInputError(f"--apps-per-pattern must be between 1 and {MAX_APPS_PER_PATTERN:,} (got {per_pattern})")
    if app is None:
        names = {p: p for p in patterns}
    elif len(patterns) == 1:
        names = {app: patterns[0]}
    else:
        names = {f"{app}_{p}": p for p in patterns}
    if per_pattern == 1:
        return names
    return {f"{name}_{i}": p for name, p in names.items() for i in range(1, per_pattern + 1)}


def simulate(
    out_dir: Annotated[
        Path, typer.Argument(parser=folder_option, help="Folder to write the traces (<experiment>/<app>.run<k>.prv) "
                                                         "and ground_truth/ into.")
    ],
    app: Annotated[
        str | None, typer.Option(help="Application name (default: the pattern's name; a prefix with --pattern all).",
                                 callback=app_option)  # [helper security2] issue 23 F21: the experiment-name rule
    ] = None,
    pattern: Annotated[str, typer.Option(help=f"Communication pattern: all, {', '.join(PATTERNS)}.")] = "all",
    ranks: Annotated[int, typer.Option(help="MPI ranks per run.")] = 8,
    iterations: Annotated[int, typer.Option(help="Iterations (time steps, rounds, sweeps) per run.")] = 20,
    runs: Annotated[
        int | None, typer.Option(help="Runs per experiment (default: enough to record every counter once).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed and options give byte-identical traces "
                                           "(0 to 2^32-1).", min=0, max=2**32 - 1)] = 0,
    counters_per_run: Annotated[
        int, typer.Option(help="Programmable PMU slots per run (plus the 3 fixed counters).")
    ] = DEFAULT_SLOTS,
    nights: Annotated[
        int, typer.Option(help="Campaign mode: nightly histories of this many nights (0: one experiment per app).")
    ] = 0,
    inject: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Regression KIND:APP:NIGHT[:SIZE] (repeatable; KIND: {', '.join(REGRESSION_KINDS)}); 'random' "
            "(default with --nights) or 'none'."
        ),
    ] = None,
    machine: Annotated[
        str | None, typer.Option(help="Machine profile preset (marenostrum5-gpp, generic) or TOML file.")
    ] = None,
    ranks_per_node: Annotated[
        int | None, typer.Option(help="Ranks per node (default: as many as a node has cores).")
    ] = None,
    scale: Annotated[float, typer.Option(help="Problem size factor (work per burst).")] = 1.0,
    date: Annotated[
        datetime | None, typer.Option(help="Start date of the runs (the first night in campaign mode).")
    ] = None,
    labels: Annotated[bool, typer.Option(help="Label bursts, MPI calls and phases with the archetype rules.")] = True,
    truth_counters: Annotated[
        str, typer.Option(help="Burst counters in the ground truth: 'reference' run only or 'all' runs.")
    ] = "reference",
    apps_per_pattern: Annotated[
        int,
        typer.Option(
            help="Applications per pattern (halo_1, halo_2, ...): same code structure, kernels that behave differently "
            "(inputs, compilers, data layouts)."
        ),
    ] = 1,
    kernel_spread: Annotated[
        float | None,
        typer.Option(
            help=f"How much the applications' kernels differ from the base ones: log standard deviation of their miss "
            f"rates (default {DEFAULT_SPREAD:g} with --apps-per-pattern > 1, else 0: the base kernels)."
        ),
    ] = None,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Simulate multi-run hardware-counter traces of MPI applications, with their ground truth as Parquet.

    The traces are written, not ingested: run `synthtrace ingest OUT_DIR` (or drop them where the nightly flow looks).
    """
    check_folder(out_dir, f"OUT_DIR {out_dir}")
    if runs is not None and not 1 <= runs <= MAX_RUNS:
        raise BadInputError(f"--runs must be between 1 and {MAX_RUNS:,} (got {runs})")
    apps = _apps(app, pattern, apps_per_pattern)
    spread = kernel_spread if kernel_spread is not None else (DEFAULT_SPREAD if apps_per_pattern > 1 else 0.0)
    variants = app_variants(apps, seed, spread)
    template = ExperimentSpec(
        app="app",
        pattern=next(iter(apps.values())),
        ranks=ranks,
        iterations=iterations,
        runs=runs,
        seed=seed,
        counters_per_run=counters_per_run,
        machine=machine,
        ranks_per_node=ranks_per_node,
        scale=scale,
        started_at=date or DEFAULT_DATE,
        variation=Variation(),
        truth_counters=truth_counters,
    )
    specs = [ExperimentSpec(**{**template.__dict__, "app": a, "pattern": p, "app_kernels": variants[a]})
             for a, p in apps.items()]
    for s in specs:
        s.validate()
    choice = [s.strip() for s in (inject or ["random" if nights else "none"])]
    if not 0 <= nights <= 3660:
        raise BadInputError(f"--nights must be between 0 and 3660 (ten years; got {nights})")
    if not nights and choice not in (["none"], []):
        raise BadInputError("--inject needs --nights (regressions are injected into nightly histories)")
    if choice == ["random"]:
        injections = random_injections(apps, nights, np.random.default_rng([seed, 4242]))
    elif choice == ["none"]:
        injections = []
    else:
        injections = [parse_injection(s) for s in choice]
    total = sum(s.n_blocks() * s.n_runs() for s in specs) * max(nights, 1)
    labeller = simulator_labeller if labels else None
    began = time.perf_counter()
    # written aside and moved in when whole: a full disk or Ctrl-C leaves nothing half made (attack 6 F12)
    with _simulator_faults(out_dir), staged_folder(out_dir, "OUT_DIR") as stage, \
            progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                         TimeRemainingColumn()) as bar:
        truth = TruthStore(stage / TRUTH_DIR)
        task = bar.add_task("simulate", total=total)
        step = lambda n: bar.advance(task, n)  # noqa: E731
        if nights:
            results = simulate_campaign(stage, template, apps, nights, injections, truth, labeller=labeller,
                                        progress=step, app_kernels=variants)
        else:
            results = []
            for s in specs:
                bar.update(task, description=f"simulate {s.app}")
                results.append(simulate_experiment(stage, s, truth, labeller=labeller, progress=step))
        truth.close(machine=_machine_dict(specs[0]))
    elapsed = time.perf_counter() - began
    table = Table("experiment", "runs", "bursts (run 0)", "MB", title=f"simulated into {out_dir}")
    for r in results[:40]:
        table.add_row(r.experiment, str(len(r.traces)), str(r.n_bursts[0]), f"{r.bytes / 1e6:.1f}")
    console.print(table)
    size = sum(r.bytes for r in results)
    console.print(f"{len(results)} experiment(s), {sum(len(r.traces) for r in results)} traces, {size / 1e6:.1f} MB "
                  f"in {elapsed:.1f} s; ground truth in {out_dir / TRUTH_DIR}"
                  + (f"; {len(injections)} injected regression(s)" if nights else ""), soft_wrap=True)


@contextlib.contextmanager
def _simulator_faults(out_dir: Path) -> Iterator[None]:
    """A fault of the simulator itself (an exception no input check foresaw) is one line, exit 1, nothing written
    into ``out_dir`` (attack 23 F2: an IndexError's traceback); a user's error, the machine's (a full disk, no
    memory) and a Ctrl-C are said as for any command."""
    from synthtrace.pipelines.address_space import out_of_memory_line
    from synthtrace.pipelines.cli import _interrupted

    try:
        yield
    except Exception as exc:
        if isinstance(exc, SynthtraceError | OSError) or out_of_memory_line(exc) is not None or _interrupted(exc):
            raise
        raise SynthtraceError(f"the simulator failed ({type(exc).__name__}: {exc}), a fault of synthtrace: nothing "
                              f"was written into {out_dir}; please report it with the command") from exc


def _machine_dict(spec: ExperimentSpec) -> dict:
    return load_machine(spec.machine).as_dict()


def register(app: typer.Typer) -> None:
    app.command("simulate", epilog=epilog("simulate"))(simulate)
