"""``synthtrace demo``: a small simulated campaign through the nightly flow, on the embedded default (a local
warehouse folder, ephemeral Prefect, no server)."""
from __future__ import annotations

import os
import shutil
import stat
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.panel import Panel

from synthtrace.pipelines.cli_app import console, print_warning
from synthtrace.pipelines.cli_base import check_folder
from synthtrace.pipelines.cli_nightly import night_progress
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.atomic_file import lies_in
from synthtrace.tracelib.errors import BadInputError

DEMO_APPS = {"stencil": "halo", "solver": "cg"}
DEMO_REGRESSION = "more_instructions:stencil:4:0.3"  # the main kernel does 30 % more work from night 4
DEMO_MARKER = ".synthtrace-demo"  # written first, so a demo killed half-way is still recognised as one


def made_by_demo(out: Path) -> bool:
    """Whether the folder ``out`` is one a demo made: its :data:`DEMO_MARKER` is a regular file (not a link). Only
    such a folder is ever replaced: a ``drop/`` and a ``warehouse/`` are also the layout a user of ``nightly``
    builds (attack 14 F16: a folder with a ``warehouse/`` was taken for a demo made before the marker, and deleted
    whole, its real runs and traces with it)."""
    try:
        return stat.S_ISREG(os.lstat(out / DEMO_MARKER).st_mode)
    except OSError:
        return False


def _check_not_around_cwd(out: Path) -> None:
    """Refuse, nothing deleted, to replace ``out`` when it is the working folder or holds it (``--out .``, ``..``):
    deleting it would leave this process nowhere (attack 16 F8: emptied, then "error: .: Invalid argument")."""
    try:
        cwd = Path.cwd()
    except OSError:  # the working folder was removed under us: nothing of it can be held
        return
    if lies_in(cwd, out):
        raise BadInputError(f"--out {out}: is the working folder or holds it ({cwd}), and replacing the earlier demo "
                            "there would delete the folder you are in: nothing was deleted; run from outside it, or "
                            "give --out its path from there")


def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for the demo's drop folder, warehouse and report.")] = Path(
        "synthtrace-demo"
    ),
    nights: Annotated[int, typer.Option(help="Nights of history to simulate (detection needs 7 or more).")] = 8,
    seed: Annotated[int, typer.Option(help="Random seed of the simulated campaign.")] = 7,
    fresh: Annotated[bool, typer.Option(help="Delete an earlier demo in --out first.")] = True,
) -> None:
    """Simulate a small campaign (2 apps, several counter sets, a few nights, one injected regression), run the
    nightly flow over it and say where to look."""
    from synthtrace.models.archetypes import simulator_labeller
    from synthtrace.pipelines.nightly import run_night
    from synthtrace.simulator import (
        ExperimentSpec,
        TruthStore,
        parse_injection,
        simulate_campaign,
    )
    from synthtrace.simulator.truth import TRUTH_DIR
    from synthtrace.warehouse import Warehouse

    if nights < 1:
        raise BadInputError("--nights must be at least 1")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BadInputError(f"--out {out}: exists and is not a folder (a link is not followed); choose another --out")
    check_folder(out, f"--out {out}")  # not inside a warehouse (issue 23 item 2), not under a file, writable
    if out.exists() and any(out.iterdir()) and not made_by_demo(out):
        raise BadInputError(f"--out {out}: exists and is not a synthtrace demo folder (no {DEMO_MARKER} file in it; "
                            "a demo older than that file is deleted by hand); nothing was deleted: choose another "
                            "--out")
    if fresh and out.exists():
        _check_not_around_cwd(out)
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("made by synthtrace demo; the next demo with this --out replaces this folder\n")
    drop, wh, truth_dir = out / "drop", out / "warehouse", out / "simulated"
    began = time.perf_counter()
    with console.status("simulating the campaign ...", spinner="dots"):
        template = ExperimentSpec(app="demo", pattern="halo", ranks=8, iterations=12, seed=seed,
                                  started_at=datetime(2026, 11, 1, 2, 0))
        injection = parse_injection(DEMO_REGRESSION)
        truth = TruthStore(truth_dir / TRUTH_DIR)
        results = simulate_campaign(drop, template, DEMO_APPS, nights, [injection] if nights > injection.night else [],
                                    truth, labeller=simulator_labeller)
        truth.close()
    n_traces = sum(len(r.traces) for r in results)
    console.print(f"simulated {len(DEMO_APPS)} apps x {nights} nights: {len(results)} experiments, {n_traces} traces "
                  f"({sum(r.bytes for r in results) / 1e6:.0f} MB) in {time.perf_counter() - began:.0f} s")
    with night_progress() as progress:
        summary = run_night(drop, Warehouse(wh), progress=progress, settle_s=0)  # [helper drop] its traces are complete
    console.print(f"night: {summary.message()}", soft_wrap=True)
    mix: dict[str, float] = {}
    for m in summary.archetypes.values():
        for k, v in m.items():
            mix[k] = mix.get(k, 0.0) + v / max(len(summary.archetypes), 1)
    top = ", ".join(f"{k} {v:.0%}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])[:6])
    alerts = (
        "\n".join(
            f"  - {a.get('app')} at {a.get('call_site') or a.get('kernel')}: time {a.get('magnitude', 0):+.0%} from "
            f"{str(a.get('changed_at', ''))[:10]}, explained by "
            f"{', '.join(a.get('explained_by') or []) or 'an archetype shift'}"
            for a in summary.alerts[:5]
        )
        or "  (none)"
    )
    w = f"-w {wh}"
    console.print(
        Panel.fit(
            f"runs ingested        {len(summary.ingested)}\n"
            f"experiments merged   {len(summary.merged)}\n"
            f"archetype mix        {top or '(not computed)'}\n"
            f"alerts               {len(summary.alerts)} (injected: {DEMO_REGRESSION})\n{alerts}\n"
            f"report               {summary.report or '(not built)'}\n"
            f"warehouse            {wh}",
            title=f"synthtrace demo ({time.perf_counter() - began:.0f} s)",
        )
    )
    # outside the panel and never wrapped, so that each command copies whole
    console.print("try:", soft_wrap=True)
    for command in (f"synthtrace runs {w}",
                    f'synthtrace sql "SELECT counter, source_run, coverage, estimated_error FROM merge_quality '
                    f'LIMIT 10" {w}',
                    f"synthtrace archetypes {results[0].experiment} {w}", f"synthtrace detect {w}"):
        console.print(f"  {command}", soft_wrap=True)
    for e in summary.errors:
        print_warning(f"{e['stage']} {' '.join(e['args'])}: {e['error']}")


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("demo"))(demo)
