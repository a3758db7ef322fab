"""``synthtrace plan``: the fewest runs that record every wanted hardware counter (issue 8,
tracelib.domain.counter_plan)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    WarehouseOption,
    console,
    output_file,
    print_table,
    write_output,
)
from synthtrace.pipelines.cli_base import OUTPUT_RULE, output_option, print_written, write_stdout  # [helper security]
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.domain.counter_plan import (
    DEFAULT_FIXED,
    FORMATS,
    CounterPlan,
    listed,
    parse_counter_list,
    plan_counters,
    read_conflicts,
    render,
    table_notes,
)
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.printable import clipped
from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.tracelib.domain.papi_presets import preset_table


#: programmable slots at most: PMUs have 2 to 8 per hardware thread (uncore and GPU units a few dozen); a larger
#: --slots is a typo (attack 12: 99999999999999999999 was planned as "1 of 99999999999999999999 slots")
MAX_SLOTS = 256
#: runs the terminal table shows (``--output`` writes every run)
TABLE_RUNS = 50


def plan(
    counters: Annotated[
        str,
        typer.Option("--counters", "-c", help="Counters to record, comma-separated (PAPI presets or native names)."),
    ],
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            "-s",
            help="Programmable counters the PMU reads at once (fixed-function counters aside). Default: the machine's.",
        ),
    ] = None,
    machine: Annotated[
        str | None,
        typer.Option(
            "--machine",
            help="Machine profile whose PMU to plan for: a preset "
            "(`synthtrace machines`) or a TOML file. Default: marenostrum5-gpp "
            "(Intel: instructions and cycles on fixed-function counters).",
        ),
    ] = None,
    fixed: Annotated[
        str, typer.Option("--fixed", help='Reference counters every run carries, comma-separated ("" for none).')
    ] = ",".join(DEFAULT_FIXED),
    conflicts: Annotated[
        Path | None,
        typer.Option(
            "--conflicts",
            help="Pairs or groups of counters that cannot "
            "share a run: one per line (names separated by commas or "
            'blanks), or TOML `conflicts = [["A", "B"], ...]`.',
        ),
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table | json | extrae (an Extrae <counters> fragment) | scorep (a SCOREP_METRIC_PAPI= line per run).",
        ),
    ] = "table",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", parser=output_option, help="Write to this file instead of the "
                                  "terminal. " + OUTPUT_RULE)  # [helper security] the one output rule
    ] = None,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Plan the fewest runs that record every counter, each run carrying the fixed reference counters."""
    if format not in FORMATS:
        raise BadInputError(f"--format {format!r}: expected one of {', '.join(FORMATS)}")
    if slots is not None and slots > MAX_SLOTS:  # (below 1: said by plan_counters)
        raise BadInputError(f"--slots must be at most {MAX_SLOTS} (got {clipped(str(slots), 40)})")
    if output is not None:
        output_file(output)  # a folder, or a path under a file, before any planning
    groups = read_conflicts(conflicts) if conflicts is not None else []
    m = load_machine(machine)
    if slots is None and m.pmu_programmable is None:
        raise BadInputError(f"{m.label}: the profile has no [pmu] programmable count; give --slots")
    result = plan_counters(parse_counter_list(counters), parse_counter_list(fixed),
                           m.pmu_programmable if slots is None else slots, groups, fixed_function_roles=m.pmu_fixed,
                           presets=preset_table(m.pmu_papi) if m.pmu_papi else None, check_names=True)
    if output is not None:
        text = render(result, format)
        write_output(output, lambda p: p.write_text(text))
        print_written(f"{result.n_runs} run(s) written to {output}", output)
    elif format == "table":
        _print_table(result)
    else:
        write_stdout(render(result, format))


def _print_table(result: CounterPlan) -> None:
    t = Table(title=f"{result.n_runs} run(s), {result.slots} programmable slots each")
    t.add_column("run", justify="right")
    t.add_column("fixed")
    t.add_column("counters")
    t.add_column("programmable counters", justify="right")
    carried = listed(result.carried)
    for i, run in enumerate(result.runs[:TABLE_RUNS], start=1):
        t.add_row(str(i), carried, ", ".join(run[len(result.carried):]),
                  f"{result.counters_used(run)} of {result.slots}")
    print_table(t)
    if result.n_runs > TABLE_RUNS:  # attack 12: every list plan prints is bounded; the whole plan goes to a file
        console.print(f"... and {result.n_runs - TABLE_RUNS:,} more runs: write the plan with --output FILE (every "
                      "run)", soft_wrap=True)
    for line in table_notes(result):
        console.print(line, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("plan"))(plan)
