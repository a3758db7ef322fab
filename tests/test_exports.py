"""`synthtrace export`: Perfetto JSON structure, a Pipit-style table pandas can load, plain CSV."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces


@pytest.fixture
def wh(tmp_path, run_cli):
    copy_trace(PRIME, tmp_path / "prime-exp")
    w = tmp_path / "wh"
    assert run_cli("ingest", tmp_path / "prime-exp", "-w", w)[0] == 0
    return w


def test_perfetto_json_structure(tmp_path, wh, run_cli):
    out = tmp_path / "t.json"
    code, _, err = run_cli("export", "prime-exp", "--format", "perfetto", "--output", out, "-w", wh)
    assert code == 0, err
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    bursts = [e for e in events if e["ph"] == "X" and e["cat"] == "burst"]
    mpi = [e for e in events if e["ph"] == "X" and e["cat"] == "mpi"]
    assert len(meta) == 16  # one process (track group) per rank
    assert len(bursts) == 704 and len(mpi) == 672
    for e in bursts + mpi:
        assert {"name", "pid", "tid", "ts", "dur", "args"} <= e.keys() and e["dur"] >= 0
    first = min((e for e in bursts if e["pid"] == 100001), key=lambda e: e["ts"])
    assert (
        first["ts"] == pytest.approx(15144.257)
        and "PAPI_TOT_INS" in next(e for e in bursts if e["args"].get("mpi_call") == "MPI_Init")["args"]
    )


def test_perfetto_json_is_written_in_batches_that_make_one_trace(tmp_path, wh, run_cli, monkeypatch):
    """The JSON of a trace is several times its size: it is written a batch of events at a time (a 307 MB trace's
    export held three copies of it and peaked at 2.2 GB, attack 7 A15), and batches of 7 events make the same
    trace as one batch."""
    from synthtrace.tracelib.formats import exports

    whole, small = tmp_path / "whole.json", tmp_path / "small.json"
    assert run_cli("export", "prime-exp", "-o", whole, "-w", wh)[0] == 0
    monkeypatch.setattr(exports, "PERFETTO_BATCH_ROWS", 7)
    assert run_cli("export", "prime-exp", "-o", small, "-w", wh)[0] == 0
    assert json.loads(small.read_bytes()) == json.loads(whole.read_bytes())
    assert small.read_bytes() == whole.read_bytes()


def test_pipit_table_loads_with_pandas(tmp_path, wh, run_cli):
    pd = pytest.importorskip("pandas")
    out = tmp_path / "events.csv"
    assert run_cli("export", "prime-exp", "-f", "pipit", "-o", out, "-w", wh)[0] == 0
    df = pd.read_csv(out)
    assert list(df.columns[:6]) == ["Timestamp (ns)", "Event Type", "Name", "Thread", "Process", "Attributes"]
    assert set(df["Event Type"]) == {"Enter", "Leave"}  # prime's calls are collectives: no message rows
    assert (df["Event Type"] == "Enter").sum() == (df["Event Type"] == "Leave").sum() == 704 + 672
    assert df["Timestamp (ns)"].is_monotonic_increasing
    from synthtrace.warehouse.sql import query

    assert span_counts(pl.from_pandas(df), "Computation", "PAPI_TOT_INS").sum() == query(
        Warehouse(wh), "SELECT sum(PAPI_TOT_INS) FROM bursts").column(0)[0].as_py()


def span_counts(events: pl.DataFrame, name: str, metric: str) -> pl.Series:
    """The ``metric`` of each span ``name`` of a Pipit table: its Leave's reading less its Enter's (a thread's bursts
    and MPI calls follow each other, so a Leave's Enter is the span row before it on its thread)."""
    spans = events.filter(pl.col("Event Type").is_in(["Enter", "Leave"]))
    inc = spans.with_columns((pl.col(metric) - pl.col(metric).shift(1).over("Process", "Thread")).alias("_inc"))
    return inc.filter((pl.col("Name") == name) & (pl.col("Event Type") == "Leave"))["_inc"]


def test_csv_and_unknown_experiment(tmp_path, wh, run_cli):
    out = tmp_path / "b.csv"
    assert run_cli("export", "prime-exp", "-f", "csv", "-o", out, "-w", wh)[0] == 0
    assert pl.read_csv(out).height == 704
    code, _, err = run_cli("export", "nope", "-f", "csv", "-o", out, "-w", wh)
    assert code == 2 and "no experiment 'nope'" in err


# ------------------------------------------------------------------ a merged experiment (the LULESH pair)
@pytest.fixture(scope="module")
def merged_wh(merged_lulesh):
    """The two LULESH runs ingested as one experiment and merged, through the CLI."""
    return merged_lulesh


def _reference_run(wh) -> str:
    from synthtrace.warehouse.sql import query

    return query(Warehouse(wh), "SELECT DISTINCT run_id FROM merged_bursts").column(0)[0].as_py()


def test_merged_experiment_perfetto(tmp_path, merged_wh, run_cli):
    """A merged experiment exports (it failed on `reference_run_id`), with the reference run's MPI calls, in the
    trace-event structure Perfetto's JSON importer needs: complete events with ph/ts/dur/pid/tid in µs, slices on
    one thread that nest (never overlap partly), a process_name per rank."""
    from synthtrace.warehouse.sql import query

    out = tmp_path / "lulesh.json"
    code, _, err = run_cli("export", "lulesh-8r", "--format", "perfetto", "--output", out, "-w", merged_wh)
    assert code == 0, err
    trace = json.loads(out.read_text())
    assert trace["displayTimeUnit"] in ("ms", "ns")
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    for e in slices:
        assert (
            isinstance(e["ts"], (int, float))
            and e["dur"] >= 0
            and isinstance(e["pid"], int)
            and isinstance(e["tid"], int)
        )
    ref = _reference_run(merged_wh)
    n_bursts, n_calls, t0_ns = (
        query(
            Warehouse(merged_wh),
            f"SELECT (SELECT count(*) FROM merged_bursts), count(*), min(start_ns) "
            f"FROM mpi_calls WHERE run_id = '{ref}'",
        )
        .to_pylist()[0]
        .values()
    )
    assert sum(e["cat"] == "burst" for e in slices) == n_bursts
    assert sum(e["cat"] == "mpi" for e in slices) == n_calls  # the reference run's calls, not the other run's
    assert min(e["ts"] for e in slices if e["cat"] == "mpi") == pytest.approx(t0_ns / 1000)  # µs
    merged_counters = {"PAPI_TOT_INS", "PAPI_TOT_CYC", "LONGEST_LAT_CACHE:MISS"}
    assert merged_counters <= next(e for e in slices if e["cat"] == "burst")["args"].keys()
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {e["pid"] for e in slices} <= names.keys()
    by_track: dict = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        for (_, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0 - 1e-3 or e1 <= e0 + 1e-3  # next slice after this one, or inside it


def test_merged_experiment_pipit_events(tmp_path, merged_wh, run_cli):
    """Pipit's events table (the columns of pipit.Trace.from_csv): per (Process, Thread) every Enter has its Leave
    and they nest, timestamps sorted; merged counters on the Computation Leave rows."""
    from synthtrace.warehouse.sql import query

    out = tmp_path / "events.csv"
    code, _, err = run_cli("export", "lulesh-8r", "-f", "pipit", "-o", out, "-w", merged_wh)
    assert code == 0, err
    ev = pl.read_csv(out)
    assert ev.columns[:5] == ["Timestamp (ns)", "Event Type", "Name", "Thread", "Process"]
    assert ev.get_column("Timestamp (ns)").is_sorted()
    for (_, _), g in ev.group_by("Process", "Thread"):
        stack: list[str] = []
        for kind, name in g.filter(pl.col("Event Type") != "Instant").select("Event Type", "Name").iter_rows():
            if kind == "Enter":
                stack.append(name)
            else:
                assert stack and stack.pop() == name
        assert not stack
    ins = span_counts(ev, "Computation", "PAPI_TOT_INS").sum()
    assert ins == query(Warehouse(merged_wh), "SELECT sum(PAPI_TOT_INS) FROM merged_bursts").column(0)[0].as_py()


def test_merged_experiment_csv(tmp_path, merged_wh, run_cli):
    from synthtrace.warehouse.sql import query

    out = tmp_path / "b.csv"
    assert run_cli("export", "lulesh-8r", "-f", "csv", "-o", out, "-w", merged_wh)[0] == 0
    assert (
        pl.read_csv(out).height
        == query(Warehouse(merged_wh), "SELECT count(*) FROM merged_bursts").column(0)[0].as_py()
    )


@pytest.mark.parametrize(("fmt", "name"), [("perfetto", "lulesh-8r.json"), ("pipit", "lulesh-8r.pipit.csv"),
                                         ("csv", "lulesh-8r.csv")])
def test_export_without_output_names_its_file_by_format(tmp_path, merged_wh, run_cli, monkeypatch, fmt, name):
    """No --output: the experiment's name with the format's extension, in the current folder (never CSV text in
    a .json file)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("export", "lulesh-8r", "-f", fmt, "-w", Path(merged_wh).resolve())
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == [name] and f"wrote {name}" in out
    if fmt == "perfetto":
        assert json.loads((tmp_path / name).read_text())["traceEvents"]
    else:
        assert pl.read_csv(tmp_path / name).height > 0


def test_export_refuses_missing_warehouse(tmp_path, run_cli):
    code, _, err = run_cli("export", "x", "-o", tmp_path / "t.json", "-w", tmp_path / "typo")
    assert code == 2 and "no such warehouse" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "typo").exists()


def test_pipit_reads_export_like_its_otf2_reader(tmp_path, run_cli):
    """With Pipit installed: the export of the Score-P ping-pong, read by ``pipit.Trace.from_csv``, has the MPI
    events Pipit's own OTF2 reader finds in the same archive, at the same times (within 1 ns)."""
    pipit = pytest.importorskip("pipit")
    from testing.traces import TRACES

    archive = TRACES / "otf2" / "ping-pong-otf2-papi"
    w, out = tmp_path / "wh", tmp_path / "pp.csv"
    assert run_cli("ingest", archive / "traces.otf2", "--experiment", "pp", "-w", w)[0] == 0
    assert run_cli("export", "pp", "-f", "pipit", "-o", out, "-w", w)[0] == 0
    mine = pipit.Trace.from_csv(str(out)).events
    theirs = pipit.Trace.from_otf2(str(archive)).events

    def mpi(df):
        df = df[df["Name"].astype(str).str.startswith("MPI_") & df["Event Type"].isin(["Enter", "Leave"])]
        return sorted(zip(df["Process"].astype(int), df["Name"].astype(str), df["Event Type"].astype(str),
                          df["Timestamp (ns)"].astype(float)))

    a, b = mpi(mine), mpi(theirs)
    assert [x[:3] for x in a] == [x[:3] for x in b]
    assert max(abs(x[3] - y[3]) for x, y in zip(a, b)) <= 1.0


@pytest.fixture(scope="module")
def ping_pong_pipit(tmp_path_factory) -> tuple[Path, Path]:
    """The Score-P ping-pong with PAPI counters ingested and exported as Pipit's table: (warehouse, table)."""
    from synthtrace.pipelines.cli import main
    from testing.traces import TRACES

    root = tmp_path_factory.mktemp("pp")
    w, out = root / "wh", root / "pp.pipit.csv"
    archive = TRACES / "otf2" / "ping-pong-otf2-papi" / "traces.otf2"
    assert main(["ingest", str(archive), "--experiment", "pp", "-w", str(w)]) == 0
    assert main(["export", "pp", "-f", "pipit", "-o", str(out), "-w", str(w)]) == 0
    return w, out


def _stored(w: Path, sql: str) -> list[tuple]:
    from synthtrace.warehouse.sql import query

    return [tuple(r.values()) for r in query(Warehouse(w), sql).to_pylist()]


def test_pipit_table_holds_what_pipits_functions_read(ping_pong_pipit):
    """The contract of the columns Pipit's functions read (attack 10: ``comm_matrix`` failed with KeyError
    'Attributes', and a burst's counters sat on its Leave row alone, so ``calc_inc_metrics`` gave NaN): MpiSend and
    MpiRecv rows with Pipit's message fields in ``Attributes`` (JSON: receiver/sender as the partner's Process,
    communicator, msg_tag, msg_length), one per stored message; every metric a reading whose Leave less Enter is the
    span's count."""
    w, out = ping_pong_pipit
    ev = pl.read_csv(out)
    assert ev.columns[:6] == ["Timestamp (ns)", "Event Type", "Name", "Thread", "Process", "Attributes"]
    sends = ev.filter(pl.col("Name") == "MpiSend")
    attrs = [json.loads(a) for a in sends["Attributes"]]
    assert all(set(a) == {"receiver", "communicator", "msg_tag", "msg_length"} for a in attrs)
    mine = sorted((p, a["receiver"], a["msg_tag"], a["msg_length"]) for p, a in zip(sends["Process"], attrs))
    assert mine == sorted(_stored(w, "SELECT sender - 1, receiver - 1, tag, bytes FROM mpi_messages"))
    assert len(mine) == 16
    recvs = [json.loads(a) for a in ev.filter(pl.col("Name") == "MpiRecv")["Attributes"]]
    assert sorted(a["sender"] for a in recvs) == sorted(a["receiver"] ^ 1 for a in attrs)
    assert ev.filter(pl.col("Event Type") != "Instant")["Attributes"].null_count() == ev.height - 32
    for column, view in (("PAPI_TOT_CYC", "bursts"), ("PAPI_L2_TCM", "bursts")):
        (total,) = _stored(w, f"SELECT sum({column}) FROM {view}")
        assert span_counts(ev, "Computation", column).sum() == total[0]
    (sent,) = _stored(w, "SELECT sum(bytes_sent) FROM mpi_calls WHERE mpi_call = 'MPI_Send'")
    assert span_counts(ev, "MPI_Send", "bytes_sent").sum() == sent[0] == sum(a["msg_length"] for a in attrs)


def test_pipit_reads_the_table_with_its_own_functions(ping_pong_pipit):
    """With Pipit installed (hpcgroup/pipit): ``Trace.from_csv``, then the one line that turns ``Attributes`` into
    Pipit's dicts, then ``comm_matrix`` (bytes and counts: the stored messages), ``calc_inc_metrics`` (the stored
    counters of the bursts and calls), ``calc_exc_metrics`` and ``flat_profile`` (the time of every span)."""
    pipit = pytest.importorskip("pipit")
    np = pytest.importorskip("numpy")
    w, out = ping_pong_pipit
    t = pipit.Trace.from_csv(str(out))
    t.events["Attributes"] = t.events["Attributes"].map(json.loads, na_action="ignore")
    matrix = np.zeros((2, 2))
    for sender, receiver, size in _stored(w, "SELECT sender - 1, receiver - 1, sum(bytes) FROM mpi_messages "
                                             "GROUP BY ALL"):
        matrix[sender, receiver] = size
    assert (t.comm_matrix() == matrix).all() and t.comm_matrix("count").sum() == 16
    t.calc_inc_metrics()
    enters = t.events[t.events["Event Type"] == "Enter"]
    by_name = enters.groupby("Name", observed=True)[["PAPI_TOT_CYC.inc", "time.inc"]].sum()
    (bursts,) = _stored(w, "SELECT sum(PAPI_TOT_CYC), sum(duration_ns) FROM bursts")
    assert tuple(by_name.loc["Computation"]) == bursts
    for call, cycles, ns in _stored(w, "SELECT mpi_call, sum(PAPI_TOT_CYC), sum(duration_ns) FROM mpi_calls "
                                       "GROUP BY ALL"):
        assert tuple(by_name.loc[call]) == (cycles, ns)
    t.calc_exc_metrics(["Timestamp (ns)"])
    profile = t.flat_profile(["time.inc", "time.exc"], per_process=True)
    assert profile.loc[("Computation", 0), "time.exc"] + profile.loc[("Computation", 1), "time.exc"] == bursts[1]


def test_pipit_processes_of_two_applications_do_not_collide():
    """A Paraver trace can hold several applications (Extrae's uncore readers are appl 2): their tasks are other
    processes than appl 1's, so Pipit must not see two ranks 0."""
    from synthtrace import read_trace
    from synthtrace.tracelib.formats.exports import pipit_events
    from testing.traces import PRIME

    bursts, calls = read_trace(PRIME)
    second = bursts.filter(pl.col("task") <= 2).with_columns(pl.lit(2, bursts.schema["appl"]).alias("appl"))
    ev = pipit_events(pl.concat([bursts, second]), calls)
    n_tasks = bursts["task"].n_unique()
    assert ev["Process"].n_unique() == n_tasks + 2 and ev["Process"].max() == n_tasks + 1
    assert ev.filter(pl.col("Process") < n_tasks).height == 2 * (bursts.height + calls.height)


# ------------------------------------------------------------------ a window of the trace at a time (attack 7 A21)
def _whole_export(wh, experiment: str, fmt: str, out: Path) -> None:
    """The export as it was made before it was streamed: the whole trace read, then written."""
    from synthtrace.tracelib.formats.exports import pipit_events, write_perfetto
    from synthtrace.warehouse.export_views import export_scans, load_export_tables

    bursts, calls = load_export_tables(Warehouse(wh), experiment)
    messages = export_scans(Warehouse(wh), experiment).messages
    if fmt == "perfetto":
        with out.open("wb") as fh:
            write_perfetto(fh, bursts, calls, name=experiment)
    else:
        (pipit_events(bursts, calls, None if messages is None else messages.collect()) if fmt == "pipit"
         else bursts).write_csv(out)


@pytest.fixture(scope="module")
def analysed_wh(merged_lulesh, tmp_path_factory):
    """The merged LULESH pair with its archetypes (the bursts' labels go into the exports)."""
    import shutil

    from synthtrace.pipelines.cli import main

    w = tmp_path_factory.mktemp("analysed") / "wh"
    shutil.copytree(merged_lulesh, w)
    assert main(["archetypes", "lulesh-8r", "-w", str(w)]) == 0
    return w


@pytest.mark.parametrize("fmt", ["perfetto", "pipit", "csv"])
def test_an_export_read_a_window_at_a_time_is_the_export_of_the_whole_trace(tmp_path, analysed_wh, wh, run_cli,
                                                                            monkeypatch, fmt):
    """An export holds a window of the trace at a time, not the trace (a 1 GB trace's CSV export peaked at 1.8 GB,
    its Pipit table at 3.2 GB, attack 7 A21): the file is byte for byte the one written from the whole trace, with
    one window or with windows of 37 bursts/calls (several per thread, several threads per window), merged
    (labelled by archetype) or a single run."""
    from synthtrace.warehouse import export_views

    for w, experiment in ((analysed_wh, "lulesh-8r"), (wh, "prime-exp")):
        whole = tmp_path / f"{experiment}.whole"
        _whole_export(w, experiment, fmt, whole)
        for rows in (1_000_000, 37):
            monkeypatch.setattr(export_views, "EXPORT_WINDOW_ROWS", rows)
            out = tmp_path / f"{experiment}.{rows}"
            assert run_cli("export", experiment, "-f", fmt, "-o", out, "-w", w)[0] == 0
            assert out.read_bytes() == whole.read_bytes(), (experiment, rows)


def test_perfetto_times_are_the_exact_microseconds(tmp_path, wh, run_cli):
    """``ts`` and ``dur`` are the trace's ns in µs to the ns, as the shortest decimal: 1869355.687, never
    1869355.6870000002 (Polars divides by 1000 as a product with 0.001)."""
    from synthtrace.warehouse.export_views import load_export_tables

    out = tmp_path / "t.json"
    assert run_cli("export", "prime-exp", "-o", out, "-w", wh)[0] == 0
    bursts, calls = load_export_tables(Warehouse(wh), "prime-exp")
    spans = {(row[0] * 100_000 + row[1], row[2], row[3] / 1000): row[4] / 1000 for frame in (bursts, calls)
             for row in frame.select("appl", "task", "thread", "start_ns", "duration_ns").iter_rows()}
    slices = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(spans) == 704 + 672
    assert all(spans.get((e["pid"], e["tid"], e["ts"])) == e["dur"] for e in slices)
    assert not [e for e in slices if len(repr(e["ts"]).split(".")[-1]) > 3 or len(repr(e["dur"]).split(".")[-1]) > 3]


def _gzip_name(path) -> str:
    """The file name a gzip header records (RFC 1952 FNAME: after the 10-byte header when flag bit 3 is set)."""
    data = path.read_bytes()
    assert data[3] & 0x08, "no name in the gzip header"
    return data[10:data.index(b"\0", 10)].decode()


def test_an_export_named_gz_is_compressed_and_one_naming_another_format_is_refused(tmp_path, wh, run_cli):
    """Attack 10 D3: ``export -o x.pipit.gz`` wrote plain CSV (Pipit and pandas infer gzip from the name: "Not a
    gzipped file"), ``-o y.parquet`` wrote Perfetto JSON; ``sql --output``'s rule holds for export: ``.gz`` is
    compressed, an extension naming another format is one line and nothing is written."""
    import gzip

    pd = pytest.importorskip("pandas")
    plain, packed = tmp_path / "x.pipit.csv", tmp_path / "x.pipit.csv.gz"
    for out in (plain, packed):
        code, _, err = run_cli("export", "prime-exp", "--format", "pipit", "-o", out, "-w", wh)
        assert code == 0, err
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert pd.read_csv(packed).shape == pd.read_csv(plain).shape  # pandas infers the compression from the name
    assert _gzip_name(packed) == "x.pipit.csv"  # attack 11: the hidden part file's name, which gunzip -N restores
    for name in ("x.csv.bz2", "x.tar.gz", "x.csv.gz.gz", "x.csv.xz"):  # attack 11: written plain or gzip, exit 0
        for args in (["export", "prime-exp", "--format", "csv"], ["sql", "SELECT 1 AS one", "--format", "csv"]):
            code, _, err = run_cli(*args, "-o", tmp_path / name, "-w", wh)
            assert code == 2 and len(err.strip().splitlines()) == 1 and "does not write" in err, (args, name, err)
            assert not (tmp_path / name).exists()
    code, _, err = run_cli("sql", "SELECT 1 AS one", "-o", tmp_path / "q.csv.gz", "-w", wh)
    assert code == 0 and _gzip_name(tmp_path / "q.csv.gz") == "q.csv", err
    for fmt, name in (("perfetto", "y.parquet"), ("perfetto", "y.csv.gz"), ("csv", "y.json")):
        code, _, err = run_cli("export", "prime-exp", "--format", fmt, "-o", tmp_path / name, "-w", wh)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "extension" in err, (fmt, name, err)
        assert not (tmp_path / name).exists()
