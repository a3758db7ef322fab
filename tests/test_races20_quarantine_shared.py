"""The night's quarantine of a broken trace whose .pcf/.row a sound trace beside it shares (attack 20 F13)."""
from __future__ import annotations

import gzip
import shutil

import pytest

from synthtrace.warehouse.drop import QUARANTINE, REASON_FILE, quarantine
from testing.traces import JACOBI

pytestmark = pytest.mark.real_traces


def test_a_companion_another_trace_uses_is_copied_into_the_quarantine_not_moved(tmp_path, run_cli):
    """Attack 20 F13: a cut ``jac.prv.gz`` was quarantined with ``jac.pcf`` and ``jac.row``, which the sound
    ``jac.prv`` beside it is read with: the next night ingested ``jac.prv`` without them (counters named by number).
    Shared companions are copied (the reason says so); a broken trace's own companions are still moved. Fails on
    the old code (jac.pcf moved away)."""
    app = tmp_path / "drop" / "app"
    app.mkdir(parents=True)
    for suffix in (".prv", ".pcf", ".row"):
        shutil.copyfile(JACOBI.with_suffix(suffix), app / f"jac{suffix}")
        shutil.copyfile(JACOBI.with_suffix(suffix), app / f"solo{suffix}")
    cut = gzip.compress(JACOBI.read_bytes()[:3000])[:600]
    (app / "jac.prv.gz").write_bytes(cut)
    (app / "solo.prv").unlink()
    (app / "solo.prv.gz").write_bytes(cut)  # broken, and alone with its companions
    pcf, row = (app / "jac.pcf").read_bytes(), (app / "jac.row").read_bytes()

    held = quarantine(tmp_path / "drop", app / "jac.prv.gz", "cut off mid-record")
    assert held is not None and not (app / "jac.prv.gz").exists()
    assert (app / "jac.pcf").read_bytes() == pcf and (app / "jac.row").read_bytes() == row  # left for jac.prv
    assert (held / "jac.pcf").read_bytes() == pcf and (held / "jac.row").read_bytes() == row  # and kept with it
    reason = (held / REASON_FILE).read_text()
    assert "jac.pcf: copied, left in place for jac.prv" in reason and "jac.row: copied" in reason

    alone = quarantine(tmp_path / "drop", app / "solo.prv.gz", "cut off mid-record")
    assert sorted(p.name for p in alone.iterdir()) == [REASON_FILE, "solo.pcf", "solo.prv.gz", "solo.row"]
    assert not any(app.glob("solo*")) and "copied" not in (alone / REASON_FILE).read_text()
    assert len(list((tmp_path / "drop" / QUARANTINE).iterdir())) == 2

    code, out, err = run_cli("ingest", app / "jac.prv", "-w", tmp_path / "wh")  # the next night's ingest
    assert code == 0 and "no .pcf" not in err and "no .row" not in err, (out, err)
