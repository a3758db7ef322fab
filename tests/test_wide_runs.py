"""A run whose bursts sample many counter types (each a column of the stored bursts, mostly NULL) is read by the
commands after its ingest as what each needs (attack 18 F2: 10,000 bursts of one sample each of 4,096 types,
0.85 MB of trace, took 1.1 GB to classify and 1.9 GB to export; 40,000 bursts passed 3 GB): the analysis never
holds the counters no role knows, an export holds a bounded number of cells at a time and writes the bytes of the
whole-trace export."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import synthtrace
from synthtrace.warehouse import Warehouse

#: the counter types of the crafted run no role knows (no name in its .pcf): one sampled per burst
UNKNOWN = 60
UNKNOWN_BASE = 45_000_000


def _wide_trace(folder: Path, bursts: int = 240, unknown: int = UNKNOWN, *, in_calls: bool = False) -> Path:
    """A Paraver trace of 2 tasks whose bursts of 600 ns each read PAPI_TOT_INS, PAPI_TOT_CYC and one of
    ``unknown`` counter types no role knows (0: none); ``in_calls``: an MPI_Allreduce after each burst, and the
    unknown counter sampled at the call's exit instead (a counter inside the call)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"#Paraver (01/01/26 at 00:00):{1000 * bursts + 1000}_ns:1(2):1:2(1:1,1:1)"]
    for t in (1, 2):
        for i in range(bursts // 2):
            s = 1000 * i
            other = f":{UNKNOWN_BASE + i % unknown}:{i + 1}" if unknown else ""
            lines += [f"1:{t}:1:{t}:1:{s}:{s + 600}:1",
                      f"2:{t}:1:{t}:1:{s + 300}:42000050:{1000 + 7 * i + t}:42000059:{2000 + 3 * i}"
                      f"{'' if in_calls else other}",
                      f"1:{t}:1:{t}:1:{s + 600}:{s + 1000}:0"]
            if in_calls:
                lines += [f"2:{t}:1:{t}:1:{s + 600}:50000002:10", f"2:{t}:1:{t}:1:{s + 700}:50000002:0{other}"]
    prv = folder / "wide.prv"
    prv.write_text("\n".join(lines) + "\n")
    (folder / "wide.pcf").write_text("EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n"
                                     "7  42000059 PAPI_TOT_CYC [Total cycles]\n")
    return prv


def _unknown(columns: list[str]) -> list[str]:
    return [c for c in columns if c.isdigit() and int(c) >= UNKNOWN_BASE]


@pytest.fixture
def wide_wh(tmp_path: Path) -> Path:
    """A warehouse holding the wide run (experiment ``wide``) and the same run without its unknown counters
    (experiment ``narrow``)."""
    wh = tmp_path / "wh"
    synthtrace.ingest(str(wh), str(_wide_trace(tmp_path / "w")), experiment="wide")
    synthtrace.ingest(str(wh), str(_wide_trace(tmp_path / "n", unknown=0)), experiment="narrow")
    stored = Warehouse(wh).experiment("wide").trace(dram_from_uncore=False).bursts
    assert len(_unknown(stored.columns)) == UNKNOWN and "PAPI_TOT_INS" in stored.columns
    return wh


def test_the_analysis_never_holds_the_counters_no_role_knows(wide_wh, run_cli, monkeypatch):
    """``archetypes`` measures windows of the stored bursts holding their keys, times and the counters a role
    knows, never the 60 unknown ones (the old reader held them all: bursts x counter types); what it commits is
    the analysis of the same run without them."""
    seen = _classified_seeing(wide_wh, "burst_metrics", run_cli, monkeypatch)
    assert seen and all("PAPI_TOT_INS" in s and "PAPI_TOT_CYC" in s for s in seen)
    assert [_unknown(s) for s in seen] == [[] for _ in seen]
    _assert_same_analysis(wide_wh, ("archetypes", "burst_metrics", "phase_metrics"))


def _classified_seeing(wh: Path, measure: str, run_cli, monkeypatch) -> list[list[str]]:
    """The columns of each frame ``analysis.<measure>`` was given while ``archetypes`` classified experiments
    ``wide`` and ``narrow`` of ``wh``."""
    from synthtrace.models import analysis

    seen: list[list[str]] = []
    real = getattr(analysis, measure)

    def spy(frame, *args, **kwargs):
        seen.append(list(frame.columns))
        return real(frame, *args, **kwargs)

    monkeypatch.setattr(analysis, measure, spy)
    for experiment in ("wide", "narrow"):
        code, _, err = run_cli("archetypes", experiment, "-w", wh)
        assert code == 0, err
    return seen


def _assert_same_analysis(wh: Path, frames: tuple[str, ...]) -> None:
    """The analysis tables ``frames`` committed for experiments ``wide`` and ``narrow`` of ``wh`` are equal."""
    for frame in frames:
        wide, narrow = (pl.read_parquet(Warehouse(wh).experiment(e).dir / f"{frame}.parquet").drop(
            "experiment", "run_id", strict=False) for e in ("wide", "narrow"))
        assert wide.height and wide.equals(narrow), frame


@pytest.mark.parametrize("fmt", ["csv", "pipit", "perfetto"])
def test_a_wide_export_holds_a_bounded_number_of_cells(wide_wh, run_cli, monkeypatch, tmp_path, fmt):
    """An export reads the wide run's bursts in windows of at most ``EXPORT_WINDOW_CELLS`` cells and turns at most
    ``PERFETTO_BATCH_CELLS`` counter values into JSON at a time (the old export held 200,000 bursts a window,
    whatever their columns), and writes the bytes of the export of one window."""
    from synthtrace.tracelib.formats import exports
    from synthtrace.warehouse import export_views

    whole = tmp_path / f"whole.{fmt}"
    assert run_cli("export", "wide", "-f", fmt, "-o", whole, "-w", wide_wh)[0] == 0
    cells = 2_000
    monkeypatch.setattr(export_views, "EXPORT_WINDOW_CELLS", cells)
    monkeypatch.setattr(exports, "PERFETTO_BATCH_CELLS", cells)
    windows: list[tuple[int, int]] = []
    batches: list[int] = []
    read, to_json = export_views.ExportScans.bursts_in, exports._json_rows

    def bursts_in(self, *args, **kwargs):
        frame = read(self, *args, **kwargs)
        windows.append(frame.shape)
        return frame

    def json_rows(df: pl.DataFrame) -> bytes:
        args = df.schema.get("args")
        batches.append(df.height * (len(args.fields) if isinstance(args, pl.Struct) else df.width))
        return to_json(df)

    monkeypatch.setattr(export_views.ExportScans, "bursts_in", bursts_in)
    monkeypatch.setattr(exports, "_json_rows", json_rows)
    out = tmp_path / f"windows.{fmt}"
    code, _, err = run_cli("export", "wide", "-f", fmt, "-o", out, "-w", wide_wh)
    assert code == 0, err
    assert sum(h for h, _ in windows) >= 240 and len(windows) > 1
    assert max(h * w for h, w in windows) <= cells
    assert max(batches, default=0) <= cells
    assert out.read_bytes() == whole.read_bytes()


def test_parts_of_other_counter_columns_are_scanned_as_one(tmp_path):
    """The stored parts of a wide run each hold some of its counter columns: :func:`scan_parts` reads them as one
    scan of their union (the old union of one scan per part, each widened to every column, took 500 MB to plan
    for 149 parts of 4,096 columns), the frame the union by name gives; parts whose types differ are still
    unioned with their types widened."""
    from synthtrace.warehouse.parts import scan_parts

    frames = [pl.DataFrame({"appl": [1, 1], "burst_seq": [2 * i, 2 * i + 1], str(UNKNOWN_BASE + i): [i, None]},
                           schema_overrides={"appl": pl.Int32}) for i in range(5)]
    paths = []
    for i, f in enumerate(frames):
        paths.append(tmp_path / f"part-{i}.parquet")
        f.write_parquet(paths[-1])
    scan = scan_parts(paths)
    assert scan.select("appl").explain().count("Parquet SCAN") == 1
    assert scan.collect().equals(pl.concat(frames, how="diagonal_relaxed"))
    other = tmp_path / "part-wide-int.parquet"
    frames.append(frames[0].with_columns(pl.col("appl").cast(pl.Int64)))
    frames[-1].write_parquet(other)
    got = scan_parts([*paths, other]).collect()
    assert got.equals(pl.concat(frames, how="diagonal_relaxed")) and got.schema["appl"] == pl.Int64


def test_the_analysis_never_holds_the_call_counters_no_role_knows(tmp_path, run_cli, monkeypatch):
    """Attack 19 F6: a run whose MPI calls each sample one of 4,096 counter types (40,000 calls, a 4 MB trace) was
    killed at 3 GB by ``archetypes``: the bursts were narrowed to what a role reads (attack 18 F2) but each window's
    calls were read with every counter column. The calls' measures read their keys, times and bytes only; what
    ``archetypes`` commits is the analysis of the same run without the counters."""
    wh = tmp_path / "wh"
    for experiment, unknown in (("wide", UNKNOWN), ("narrow", 0)):
        synthtrace.ingest(str(wh), str(_wide_trace(tmp_path / experiment, unknown=unknown, in_calls=True)),
                          experiment=experiment)
    stored = Warehouse(wh).experiment("wide").trace(dram_from_uncore=False).calls
    assert len(_unknown(stored.columns)) == UNKNOWN
    seen = _classified_seeing(wh, "mpi_metrics", run_cli, monkeypatch)
    assert seen and [_unknown(s) for s in seen] == [[] for _ in seen]
    _assert_same_analysis(wh, ("archetypes", "mpi_metrics", "phase_metrics"))
