"""``synthtrace pop`` (issue 25 items 1, 2, 6): the POP table per application on real traces, the pop_metrics and
pop_scaling views, a scaling series, and what a user is told about input that cannot give every factor."""
from __future__ import annotations

import json

import polars as pl
import pytest

from testing.traces import LULESH_A, LULESH_B, PRIME, TRACES

pytestmark = pytest.mark.real_traces
PINGPONG = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"


def _sql(run_cli, wh, query: str) -> pl.DataFrame:
    code, out, err = run_cli("sql", query, "-w", wh, "--format", "json")
    assert code == 0, err
    return pl.DataFrame(json.loads(out))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    from synthtrace.pipelines.cli import main

    wh = tmp_path_factory.mktemp("pop") / "wh"
    assert main(["ingest", str(LULESH_A), str(LULESH_B), "--experiment", "lulesh-8r", "--app", "lulesh",
                 "-w", str(wh)]) == 0
    assert main(["ingest", str(PRIME), "--experiment", "prime-16r", "--app", "prime", "-w", str(wh)]) == 0
    return wh


def test_pop_prints_each_application_and_stores_the_views(run_cli, warehouse):
    code, out, err = run_cli("pop", "-w", warehouse)
    assert code == 0, err
    assert "POP efficiency of lulesh" in out and "POP efficiency of prime" in out
    for row in ("Parallel efficiency", "Load balance", "Serialization efficiency", "Transfer efficiency",
                "Computation scalability", "Speedup", "Average IPC"):
        assert row in out
    # one scale per application: the user is told the scalability rows need two
    assert "lulesh: every run is at one scale (8 ranks x 1 threads)" in out
    # each run's column is headed by its name over its ranks x threads, two lines (attack 19: a literal "\n" since
    # the headers' control characters were escaped)
    assert "\\n" not in out and "8 x 1" in out and "16 x 1" in out
    m = _sql(run_cli, warehouse, "SELECT * FROM pop_metrics ORDER BY run_name")
    assert m["run_name"].to_list() == sorted(["lulesh_4+4_with_uncores_sockets1+2.chop_5it",
                                             "lulesh_7+1_with_uncores_sockets1+2.chop8", "prime_v0"])
    assert m["n_ranks"].to_list() == [8, 8, 16]
    runs = _sql(run_cli, warehouse, "SELECT run_id, duration_ns FROM runs")
    m = m.join(runs, on="run_id")
    assert (m["runtime_ns"] == m["duration_ns"]).all()  # runtime = the trace's span
    assert ((m["parallel_efficiency"] - m["load_balance"] * m["communication_efficiency"]).abs() < 1e-12).all()
    assert ((m["serialization_efficiency"] * m["transfer_efficiency"] - m["communication_efficiency"]).abs()
            < 1e-12).all()
    s = _sql(run_cli, warehouse, "SELECT * FROM pop_scaling")
    assert s.height == 3 and set(s["scaling"]) == {"strong"}


def test_a_strong_scaling_series_is_referred_to_its_smallest_run(run_cli, tmp_path):
    wh = tmp_path / "wh"
    for ranks in (4, 8):
        code, _, err = run_cli("simulate", tmp_path / f"r{ranks}", "--pattern", "halo", "--ranks", ranks, "--runs", 1,
                               "--iterations", 6, "--app", "halo")
        assert code == 0, err
        code, _, err = run_cli("ingest", tmp_path / f"r{ranks}" / "halo", "--experiment", f"halo-{ranks}r",
                               "--app", "halo", "-w", wh)
        assert code == 0, err
    code, out, err = run_cli("pop", "halo", "-w", wh)
    assert code == 0, err
    assert "every run is at one scale" not in out
    s = _sql(run_cli, wh, "SELECT s.*, m.runtime_ns, m.useful_sum_ns, m.parallel_efficiency FROM pop_scaling s "
                          "JOIN pop_metrics m USING (run_id) ORDER BY s.n_ranks")
    small, big = s.row(0, named=True), s.row(1, named=True)
    assert big["reference_run_id"] == small["run_id"] == small["reference_run_id"]
    assert big["speedup"] == pytest.approx(small["runtime_ns"] / big["runtime_ns"])
    assert big["computation_scalability"] == pytest.approx(small["useful_sum_ns"] / big["useful_sum_ns"])
    assert big["global_efficiency"] == pytest.approx(big["parallel_efficiency"] * big["computation_scalability"])
    code, out, err = run_cli("pop", "halo", "-w", wh, "--scaling", "weak")
    assert code == 0 and "weak scaling" in out
    weak = _sql(run_cli, wh, "SELECT speedup FROM pop_scaling ORDER BY n_ranks")["speedup"].to_list()
    assert weak[1] == pytest.approx(big["speedup"] * 2)
    from synthtrace.pipelines.report_pop import pop_section
    from synthtrace.warehouse import Warehouse

    assert "<img alt='POP scaling of halo'" in pop_section(Warehouse(wh))  # two scales: the scaling plot


def test_a_what_if_network_adds_a_predicted_runtime(run_cli, warehouse):
    code, out, err = run_cli("pop", "lulesh", "-w", warehouse, "--network", "50:0.1")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "Runtime on 50 us, 0.1 GB/s" in ln)
    ideal = next(ln for ln in out.splitlines() if "Runtime, ideal network" in ln)
    # a slower network than the ideal one: every run takes longer
    assert all(float(a) > float(b) for a, b in zip(line.split("│")[2:-1], ideal.split("│")[2:-1]))


def test_a_run_ingested_before_messages_were_kept_is_replayed_from_its_trace(run_cli, tmp_path):
    wh = tmp_path / "wh"
    assert run_cli("ingest", LULESH_B, "-w", wh)[0] == 0
    assert run_cli("pop", "-w", wh)[0] == 0
    before = _sql(run_cli, wh, "SELECT ideal_runtime_ns FROM pop_metrics").item()
    from synthtrace.warehouse.checksums import write_manifest

    (msg,) = wh.glob("runs/*/messages.parquet")
    msg.unlink()
    for f in wh.glob("experiments/*/pop_metrics.parquet"):
        f.unlink()
    for folder in {msg.parent, *wh.glob("experiments/*")}:  # as such an ingest committed them: nothing missing
        write_manifest(folder, folder=folder.name)
    assert run_cli("pop", "-w", wh)[0] == 0
    assert _sql(run_cli, wh, "SELECT ideal_runtime_ns FROM pop_metrics").item() == before


def test_a_run_without_counters_says_which_columns_are_empty_and_why(run_cli, tmp_path):
    wh = tmp_path / "wh"
    assert run_cli("ingest", PINGPONG, "--app", "pingpong", "-w", wh)[0] == 0
    code, out, err = run_cli("pop", "-w", wh)
    assert code == 0, err
    assert "pingpong: empty useful_instructions, useful_cycles, ipc, frequency_ghz" in out
    assert "record no instructions (PAPI_TOT_INS) or cycles (PAPI_TOT_CYC)" in out
    m = _sql(run_cli, wh, "SELECT load_balance, parallel_efficiency, ipc FROM pop_metrics").row(0, named=True)
    assert m["load_balance"] is not None and m["parallel_efficiency"] is not None and m["ipc"] is None


@pytest.mark.parametrize("args, message", [
    (("pop", "nosuchapp"), "'nosuchapp': neither an application nor an experiment"),
    (("pop", "--scaling", "linear"), "--scaling 'linear': expected strong or weak"),
    (("pop", "--network", "fast"), "expected LATENCY_US:BANDWIDTH_GBS"),
    (("pop", "--network", "1:0"), "bandwidth 1e-06 to 1e+06 GB/s, got 1.0 us, 0.0 GB/s"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, warehouse, args, message):
    code, out, err = run_cli(*args, "-w", warehouse)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_the_report_section_colours_each_efficiency_on_pops_scale(run_cli, tmp_path):
    import re

    from synthtrace.pipelines.report_pop import pop_section
    from synthtrace.warehouse import Warehouse

    wh = tmp_path / "wh"
    assert run_cli("ingest", PRIME, "--app", "prime", "-w", wh)[0] == 0
    assert "run <code>synthtrace pop</code>" in pop_section(Warehouse(wh))
    assert run_cli("pop", "-w", wh)[0] == 0
    html = pop_section(Warehouse(wh))
    m = _sql(run_cli, wh, "SELECT load_balance, communication_efficiency FROM pop_metrics").row(0, named=True)
    colour = {"#c6efce": lambda v: v >= 0.8, "#ffeb9c": lambda v: 0.6 <= v < 0.8, "#ffc7ce": lambda v: v < 0.6}
    for label, col in (("Load balance", "load_balance"), ("Communication efficiency", "communication_efficiency")):
        cell = re.search(rf">{label}</td><td style='background:(#\w+)'>([\d.]+)%", html)
        assert cell and float(cell.group(2)) == pytest.approx(m[col] * 100, abs=0.006)
        assert colour[cell.group(1)](m[col]), (label, m[col], cell.group(1))
    assert "need runs at two scales" in html and "<img" not in html


def test_the_pop_views_before_pop_ran_say_how_to_fill_them(run_cli, tmp_path):
    wh = tmp_path / "wh"
    assert run_cli("ingest", PRIME, "-w", wh)[0] == 0
    for view in ("pop_metrics", "pop_scaling"):
        code, out, err = run_cli("sql", f"SELECT * FROM {view}", "-w", wh)
        assert code == 2 and "run `synthtrace pop`" in err, err


def test_synthtrace_report_has_the_pop_section_in_its_contents(run_cli, warehouse, tmp_path):
    assert run_cli("pop", "-w", warehouse)[0] == 0
    out = tmp_path / "report.html"
    code, _, err = run_cli("report", "-w", warehouse, "--out", out)
    assert code == 0, err
    html = out.read_text()
    assert "id='pop'>POP efficiency</h2>" in html and "href='#pop'" in html  # listed in the table of contents
    assert "id='pop-lulesh'" in html and "id='pop-prime'" in html  # one table per application


@pytest.mark.parametrize("app", ["job_$^$", "a$_$b", "a$\\frac{$"])
def test_a_name_with_dollars_is_drawn_as_text(app):
    """Trace files are often named after unexpanded shell variables: matplotlib read `$...$` in the plot's title as
    TeX, and `job_$^$` ended the report (every night) in a ParseSyntaxException traceback (attack 7 A4)."""
    from synthtrace.pipelines.report_pop import PLOTTED, plot_scaling

    runs = pl.DataFrame({"n_ranks": [1, 16], "n_threads": [1, 1], "speedup": [1.0, 12.0],
                         **{col: [1.0, 0.8] for col in PLOTTED}})
    png = plot_scaling(runs, app)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_pop_reads_the_columns_of_the_mpi_calls_it_needs(run_cli, warehouse):
    """POP reads of each run's MPI calls the columns its figures and replay use, not the counters measured inside
    the calls, their call sites, peers and CPUs (half of the calls' memory: pop on a 1 GB trace peaked at 2.3 GB,
    1.6 GB so, attack 7 A21); the table is the same (the LULESH and prime figures above)."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.pop_store import run_pop_inputs
    from synthtrace.warehouse.runs import runs_table

    wh = Warehouse(warehouse)
    for run_id in runs_table(wh)["run_id"].to_list():
        calls = run_pop_inputs(wh, run_id).calls
        assert calls is not None and calls.select(pl.len()).collect().item()
        names = calls.collect_schema().names()
        assert not {"call_site", "peer", "cpu", "PAPI_TOT_INS", "PAPI_TOT_CYC"} & set(names), names
