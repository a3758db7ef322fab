"""``synthtrace merge``: align an experiment's runs and merge their counters into one synthetic trace (DESIGN §6)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.table import Table

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    StepProgress,
    console,
    output_file,
    print_table,
    print_warning,
)
from synthtrace.pipelines.cli_base import OUTPUT_RULE, write_outputs
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.merge.merge_runs import DEFAULT_RESCALE, MergeOptions, MergeResult
from synthtrace.tracelib.merge.checks import worst
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.gzip_name import gzip_named
from synthtrace.warehouse import Warehouse
from synthtrace.pipelines.jobs import merge_experiment
from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.warehouse.merged import check_export_inputs, export_merged, on_disk
from synthtrace.warehouse.names import name_option


def merge(
    experiment: Annotated[
        str, typer.Argument(help="Experiment whose runs to merge (see `synthtrace runs`).", callback=name_option)
    ],
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    reference: Annotated[
        str | None,
        typer.Option(
            "--reference", help="Run (name or id) whose bursts the merged trace keeps; default: the first run by name."
        ),
    ] = None,
    export_prv: Annotated[
        Path | None,
        typer.Option(
            "--export-prv", metavar="OUT_STEM", help="Also write the merged trace as Paraver OUT_STEM.prv/.pcf/.row "
            "(OUT_STEM's folder is made if missing; the rule below holds otherwise). "
            + OUTPUT_RULE
        ),
    ] = None,
    rescale: Annotated[
        bool | None,
        typer.Option(
            "--rescale/--no-rescale",
            help="Force or forbid rescaling "
            "transferred counters by a co-varying reference counter of the "
            "matched bursts; default: chosen by the leave-one-out estimate.",
            show_default=False,
        ),
    ] = DEFAULT_RESCALE,
    estimate_unmatched: Annotated[
        bool,
        typer.Option(
            "--estimate-unmatched",
            help="Give unmatched bursts an estimate flagged in the `estimated` column instead of NULL.",
        ),
    ] = False,
    allow_timing_only: Annotated[
        bool,
        typer.Option(
            "--allow-timing-only",
            help="Merge runs that share no counter and no point-to-point message to check the match by (matched by "
                 "MPI structure and timing alone: lower scores). Runs with messages in common merge without it.",
        ),
    ] = False,
) -> None:
    """Merge the counters of an experiment's runs into its reference run's bursts; print the quality per counter."""
    parts = _export_files(export_prv) if export_prv is not None else []
    for part in parts:  # refused before minutes of merging
        output_file(part, "--export-prv", folder_made=True)  # the stem's folder is made
    opts = MergeOptions(reference=reference, rescale=rescale, estimate_unmatched=estimate_unmatched,
                        allow_timing_only=allow_timing_only)
    wh = Warehouse(warehouse)
    exp = wh.experiment(experiment)
    if export_prv is not None:
        check_export_inputs(exp)
    with StepProgress(1, f"merge {experiment}") as step:  # the total comes with the first step
        result = merge_experiment(exp, opts, on_step=step)
    print_quality(result)
    console.print(f"merged {result.merged.height} bursts of {result.reference_run} into "
                  f"{wh.experiment_dir(experiment)}", soft_wrap=True)
    if export_prv is not None:
        result = on_disk(exp, result)  # the export reads the committed merge a window at a time: free it here
        release_free_heap()
        with StepProgress(1, f"writing {parts[-1]}") as step:
            write_outputs(parts, lambda folder: export_merged(exp, result, folder / parts[-1].name), "--export-prv")
            step("done")
        console.print(f"exported the merged trace to {parts[-1]} (.pcf, .row beside it)", soft_wrap=True)


def _export_files(stem: Path) -> list[Path]:
    """The files ``--export-prv OUT_STEM`` writes, the ``.prv`` last (as the Paraver writer names them); a stem
    that names no file (empty, ``.``, ``..``, ``/``, ``DIR/.prv``, an existing folder) or asks for a compression
    the writer does not make (``x.prv.gz``) is refused before the merge (attack 7 A2)."""
    name = stem.name.removesuffix(".prv") if stem.suffix == ".prv" or stem.name == ".prv" else stem.name
    if name in ("", ".", "..") or stem.is_dir():
        raise BadInputError(f"--export-prv {str(stem) or repr('')}: names a folder, not a file stem; give one inside "
                            "it (e.g. out/merged, which writes out/merged.prv, .pcf and .row)")
    if (gzip_named(stem) or stem.suffix.lower() in (".bz2", ".xz", ".zst")) and stem.stem.endswith(".prv"):
        raise BadInputError(f"--export-prv {stem}: the merged trace is written uncompressed; give the stem "
                            f"({stem.stem.removesuffix('.prv')}) and compress the .prv afterwards if you wish")
    prv = stem if stem.suffix == ".prv" else stem.with_name(stem.name + ".prv")
    return [prv.with_suffix(".pcf"), prv.with_suffix(".row"), prv]


def print_quality(result: MergeResult) -> None:
    """The quality table: per counter its source run, coverage and estimated error (relative, median and p95)."""
    t = Table(title=f"merge of {result.experiment} into {result.reference_run}", title_justify="left")
    t.add_column("counter", overflow="fold", min_width=12)
    t.add_column("source run", overflow="fold", min_width=10)
    for name in ("coverage", ">=10us", "error", "p95", "x-run", "score", "verdict"):
        t.add_column(name, justify="right", no_wrap=True)

    def pct(v: Any) -> str:
        return "" if v is None else f"{100 * v:.1f}%"

    for q in result.quality.iter_rows(named=True):
        src = "reference" if q["method"] == "recorded" else q["source_run"]
        if q["rescaled_by"]:
            src += f" (x ratio of {q['rescaled_by']})"
        t.add_row(q["counter"], src, pct(q["coverage"]), pct(q["coverage_long"]), pct(q["estimated_error"]),
                  pct(q["estimated_error_p95"]),
                  pct(q["cross_run_diff"]), "" if q["mean_match_score"] is None else f"{q['mean_match_score']:.2f}",
                  q["verdict"])
    print_table(t)
    reasons = result.quality.filter(pl.col("verdict") == worst(result.quality.get_column("verdict")))
    why = next((r for r in reasons.get_column("verdict_reason").to_list() if r), "")
    console.print(f"verdict for {result.experiment}: {worst(result.quality.get_column('verdict'))}"
                  + (f" ({why})" if why else ""), soft_wrap=True)
    console.print("coverage: share of the reference's bursts with a value (>=10us: of those lasting 10 us or more); "
                  "error, p95: estimated relative error (leave-one-out on the reference counters); x-run: median "
                  "difference between runs of a counter both recorded; score: mean match score; verdict: ok / "
                  "suspect / bad from misalignment signals (see merge_quality.verdict_reason)", style="dim")
    for w in result.warnings:
        print_warning(w)


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("merge"))(merge)
