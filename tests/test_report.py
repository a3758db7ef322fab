"""Plots carry the right points, and the HTML report is one self-contained file."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from synthtrace.models.analysis import analyse
from synthtrace.pipelines.report import (
    figure_png,
    LEGEND_MARKER_AREA,
    plot_ridgeline,
    plot_roofline,
    plot_timeline,
)
from testing.analysis_cases import RPS, TEST_MACHINE, case_bursts
from testing.traces import LULESH_A, PRIME
from testing.analysis_cases import two_rank_program


def _offsets(fig) -> int:
    """Points drawn by every scatter of a figure (from the artists, before saving)."""
    return sum(
        len(c.get_offsets()) for ax in fig.axes for c in ax.collections if c.__class__.__name__ == "PathCollection"
    )


def _labelled(res) -> pl.DataFrame:
    keys = ["run_id", "appl", "task", "thread", "burst_seq"]
    a = res.archetypes.filter(pl.col("unit") == "burst").select(*keys, "archetype", "provisional")
    return res.burst_metrics.join(a, on=keys, how="left")


def _phase_archetypes(res) -> pl.DataFrame:
    """The phase metrics of an analysis with each phase's archetype."""
    phases = res.archetypes.filter(pl.col("unit") == "phase").select("run_id", "appl", "phase", "archetype")
    return res.phase_metrics.join(phases, on=["run_id", "appl", "phase"])


def test_roofline_points_match_bursts(tmp_path):
    b, _ = case_bursts()
    res = analyse(b, None, machine=TEST_MACHINE, discover=False)
    bm = _labelled(res)
    info = plot_roofline(bm, TEST_MACHINE, ranks_per_socket=RPS)
    assert info.unit == "flop"
    # one panel per level with traffic (L2, L3, DRAM); each draws the bursts with positive FLOPs and traffic
    drawable = {lvl: bm.filter((pl.col(c) > 0) & pl.col(c).is_finite() & (pl.col("flop_rate") > 0)).height
                for lvl, c in (("L2", "oi_l2"), ("L3", "oi_l3"), ("DRAM", "oi_dram"))}
    assert info.points == drawable and drawable["DRAM"] == 1  # only the vector burst does FLOPs
    assert _offsets(info.figure) == sum(drawable.values())
    png = figure_png(info.figure, tmp_path / "roof.png")
    assert (tmp_path / "roof.png").stat().st_size > 1000 and png[:4] == b"\x89PNG"


def test_instruction_roofline_without_fp_counters():
    b, _ = case_bursts()
    res = analyse(b.drop("PAPI_VEC_INS"), None, machine=TEST_MACHINE, discover=False)  # no FLOPs; FP share undecided
    info = plot_roofline(_labelled(res), TEST_MACHINE, ranks_per_socket=RPS)
    assert info.unit == "instruction"
    assert info.points == {"DRAM": len(b)} and _offsets(info.figure) == len(b)
    # undecided bursts are drawn hollow in their provisional colour
    labels = {t.get_text() for t in info.figure.axes[0].get_legend().get_texts()}
    assert any("(provisional)" in t for t in labels)


def test_ridgeline_and_timeline_points():
    b, c = two_rank_program()
    res = analyse(b, c, machine=TEST_MACHINE, discover=False)
    pm = _phase_archetypes(res)
    info = plot_ridgeline(pm, TEST_MACHINE, ranks_per_socket=2)
    expected = pm.filter(pl.col("oi_ins").is_finite() & (pl.col("oi_ins") > 0)).height
    assert expected == 3 and info.n_points == expected and _offsets(info.figure) == expected
    tl = plot_timeline(res.archetypes, pm, TEST_MACHINE, ranks_per_socket=2)
    bars = sum(len(coll.get_paths()) for coll in tl.figure.axes[0].collections)
    units = res.archetypes.filter(pl.col("unit").is_in(["burst", "mpi"])).height
    assert tl.n_points == units == bars
    figure_png(tl.figure)


@pytest.mark.real_traces
def test_report_is_self_contained(tmp_path, run_cli):
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse
    wh = Warehouse(tmp_path / "wh")
    ingest_trace(wh, PRIME, experiment="prime")
    ingest_trace(wh, LULESH_A, experiment="lulesh")
    code, _, err = run_cli("archetypes", "lulesh", "--warehouse", str(wh.root), "--no-discover")
    assert code == 0, err
    out = tmp_path / "r.html"
    plots = tmp_path / "plots"
    code, _, err = run_cli("report", "--out", str(out), "--warehouse", str(wh.root), "--plots", str(plots),
                           "--machine", "generic")
    assert code == 0, err
    text = out.read_text()
    assert "<html" in text and "Archetype mix" in text and "Top time consumers" in text
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", text)  # nothing to fetch
    assert "http://" not in text and "https://" not in text
    imgs = re.findall(r"data:image/png;base64,", text)
    assert len(imgs) == 6  # roofline, Ridgeline, timeline for each of the two experiments
    pngs = sorted(plots.glob("*.png"))
    assert len(pngs) == 6 and all(p.stat().st_size > 5000 for p in pngs)
    code, _, err = run_cli("report", "--out", str(out), "--warehouse", str(wh.root), "--experiment", "nope")
    assert code == 2 and "nope" in err


def test_signals_render_readably():
    from synthtrace.pipelines.report import _cell_text

    sig = [{"name": "ipc", "before": 1.234, "after": 0.9, "z": -6.12}, {"name": "l1_mpki", "before": 2.0, "after": 5.0,
                                                                       "z": float("nan")}]
    assert _cell_text(sig) == "ipc 1.234 → 0.9 (z -6.1); l1_mpki 2 → 5"
    assert _cell_text({"kind": "x", "n": 3}) == "kind x, n 3"


def test_timeline_says_tasks_and_threads():
    """An OpenMP run is 1 task x n threads, not n ranks (the real PolyBench Jacobi trace)."""
    from synthtrace import read_trace
    from testing.traces import JACOBI

    b, c = read_trace(JACOBI)
    threads = b.filter(pl.col("appl") == 1)["thread"].n_unique()
    assert b["task"].n_unique() == 1 and threads > 1
    res = analyse(b, c, machine=TEST_MACHINE, discover=False)
    title = plot_timeline(res.archetypes, None, TEST_MACHINE).figure.axes[0].get_title()
    assert f"of 1 task x {threads} threads," in title


def test_ridgeline_legend_beside_the_plane():
    b, c = two_rank_program()
    res = analyse(b, c, machine=TEST_MACHINE, discover=False)
    pm = _phase_archetypes(res)
    fig = plot_ridgeline(pm, TEST_MACHINE, ranks_per_socket=2).figure
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # never over the regions' labels or the points
    # each archetype's marker at one size in the legend, not its first phase's (which covered the labels)
    from matplotlib.collections import PathCollection

    markers = [h for h in ax.get_legend().legend_handles if isinstance(h, PathCollection)]
    assert markers and {tuple(h.get_sizes()) for h in markers} == {(LEGEND_MARKER_AREA,)}
    figure_png(fig)


@pytest.fixture(scope="module")
def mixed_wh(tmp_path_factory):
    """One experiment holding two applications (prime and jacobi), one with a single application (LULESH), and a
    regression alert on prime."""
    from synthtrace.models.regression import REGRESSION_SCHEMA
    from synthtrace.models.site_signals import site_history
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.alert_store import write_alerts
    from testing.traces import JACOBI

    wh = Warehouse(tmp_path_factory.mktemp("mixed") / "wh")
    ingest_trace(wh, PRIME, experiment="mixed", app="prime")
    ingest_trace(wh, JACOBI, experiment="mixed", app="jacobi")
    ingest_trace(wh, LULESH_A, experiment="lulesh", app="lulesh")
    site = site_history(wh, "prime").row(0, named=True)
    alert = {k: None for k in REGRESSION_SCHEMA} | {
        "app": "prime", "config": site["config"], "call_site": site["call_site"], "changed_at": site["started_at"],
        "point": site["point"], "magnitude": 0.3, "score": 9.0,
        "signals": [{"name": "ipc", "before": 1.5, "after": 1.1, "z": -7.0}], "explained_by": ["ipc"]}
    write_alerts(wh, "prime", pl.DataFrame([alert], schema=REGRESSION_SCHEMA))
    return wh.root


def test_report_lists_each_experiment_once(tmp_path, mixed_wh, run_cli):
    """An experiment of several applications gets one section (it got one per application); alerts' signals are
    readable and each alert has its plot over the nights; the machine profile is named."""
    from synthtrace.pipelines.report import latest_per_app
    from synthtrace.warehouse.layout import Warehouse

    assert sorted(latest_per_app(Warehouse(mixed_wh))) == ["lulesh", "mixed"]
    out = tmp_path / "r.html"
    code, _, err = run_cli("report", "--out", out, "--warehouse", mixed_wh, "--machine", "generic")
    assert code == 0, err
    text = out.read_text()
    assert text.count(">Experiment mixed</h2>") == 1 and text.count(">Experiment lulesh</h2>") == 1
    assert "ipc 1.5 → 1.1 (z -7.0)" in text and "{'name'" not in text

    assert "Machine profile <b>generic dual-socket AVX2 node</b> (preset generic)" in text
    assert "alt='history of prime at" in text
    assert len(re.findall(r"data:image/png;base64,", text)) == 3 * 2 + 1  # 3 plots per experiment + 1 alert


@pytest.mark.slow
@pytest.mark.real_traces
def test_report_reads_the_machine_toml_beside_the_traces(tmp_path, run_cli):
    """The roofs of an experiment come from the ``machine.toml`` beside its traces, as in its analysis; --machine
    overrides it."""
    import synthtrace.tracelib
    from testing.traces import copy_trace

    preset = Path(synthtrace.tracelib.__file__).parent / "domain" / "machines" / "generic.toml"  # after the split
    copy_trace(PRIME, tmp_path / "prime")
    (tmp_path / "prime" / "machine.toml").write_text(
        preset.read_text().replace('name = "generic dual-socket AVX2 node"', 'name = "lab node [rack 7]"'))
    wh, out = tmp_path / "wh", tmp_path / "r.html"
    assert run_cli("ingest", tmp_path / "prime", "-w", wh)[0] == 0
    code, _, err = run_cli("report", "--out", out, "-w", wh)
    assert code == 0, err
    assert "Machine profile <b>lab node [rack 7]</b>" in out.read_text()
    code, _, err = run_cli("report", "--out", out, "-w", wh, "--machine", "a64fx")
    assert code == 0, err
    text = out.read_text()
    assert "lab node" not in text and "(preset a64fx)" in text


@pytest.mark.slow
def test_report_redraws_only_the_experiments_that_changed(tmp_path, mixed_wh, run_cli, monkeypatch):
    """Each experiment's section is drawn once per state of the experiment (runs, merge, analysis, machine):
    a second report reuses them; a change to one experiment redraws that one only."""
    import shutil

    from synthtrace.pipelines import report as report_mod
    from synthtrace.warehouse.layout import Warehouse

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    drawn: list[str] = []
    real = report_mod.experiment_section

    def counted(w, name, *args, **kwargs):
        drawn.append(name)
        return real(w, name, *args, **kwargs)

    def without_time(page: Path) -> str:
        return re.sub(r"generated [^<]*UTC", "", page.read_text())

    monkeypatch.setattr(report_mod, "experiment_section", counted)
    out1, out2, out3 = tmp_path / "1.html", tmp_path / "2.html", tmp_path / "3.html"
    assert run_cli("report", "--out", out1, "-w", wh)[0] == 0
    assert sorted(drawn) == ["lulesh", "mixed"]
    assert run_cli("report", "--out", out2, "-w", wh)[0] == 0
    assert sorted(drawn) == ["lulesh", "mixed"]  # nothing redrawn
    assert without_time(out1) == without_time(out2)
    changed = Warehouse(wh).experiment_dir("lulesh")  # the experiment's data changed (e.g. a new merge)
    changed.mkdir(parents=True, exist_ok=True)
    (changed / "note.json").write_text("{}")
    assert run_cli("report", "--out", out3, "-w", wh)[0] == 0
    assert sorted(drawn) == ["lulesh", "lulesh", "mixed"]
    assert run_cli("report", "--out", out3, "-w", wh, "--machine", "a64fx")[0] == 0  # another machine: redrawn
    assert sorted(drawn) == ["lulesh", "lulesh", "lulesh", "mixed", "mixed"]


def test_a_report_on_a_full_disk_leaves_nothing_behind(tmp_path, mixed_wh, run_cli, monkeypatch):
    """[helper edges] issue 23: `report --out new/sub/r.html` on a full disk said so but left the folders it made
    for the report (new/sub) and, in the warehouse, the empty cache folders of the sections it could not keep. Now
    one line naming the output, and nothing the command made stays."""
    import errno
    import os
    import shutil

    from synthtrace.pipelines import report as report_mod

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    shutil.rmtree(wh / ".cache", ignore_errors=True)
    real = report_mod.write_atomically

    def fill_the_disk(part: Path) -> None:  # half a file, then a write() that names no file
        part.write_text("<!DOCTYPE html><html>")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(report_mod, "write_atomically", lambda path, write: real(path, fill_the_disk))
    out = tmp_path / "r.html"  # an output's folder is never made (attack 10): none to leave behind either
    code, stdout, err = run_cli("report", "--out", out, "-w", wh)
    assert code == 2 and stdout == "", err
    assert err.splitlines() == [f"error: --out {out}: cannot write it (No space left on device)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]
    assert not (wh / ".cache").exists()  # no empty cache folder of the sections not kept


@pytest.mark.parametrize("full", ["warehouse", "output"])
def test_a_full_disk_in_a_report_names_what_it_could_not_write(tmp_path, mixed_wh, run_cli, monkeypatch, full):
    """Issue 23 (session 15's note): `report --out r.html` on a full warehouse disk said `--out` could not be written
    although the write that failed was the warehouse's (the analysis' parts an experiment not analysed yet keeps in
    its scratch). One line naming what failed, the warehouse or the output, and nothing half-written in either."""
    import errno
    import os
    import shutil

    from synthtrace.pipelines import report as report_mod
    from synthtrace.warehouse import analysis_store

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    shutil.rmtree(wh / ".cache", ignore_errors=True)
    stored_before = sorted(p.relative_to(wh) for p in wh.rglob("*") if ".staging" not in p.parts)

    def no_room(*_args, **_kwargs):  # a write() that fills the disk names no file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if full == "warehouse":
        add = analysis_store.AnalysisParts.add
        monkeypatch.setattr(analysis_store.AnalysisParts, "add",
                            lambda self, name, df: no_room() if self.folder is not None else add(self, name, df))
    else:
        real = report_mod.write_atomically
        monkeypatch.setattr(report_mod, "write_atomically", lambda path, write: real(path, no_room))
    out = tmp_path / "r.html"
    code, stdout, err = run_cli("report", "--out", out, "-w", wh)
    assert code == 2 and stdout == "", err
    (line,) = err.splitlines()
    if full == "warehouse":  # before: "error: --out WH/experiments/mixed: cannot write it (No space left ...)"
        assert line.startswith(f"error: warehouse {wh}: cannot store the report's analysis in it ({wh}/"), line
        assert line.endswith(f"No space left on device); no report was written to {out}") and "--out" not in line
    else:
        assert line == f"error: --out {out}: cannot write it (No space left on device)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]
    assert sorted(p.relative_to(wh) for p in wh.rglob("*") if ".staging" not in p.parts) == stored_before
    assert not any(p.is_file() for p in (wh / ".staging").rglob("*"))


# ---------------------------------------------------------------------------------------------- issue 24 item 5
def test_timeline_labels_time_under_the_bars():
    """The bars themselves carry time labels in readable units (they had none; only the roof panel did)."""
    b, c = two_rank_program()
    res = analyse(b, c, machine=TEST_MACHINE, discover=False)
    tl = plot_timeline(res.archetypes, _phase_archetypes(res), TEST_MACHINE, ranks_per_socket=2)
    tl.figure.canvas.draw()
    labels = [t.get_text() for t in tl.figure.axes[0].get_xticklabels() if t.get_visible() and t.get_text()]
    assert "10 ms" in labels and "time" in tl.figure.axes[0].get_xlabel()


def _report(run_cli, wh: Path, out: Path, *extra) -> str:
    code, _, err = run_cli("report", "--out", out, "-w", wh, *extra)
    assert code == 0, err
    return out.read_text()


@pytest.fixture
def bad_merge_wh(tmp_path, mixed_wh) -> Path:
    """mixed_wh with a merge of lulesh whose quality says one transferred counter is badly aligned."""
    import shutil

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    (wh / "experiments" / "lulesh").mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"counter": ["PAPI_TOT_INS", "PAPI_L3_TCM"], "verdict": ["ok", "bad"],
                  "verdict_reason": [None, "only 41% of bursts >= 10 us matched"],
                  "source_run": ["a", "b"], "coverage": [1.0, 0.41]}).write_parquet(
        wh / "experiments" / "lulesh" / "merge_quality.parquet")
    return wh


def test_report_shows_the_merge_verdict_beside_the_plots(tmp_path, bad_merge_wh, run_cli):
    text = _report(run_cli, bad_merge_wh, tmp_path / "r.html", "--machine", "generic")
    section = text[text.index(">Experiment lulesh</h2>"):]
    section = section[:section.index("<h2", 1)] if "<h2" in section[1:] else section
    assert "merge verdict <b>bad</b>: only 41% of bursts &gt;= 10 us matched" in section  # the banner
    before_plots = section[:section.index("data:image/png")]
    assert "Merge verdict of these plots' data: <b>bad</b>" in before_plots
    assert "verdict_reason" in section  # the merge quality table says why, per counter
    top = text[:text.index("<h2")]
    assert "lulesh: merge verdict bad (only 41% of bursts &gt;= 10 us matched)" in top  # listed at the top


def test_report_names_its_profile_and_warns_when_bursts_exceed_its_roofs(tmp_path, mixed_wh, run_cli):
    """A profile whose roofs the measured bursts exceed is not the machine's: the report says so."""
    import synthtrace.tracelib

    generic = Path(synthtrace.tracelib.__file__).parent / "domain" / "machines" / "generic.toml"
    slow = tmp_path / "slow.toml"
    named = generic.read_text().replace('name = "generic dual-socket AVX2 node"', 'name = "a 50 MHz node"')
    slow.write_text(re.sub(r"frequency_ghz = [0-9.]+", "frequency_ghz = 0.05", named))
    text = _report(run_cli, mixed_wh, tmp_path / "r.html", "--machine", slow)
    top = text[:text.index("<h2")]
    assert "Machine profile: <b>a 50 MHz node</b>" in top
    assert "the profile is probably not this machine: --machine" in text
    assert "the profile is probably not this machine" in top and "of burst time above the instruction roof" in top


def test_report_has_a_table_of_contents_and_honest_counter_advice(tmp_path, mixed_wh, run_cli, monkeypatch):
    """Contents link to every section; 'record these counters' names only counters no run recorded; OpenMP bursts
    closed by no MPI call are not all '(end of thread)'; a part appended to EXPERIMENT_PARTS is drawn and listed."""
    import shutil

    from synthtrace.pipelines import report as report_mod
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.runs import runs_table

    monkeypatch.setattr(report_mod, "EXPERIMENT_PARTS", [
        lambda wh, name, machine: report_mod.heading(3, f"Extra of {name}", f"extra-{name}") + "<p>extra</p>"])
    # a copy without the section cache: another test's report of the shared warehouse cached its sections without
    # the extra part (the cache key is the stored state, not the code drawing it), which made this test flaky
    wh = tmp_path / "wh"
    shutil.copytree(mixed_wh, wh, symlinks=True, ignore=shutil.ignore_patterns(".cache"))
    text = _report(run_cli, wh, tmp_path / "r.html", "--machine", "generic")
    toc = text[text.index("<nav class='toc'>"):text.index("</nav>")]
    anchors = re.findall(r"href='#([^']+)'", toc)
    assert {"alerts", "experiments", "experiment-mixed", "experiment-lulesh", "extra-mixed"} <= set(anchors)
    assert all(f"id='{a}'" in text for a in anchors)
    recorded = runs_table(Warehouse(wh)).filter(pl.col("experiment") == "mixed")["counters"].explode().to_list()
    mixed = text[text.index(">Experiment mixed</h2>"):]
    mixed = mixed[:mixed.index(">Experiment lulesh</h2>")] if ">Experiment lulesh</h2>" in mixed else mixed
    if "counter that would decide" in mixed:
        table = mixed[mixed.index("counter that would decide"):]
        table = table[:table.index("</table>")]
        asked = re.findall(r"<td class='l'>([^<]+)</td>", table)
        assert asked and not [c for c in asked if c.split(" ")[0] in recorded], asked
    consumers = mixed[mixed.index(">Top time consumers"):]
    consumers = consumers[:consumers.index("</table>")]
    closed_by = re.findall(r"<tr><td class='l'>([^<]+)</td>", consumers)
    assert closed_by and set(closed_by) != {"(end of thread)"}, closed_by
    assert "(no MPI call)" in closed_by  # jacobi's OpenMP bursts


@pytest.mark.slow
def test_report_loads_in_headless_chromium_without_errors_or_requests(tmp_path, bad_merge_wh, run_cli):
    """The report opened as a reader opens it: no console error, no request beyond the file itself and its
    embedded images, every image decoded, every contents link lands on a heading."""
    from testing.browser import chromium, load_page

    if chromium() is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    page = tmp_path / "r.html"
    _report(run_cli, bad_merge_wh, page, "--machine", "generic")
    probe = ("{images: [...document.images].map(i => i.complete && i.naturalWidth > 0), "
             "links: [...document.querySelectorAll('nav.toc a')].map(a => "
             "!!document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)))), "
             "banners: document.querySelectorAll('div.warn').length}")
    load = load_page(page, probe)
    assert load.errors == [] and load.failed == [], (load.errors, load.failed)
    assert load.requests[0] == page.resolve().as_uri()
    assert all(u.startswith("data:image/png;base64,") for u in load.requests[1:]), load.requests
    assert load.facts["images"] and all(load.facts["images"]), load.facts
    assert load.facts["links"] and all(load.facts["links"]) and load.facts["banners"] >= 2, load.facts


def test_a_section_reads_of_the_stored_archetypes_what_it_draws(tmp_path, mixed_wh, run_cli, monkeypatch):
    """An experiment's section reads the stored archetypes without the evidence texts, alternatives and clusters
    it never shows (60 % of the frame: a report on a 1 GB trace peaked at 6.1 GB, attack 7 A21), and draws the same
    section as from the whole frame."""
    import shutil

    from synthtrace.pipelines import report as report_mod
    from synthtrace.warehouse.layout import Warehouse

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    assert run_cli("archetypes", "lulesh", "-w", wh)[0] == 0
    read: dict[str, list[str]] = {}
    real = report_mod._experiment_html

    def spied(w, name, machine, arch, *args, **kwargs):
        read["archetypes"] = arch.collect_schema().names()
        return real(w, name, machine, arch, *args, **kwargs)

    monkeypatch.setattr(report_mod, "_experiment_html", spied)
    w = Warehouse(wh)
    machine = w.experiment("lulesh").machine()
    section, _ = report_mod.experiment_section(w, "lulesh", machine)
    assert "archetype" in read["archetypes"]
    assert not {"evidence", "could_also_be", "cluster", "cluster_archetype"} & set(read["archetypes"])
    monkeypatch.setattr(report_mod, "UNREAD_ARCHETYPE_COLUMNS", ())
    assert report_mod.experiment_section(w, "lulesh", machine)[0] == section
    assert "evidence" in read["archetypes"]


def test_a_long_timeline_is_drawn_per_pixel_keeping_each_ranks_time_per_archetype():
    """Issue 23: beyond ``max_units`` bursts and calls the timeline draws them per pixel (a unit as long as a column
    itself, the shorter ones summed per row, column and archetype) instead of one bar each: each rank's time per
    archetype and the units counted stay those of the bar-per-unit drawing."""
    from synthtrace.pipelines.report import timeline_bars

    arch = analyse(*two_rank_program(), machine=TEST_MACHINE, discover=False).archetypes
    ranks = arch.filter(pl.col("unit") == "burst").select("task", "thread").unique().sort("task", "thread")
    ranks = ranks.with_row_index("_y")
    t0 = arch["start_ns"].min()
    every, whole_drawn = timeline_bars(arch, ranks, t0)
    pixels, per_pixel = timeline_bars(arch, ranks, t0, max_units=3, bins=2)
    assert per_pixel and not whole_drawn and pixels.height < every.height
    key = ["unit", "_y", "_lab", "_insuff"]
    totals = [f.group_by(key).agg(pl.col("_len").sum(), pl.col("_n").sum()).sort(key, nulls_last=True)
              for f in (every, pixels)]
    assert_frame_equal(totals[0], totals[1], check_exact=False, rel_tol=1e-9)
    assert (pixels["_x0"] >= 0).all()


def test_a_timeline_pixel_whose_units_sum_past_int64_is_drawn_as_long_as_they_are():
    """A column's short units were summed in Int64 (report.py's timeline bins): five bursts of 2^61 ns in one
    (row, column, archetype) wrapped to a negative length, drawn backwards. Summed as floats (sums.float_sum, as
    the rest of the code sums times), the bar is as long as the five."""
    from synthtrace.pipelines.report import timeline_bars

    short, long = 2**61, 3 * 2**61  # a column (bins=1) is as wide as the long burst: the five others are shorter
    arch = pl.DataFrame({"unit": ["burst"] * 6, "task": [1] * 6, "thread": [1] * 6, "start_ns": [0] * 6,
                         "duration_ns": [long] + [short] * 5, "archetype": ["compute_bound"] * 6,
                         "provisional": [None] * 6}, schema_overrides={"provisional": pl.String})
    ranks = pl.DataFrame({"task": [1], "thread": [1], "_y": [0]})
    bars, per_pixel = timeline_bars(arch, ranks, 0, max_units=2, bins=1)
    assert per_pixel and bars.height == 2 and (bars["_len"] >= 0).all(), bars
    summed = bars.filter(pl.col("_n") == 5)
    assert summed.height == 1 and summed["_len"].item() == pytest.approx(5 * short * 1e-9, rel=1e-12), bars


def test_top_consumers_joined_a_window_at_a_time_are_the_whole_joins(tmp_path, mixed_wh, run_cli, monkeypatch):
    """Issue 23: the top consumers join the stored bursts with their labels a window at a time (the whole join took
    0.9 GB for a 2 GB trace); with windows of 100 bursts the table is the one-window table."""
    import shutil

    from synthtrace.pipelines import report as report_mod

    wh = Path(shutil.copytree(mixed_wh, tmp_path / "wh"))
    assert run_cli("archetypes", "lulesh", "-w", wh, "--no-discover")[0] == 0
    folder = wh / "experiments" / "lulesh"
    bm, arch = pl.scan_parquet(folder / "burst_metrics.parquet"), pl.scan_parquet(folder / "archetypes.parquet")
    whole = report_mod._top_consumers(bm, arch)
    monkeypatch.setattr(report_mod, "TOP_CONSUMER_WINDOW", 100)
    assert pl.scan_parquet(folder / "burst_metrics.parquet").select(pl.len()).collect().item() > 500
    assert_frame_equal(report_mod._top_consumers(bm, arch), whole, check_exact=False, rel_tol=1e-12)


def test_a_sections_key_follows_its_files_at_any_depth_and_enters_no_linked_folder(tmp_path, mixed_wh):
    """:func:`section_key` lists the experiment folder's files with the project's walker (``files_under``,
    tidy19): a file three folders down that changes size changes the key; a link to a folder elsewhere is not
    entered (the files there are not the experiment's); the same state gives the same key."""
    import shutil

    from synthtrace.pipelines.report import section_key
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(Path(shutil.copytree(mixed_wh, tmp_path / "wh", symlinks=True)))
    key = lambda: section_key(wh, "lulesh", TEST_MACHINE, None)  # noqa: E731
    wh.experiment_dir("lulesh").mkdir(parents=True, exist_ok=True)
    (wh.experiment_dir("lulesh") / "note.json").write_text("{}")
    before = key()
    assert key() == before
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "big.parquet").write_bytes(b"x" * 1000)
    (wh.experiment_dir("lulesh") / "linked").symlink_to(outside, target_is_directory=True)
    assert key() == before
    deep = wh.experiment_dir("lulesh") / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "part.parquet").write_bytes(b"1")
    one = key()
    assert one != before
    (deep / "part.parquet").write_bytes(b"12")
    assert key() not in (before, one)
