"""The examples each command's ``--help`` ends with (typer's epilog), in one table that a test parses with the
commands' own options (``tests/test_cli_edge.py``), so that no example ever shows an option that is not there."""
from __future__ import annotations

#: command path (as typed after ``synthtrace``) -> example command lines
EXAMPLES: dict[str, tuple[str, ...]] = {
    "ingest": ("synthtrace ingest traces/lulesh/ --experiment lulesh-8r --app lulesh",
               "synthtrace ingest run1.prv.gz run2.prv -w /scratch/warehouse",
               "synthtrace ingest scorep-run1/traces.otf2 --experiment pingpong",
               "synthtrace ingest cut-short.prv --salvage"),
    "runs": ("synthtrace runs",),
    "runs rm": ("synthtrace runs rm 3f2a9c1b", "synthtrace runs rm lulesh_7+1.chop8 lulesh_4+4.chop_5it"),
    "runs move": ("synthtrace runs move run1 run2 --experiment lulesh-8r",),
    "sql": ('synthtrace sql "SELECT experiment, counter, verdict FROM merge_quality"',
            'synthtrace sql "SELECT * FROM bursts WHERE task = 1" --output task1.parquet',
            'synthtrace sql "SELECT * FROM runs" --format json --timeout 10',
            'synthtrace sql "SHOW TABLES"'),
    "merge": ("synthtrace merge lulesh-8r",
              "synthtrace merge lulesh-8r --reference lulesh_4+4.chop_5it --export-prv merged/lulesh",
              "synthtrace merge pingpong --allow-timing-only"),
    "archetypes": ("synthtrace archetypes lulesh-8r", "synthtrace archetypes lulesh-8r --machine skylake-sp"),
    "report": ("synthtrace report --out report.html", "synthtrace report --experiment lulesh-8r --plots plots/"),
    "export": ("synthtrace export lulesh-8r", "synthtrace export lulesh-8r --format pipit --output events.csv"),
    "machines": ("synthtrace machines",),
    "simulate": ("synthtrace simulate sim/ --pattern all --runs 4",
                 "synthtrace simulate nights/ --nights 10 --inject random"),
    "plan": ("synthtrace plan --counters PAPI_L1_DCM,PAPI_L2_DCM,PAPI_DP_OPS --slots 4 --format extrae",
             "synthtrace plan --counters PAPI_L1_DCM,PAPI_BR_MSP --machine zen4-epyc --format scorep"),
    "train": ("synthtrace train --target ipc --compare", "synthtrace train --target ipc --experiment lulesh-8r"),
    "models": ("synthtrace models",),
    "predict": ("synthtrace predict --experiment lulesh-8r --model 5d41402abc4b",),
    "detect": ("synthtrace detect", "synthtrace detect --app lulesh"),
    "nightly": ("synthtrace nightly --drop /scratch/drop", "synthtrace nightly --drop /scratch/drop --skip report"),
    "serve": ('synthtrace serve --drop /scratch/drop --cron "0 2 * * *" --timezone Europe/Madrid',),
    "demo": ("synthtrace demo", "synthtrace demo --out /tmp/demo --nights 8"),
    "pop": ("synthtrace pop", "synthtrace pop lulesh --scaling weak", "synthtrace pop lulesh-8r --network 1.5:12.5",
            "synthtrace pop lulesh --machine marenostrum5-gpp"),
}


def epilog(command: str) -> str:
    """The ``--help`` epilog of ``command`` (a key of :data:`EXAMPLES`): its examples, one paragraph each."""
    return "\n\n".join(["Examples:", *EXAMPLES[command]])
