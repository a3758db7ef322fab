"""Attack 22 F3: a night over a drop holding an OTF2 archive of many locations under a long absolute path. The
discovered list (every file of every trace, with its size and time) was the flow's parameter, and Prefect refuses a
flow run whose parameters pass 512 KB: a 1.2 MB traceback, exit 1, nothing ingested, every night after."""
from __future__ import annotations

import json

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.otf2_variants import many_ranks

pytestmark = pytest.mark.slow  # starts Prefect

#: bytes of a flow run's parameters Prefect's server takes (its server.api.max_parameter_size default)
PREFECT_PARAMETER_LIMIT = 524_288
INGEST_ONLY = ["merge", "archetypes", "pop", "detect", "retrain", "report"]


def test_a_night_takes_an_archive_whose_file_list_passes_prefects_parameter_limit(prefect_harness, tmp_path):
    """256 ranks under a drop folder 1 kB deep: its 514 files' paths alone pass Prefect's limit on a flow's
    parameters (a 10k-rank Score-P archive has 20k files: under any path). The night ingests it, and leaves nothing
    of its own in the warehouse's staging."""
    from synthtrace.pipelines.nightly import run_night

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    deep = drop.joinpath(*["scratch_project_" + "p" * 180] * 5, "campaign", "run_256")
    deep.mkdir(parents=True)
    anchor = many_ranks(deep, 256)
    listed = sum(len(json.dumps(str(f))) for f in drop.rglob("*") if f.is_file())
    assert listed > PREFECT_PARAMETER_LIMIT  # the premise: the paths alone are over the limit

    summary = run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=0)
    assert [(r["run_name"], r["experiment"]) for r in summary.ingested] == [("run_256", "campaign")], summary
    assert summary.errors == [] and summary.quarantined == []
    ranks = query(Warehouse(wh), "SELECT count(DISTINCT task) FROM bursts").column(0)[0].as_py()
    assert ranks == 256
    assert anchor.is_file()  # a trace ingested stays in the drop folder
    assert list((wh / ".staging").iterdir()) == []  # the night's list of what it found went with it
