"""``synthtrace archetypes``, ``report`` and ``machines``: metrics, the 13 archetypes and the HTML report
(DESIGN §7). The work is in :mod:`synthtrace.pipelines.jobs`; this module parses the options and prints."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import polars as pl
import typer
from rich.table import Table

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    StepProgress,
    WarehouseOption,
    check_folder,
    console,
    err_console,
    output_file,
    print_table,
)
from synthtrace.pipelines.cli_base import (
    OUTPUT_RULE,
    folder_option,
    output_folder,
    output_option,
    output_target,
    print_merge_coverage_notes,
    print_written,
    staged_folder,
)
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.atomic_file import lies_in
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.tracelib.domain.sums import float_sum
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.names import name_option

if TYPE_CHECKING:
    from synthtrace.models.archetypes import Thresholds

def _machine_option(spec: str | None) -> str | None:
    """``--machine``, loaded once while the options are parsed (eagerly: a mistyped profile is the error reported,
    before any other option is looked at and before any work)."""
    if spec is not None:
        load_machine(spec)
    return spec


MachineOption = Annotated[str | None, typer.Option(
    "--machine", help="Machine profile: a TOML file or a preset (list them with `synthtrace machines`). Default: a "
                      "machine.toml beside the traces, else marenostrum5-gpp.", callback=_machine_option,
    is_eager=True)]
ThresholdsOption = Annotated[Path | None, typer.Option(
    "--thresholds", help="TOML file overriding archetype thresholds (see models/archetypes.py Thresholds).")]


def _thresholds(path: Path | None) -> Thresholds | None:
    from synthtrace.models.archetypes import Thresholds

    if path is None:
        return None
    if not path.is_file():
        raise BadInputError(f"{path}: no such thresholds file")
    return Thresholds.from_toml(path)


def provisional_mix(archetypes: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The archetype mix with ``provisional_share``: the share of each archetype's time whose label is provisional."""
    from synthtrace.models.analysis import mix
    from synthtrace.models.archetypes import INSUFFICIENT
    prov = (archetypes.lazy().filter(pl.col("provisional").is_not_null() & (pl.col("archetype") != INSUFFICIENT))
            .group_by("unit", "archetype").agg((float_sum(pl.col("duration_ns")) * 1e-9).alias("_prov_s")).collect())
    return (
        mix(archetypes)
        .join(prov, on=["unit", "archetype"], how="left", maintain_order="left")
        .with_columns((pl.col("_prov_s").fill_null(0.0) / pl.col("time_s")).fill_nan(0.0).alias("provisional_share"))
        .drop("_prov_s")
    )


def undecided_lines(archetypes: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """What the counters left open, by burst time: the archetypes that could still win and the counters deciding."""
    from synthtrace.models.archetypes import INSUFFICIENT
    b = archetypes.lazy().filter(pl.col("unit") == "burst")
    ns = pl.col("duration_ns")
    open_ = b.filter(pl.col("provisional").is_not_null())
    total, n_insufficient, insufficient_ns, n_open, open_ns = b.select(
        float_sum(ns).alias("total"), (pl.col("archetype") == INSUFFICIENT).sum().alias("n_insufficient"),
        float_sum(ns.filter(pl.col("archetype") == INSUFFICIENT)).alias("insufficient_ns"),
        pl.col("provisional").is_not_null().sum().alias("n_open"),
        float_sum(ns.filter(pl.col("provisional").is_not_null())).alias("open_ns"),
    ).collect().row(0)
    total = total or 1
    lines = []
    if n_insufficient:
        lines.append(f"{n_insufficient} bursts ({insufficient_ns / total:.1%} of burst time) "
                     "have no measured evidence for any archetype")
    if n_open:
        def by_time(col: str) -> str:
            t = (open_.select(col, "duration_ns").explode(col).drop_nulls(col).group_by(col)
                 .agg(float_sum(pl.col("duration_ns"))).sort("duration_ns", descending=True).collect())
            return ", ".join(f"{c} ({ns / total:.0%})" for c, ns in t.iter_rows())
        lines.append(f"provisional labels on {open_ns / total:.1%} of burst time; "
                     f"could also be: {by_time('could_also_be') or '-'}; counters that would decide: "
                     f"{by_time('missing_counters') or '-'}")
    return lines


def archetypes(
    experiment: Annotated[
        str | None, typer.Argument(help="Experiment to analyse (default: every experiment).", callback=name_option)
    ] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    machine: MachineOption = None,
    thresholds: ThresholdsOption = None,
    discover: Annotated[
        bool, typer.Option(help="Also cluster bursts and report agreement (kappa) and stability (ARI).")
    ] = True,
) -> None:
    """Compute metrics and the 13 archetypes of an experiment, store them and print the mix."""
    from synthtrace.pipelines.jobs import analyse
    from synthtrace.warehouse.analysis_store import experiments

    th, wh = _thresholds(thresholds), Warehouse(warehouse)
    names = [experiment] if experiment else experiments(wh)
    if not names:
        raise BadInputError(f"{warehouse}: no experiments (ingest traces first)")
    with StepProgress(3 * len(names), "archetypes") as step:
        done = [(exp, analyse(exp, machine=machine, thresholds=th, discover=discover, on_step=step))
                for exp in map(wh.experiment, names)]
    for exp, (m, inp, res) in ((e, (a.machine, a.trace, a.result)) for e, a in done):
        name = exp.name
        t = Table(title=f"archetypes of {name} ({inp.source}: {len(inp.run_names) if inp.source == 'runs' else 1} "
                        f"{'run(s)' if inp.source == 'runs' else 'merged trace'})")
        for col in ("unit", "archetype", "count", "time (s)", "time share", "provisional"):
            t.add_column(col, justify="left" if col in ("unit", "archetype") else "right")
        for r in provisional_mix(res.archetypes).iter_rows(named=True):
            t.add_row(r["unit"], r["archetype"], str(r["count"]), f"{r['time_s']:.4g}", f"{r['time_share']:.1%}",
                      f"{r['provisional_share']:.0%}")
        print_table(t)
        console.print(f"machine profile: {m.label}", soft_wrap=True)
        for line in undecided_lines(res.archetypes):
            console.print(line, soft_wrap=True)
        d = res.discovery
        if "kappa" in d:
            console.print(
                f"discovery: {d['n_clusters']} clusters on {len(d['features'])} features; "
                f"kappa vs rules {d['kappa']:.3f} ({d['n_compared']} bursts), bootstrap ARI {d['stability_ari']:.3f}"
            )
        elif "skipped" in d:
            err_console.print(f"discovery skipped: {d['skipped']}")
        print_merge_coverage_notes([exp])


def report(
    out: Annotated[Path, typer.Option("--out", "-o", parser=output_option,
                                      help="HTML file to write. " + OUTPUT_RULE)] = Path("synthtrace-report.html"),
    experiment: Annotated[
        str | None, typer.Option(help="Only this experiment (default: all).", callback=name_option)
    ] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    machine: MachineOption = None,
    thresholds: ThresholdsOption = None,
    plots: Annotated[Path | None, typer.Option(parser=folder_option, help="Also save the PNG plots in this folder "
                                               "(made if missing).")] = None,
) -> None:
    """Write a self-contained HTML report (archetype mix, roofline, Ridgeline, timeline, merge quality, alerts)."""
    from synthtrace.pipelines.jobs import NightSettings
    from synthtrace.pipelines.jobs import report as build
    from synthtrace.pipelines.report import report_sections
    from synthtrace.warehouse.analysis_store import experiments

    wh = Warehouse(warehouse)
    if experiment and experiment not in experiments(wh):
        raise BadInputError(f"no experiment {experiment!r} in {warehouse}")
    th = _thresholds(thresholds)
    out = output_file(out, "--out")  # a folder or an impossible path is refused before minutes of work ('-': stdout)
    if plots:
        check_folder(plots, f"--plots {plots}")
    with contextlib.ExitStack() as stack, StepProgress(len(report_sections(wh, experiment)) + 1, "report") as step:
        stack.enter_context(output_folder(out, "--out"))  # [helper edges] issue 23: a full disk leaves no folder
        target = stack.enter_context(output_target(out, "--out"))  # '-': stdout, wherever the shell put it
        # the PNGs are put in place only once the report is written: a failure leaves none of them (attack 6 F12)
        plot_dir = stack.enter_context(staged_folder(plots, "--plots")) if plots else None
        try:
            build(wh, NightSettings(machine), target, experiment=experiment, thresholds=th, plot_dir=plot_dir,
                  on_step=step)
        except OSError as exc:  # issue 23: the warehouse's own write is not blamed on --out
            if (stored := _warehouse_write(exc, wh, out)) is None:
                raise
            raise stored from None
    print_written(f"report written to {out}", out)
    print_merge_coverage_notes(map(wh.experiment, report_sections(wh, experiment)))  # also a banner of its section


def _warehouse_write(exc: OSError, wh: Warehouse, out: Path) -> WarehouseError | None:
    """``exc`` as one line naming the warehouse when it is a failed write inside it (the analysis' parts the report
    keeps in its scratch: a full disk there), else None (the output's own write, said by ``--out``)."""
    if exc.filename is None:
        return None
    path = Path(os.fsdecode(exc.filename))
    if not lies_in(path, wh.root):
        return None
    return WarehouseError(f"warehouse {wh.root}: cannot store the report's analysis in it ({path}: "
                          f"{exc.strerror or exc}); no report was written to {out}")


def machines(
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """List the machine profiles that ship with synthtrace (use one with --machine, or drop a machine.toml beside
    the traces)."""
    from synthtrace.tracelib.domain.machine import DEFAULT_PRESET, presets
    t = Table(title="machine profiles")
    for c in ("preset", "machine", "sockets x cores", "GHz", "peak GFLOP/s/core", "DRAM GB/s/socket",
              "network GB/s/link", "PMU slots + fixed"):
        t.add_column(c, no_wrap=c == "preset")
    for name in presets():
        m = load_machine(name)
        pmu = f"{m.pmu_programmable or '?'} + {', '.join(m.pmu_fixed) or 'none'}"
        t.add_row(
            name + (" (default)" if name == DEFAULT_PRESET else ""),
            m.name,
            f"{m.sockets} x {m.cores_per_socket}",
            f"{m.frequency_ghz:g}",
            f"{m.peak_flops_core() / 1e9:.3g} ({m.widest_isa})",
            f"{m.dram_bw_socket() / 1e9:.4g}",
            f"{m.link_bw() / 1e9:.3g}",
            pmu,
        )
    print_table(t)


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("machines"))(machines)
    app.command(epilog=epilog("archetypes"))(archetypes)
    app.command(epilog=epilog("report"))(report)
