"""Hostile ``.pcf``/``.row`` companions, names with control characters and hostile machine profiles (issue 23,
attack round 6 F1/F4-F7): each is refused in one line naming the file (exit 2, nothing stored) or read as Paraver
reads it, with a warning naming the file and line."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthtrace.tracelib.formats.paraver.companion_text import MAX_COMPANION_BYTES, MAX_LINE_BYTES, MAX_PCF_BYTES
from synthtrace.tracelib.formats.paraver.pcf import parse_pcf
from synthtrace.tracelib.formats.paraver.row import parse_row
from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces

_PCF = PRIME.with_suffix(".pcf").read_bytes()


def _with_companion(dest: Path, suffix: str, data: bytes | None = None, size: int | None = None) -> Path:
    """A copy of PRIME whose ``suffix`` companion is ``data`` or, with ``size``, a sparse file of that many bytes."""
    prv = copy_trace(PRIME, dest)
    path = prv.with_suffix(suffix)
    if data is not None:
        path.write_bytes(data)
    if size is not None:
        os.truncate(path, size)
    return prv


# ------------------------------------------------------------------------------ F5: companions of any size
# a .row beyond the cap: not read, the trace ingested (attack 14 F13), tests/test_paraver_long_lines.py


def test_pcf_beyond_the_cap_is_not_read_and_the_trace_is_ingested_without_names(tmp_path, run_cli):
    """Attack 12 F10: a .pcf is never a reason to refuse its trace. A 1 GB .pcf was read whole (3.3 GB of RAM);
    then refused the trace over 32 MiB; one beyond MAX_PCF_BYTES is now not read at all: the trace is ingested
    with counters named by their type, said in one warning naming the file."""
    prv = _with_companion(tmp_path / "t", ".pcf", size=MAX_PCF_BYTES + 1)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    said = [line for line in err.splitlines() if str(prv.with_suffix(".pcf")) in line]
    assert len(said) == 1 and "not read" in said[0] and "without its names" in said[0], err
    code, out, _ = run_cli("sql", "select column_name from (describe bursts)", "-w", wh)
    assert code == 0 and "42000050" in out and "PAPI_TOT_INS" not in out


def _caller_tables(levels: int, symbols: int) -> bytes:
    """Extrae's caller tables of a large C++ code: ``levels`` caller and caller-line levels of ``symbols`` demangled
    template names each (attack 12 F10: 3 x 80,000 make a 34 MB .pcf)."""
    out = []
    for level in range(1, levels + 1):
        out.append(b"\n\nEVENT_TYPE\n0    7000000%d    Caller at level %d\nVALUES\n" % (level, level))
        out += [b"%d   ns%d::Kls%d<double, std::allocator<double> >::apply_%d(int, double const*)\n" % (i, i % 97, i, i)
                for i in range(symbols)]
        out.append(b"\n\nEVENT_TYPE\n0    8000000%d    Caller line at level %d\nVALUES\n" % (level, level))
        out += [b"%d   %d (src/module_%d/file_%d.cpp, prime_v0)\n" % (i, i % 2000, i % 500, i) for i in range(symbols)]
    return b"".join(out)


@pytest.mark.slow
def test_a_large_codes_caller_tables_are_read(tmp_path, run_cli):
    """Attack 12 F10: a 34 MB .pcf (3 levels of 80,000 C++ symbols and their lines) refused its 308 kB trace
    ("larger than 32 MiB"); it is streamed and read whole: counters named, its caller names kept."""
    from synthtrace.tracelib.formats.paraver.pcf import read_pcf

    prv = _with_companion(tmp_path / "t", ".pcf", _PCF + _caller_tables(3, 80_000))
    assert prv.with_suffix(".pcf").stat().st_size > MAX_COMPANION_BYTES
    cat = read_pcf(prv.with_suffix(".pcf"))
    assert cat.values_cut == 0 and cat.value_name(70000003, 79_999).endswith("apply_79999(int, double const*)")
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "not kept" not in err, err
    code, out, _ = run_cli("sql", "select column_name from (describe bursts)", "-w", wh)
    assert code == 0 and "PAPI_TOT_INS" in out


def test_a_line_beyond_the_line_cap_is_skipped_with_its_line_number():
    """A 20 MB label line became a 20 MB column name (an abort in the Parquet sink); it is skipped, as a line
    Paraver cannot read is, and the lines after it are still read."""
    long_line = b"7  42000050 " + b"X" * MAX_LINE_BYTES + b"\n"
    data = b"EVENT_TYPE\n" + long_line + b"7  42000059 PAPI_TOT_CYC [Cycles]\n"
    cat = parse_pcf(data, "t.pcf")
    assert cat.ignored and cat.ignored[0][0] == 2 and "longer than" in cat.ignored[0][1]
    assert 42000050 not in cat.event_labels and cat.counter_name(42000059) == "PAPI_TOT_CYC"
    import io

    from synthtrace.tracelib.formats.paraver.companion_text import companion_lines, file_lines
    assert list(file_lines(io.BytesIO(data))) == list(companion_lines(data))  # streamed as ingest reads it
    row = parse_row(b"LEVEL NODE SIZE 2\nnode1\n" + b"n" * (MAX_LINE_BYTES + 1) + b"\nLEVEL CPU SIZE 1\n1.node1\n",
                    "t.row")
    assert row.names("NODE") == ["node1", ""] and row.names("CPU") == ["1.node1"]
    assert row.ignored == [(3, f"line longer than {MAX_LINE_BYTES >> 10} KiB (no Paraver name is that long)")]


# ------------------------------------------------------------------------------ F6: hostile labels and numbers
@pytest.mark.parametrize(("line", "skipped"), [
    (b"EVENT_TYPE\n7 " + b"9" * 5000 + b" X\n", 2),  # a type beyond int64: ValueError (4300-digit limit)
    (b"EVENT_TYPE\n7 42000050 PAPI_TOT_INS\nVALUES\n" + b"9" * 5000 + b" big\n", 4),
    (b"EVENT_TYPE\n7 42000050 PAPI_TOT_INS\nVALUES\n9223372036854775808 big\n", 4),  # int64 max + 1
    (b"STATES\n" + b"9" * 30 + b" Running\n", 2),
], ids=["type-5000-digits", "value-5000-digits", "value-int64-max+1", "state-30-digits"])
def test_numbers_beyond_int64_are_skipped_with_their_line(line, skipped):
    """Paraver's parser skips a line whose number it cannot convert (std::stoi throws); so does this one, instead
    of a ValueError traceback or a value no record can hold."""
    cat = parse_pcf(line, "t.pcf")
    assert [n for n, _ in cat.ignored] == [skipped], cat.ignored
    assert all(abs(v) < 1 << 63 for t in cat.event_values.values() for v in t)


def test_one_value_table_per_block_not_per_type():
    """A block of many types shares its VALUES: 1,000 types x 60,000 values took 1,000 tables (GBs of RAM)."""
    types = b"".join(b"0 %d T%d\n" % (50000000 + i, i) for i in range(200))
    values = b"".join(b"%d v%d\n" % (i, i) for i in range(300))
    cat = parse_pcf(b"EVENT_TYPE\n" + types + b"VALUES\n" + values + b"EVENT_TYPE\n0 50000000 again\nVALUES\n9 nine\n",
                    "t.pcf")
    tables = {id(cat.event_values[50000000 + i]) for i in range(200)}
    assert len(tables) == 2  # the type given values again has a table of its own; the other 199 share one
    assert cat.value_name(50000000, 9) == "nine" and cat.value_name(50000001, 9) == "v9"
    assert cat.value_name(50000001, 299) == "v299" and cat.value_name(50000000, 299) == "v299"


def test_names_beyond_the_budget_are_cut_not_kept_without_end(monkeypatch, tmp_path):
    """Each block that declares a type again gives it this block's values too (Paraver does the same): a file of
    one big VALUES table and thousands of such blocks would copy the table thousands of times (hours, GBs), and one
    huge table (a pcf bomb) would fill memory. Beyond MAX_VALUE_NAME_BYTES of names no more are kept, counted with
    the first line cut; the rest of the file is still read for its event types (attack 12 F10: never a refusal of
    the trace for its names; the budget lowered here to keep the test small)."""
    from synthtrace.tracelib.formats.paraver import pcf

    monkeypatch.setattr(pcf, "MAX_VALUE_NAME_BYTES", 1000 * (pcf.NAME_OVERHEAD + 4))
    values = b"".join(b"%d v%d\n" % (i, i) for i in range(300))
    again = b"EVENT_TYPE\n0 50000000 T\nVALUES\n1 one\n" * 10
    tail = b"EVENT_TYPE\n7 42000050 PAPI_TOT_INS [Instr completed]\nVALUES\n" + values * 20
    data = b"EVENT_TYPE\n0 50000000 T\n0 50000001 U\nVALUES\n" + values + again + tail
    cat = parse_pcf(data, "t.pcf")
    assert cat.value_name(50000001, 299) == "v299" and cat.values_cut > 0 and cat.cut_line > 4
    assert cat.counter_name(42000050) == "PAPI_TOT_INS"  # the types after the cut are read
    assert sum(map(len, {id(t): t for t in cat.event_values.values()}.values())) <= 1000
    path = tmp_path / "t.pcf"
    path.write_bytes(data)
    streamed = pcf.read_pcf(path)  # as ingest reads it: a line at a time
    assert (streamed.event_values, streamed.values_cut, streamed.cut_line) == (cat.event_values, cat.values_cut,
                                                                               cat.cut_line)
    assert parse_pcf(_PCF, "t.pcf").value_name(50000002, 7) == "MPI_Bcast"  # a real .pcf is far below the budget


@pytest.mark.parametrize(("label", "column"), [
    ("*", "counter_42000050"),  # Polars reads `*` as every column: DuplicateError traceback
    ("^PAPI.*$", "counter_42000050"),  # a regular expression to Polars
    ("\x1b[2J\x1b[31mEVIL", "\\x1b[2J\\x1b[31mEVIL"),  # clears the screen in `sql "describe bursts"`
    ("EV\x00IL", "EV\\x00IL"),
    ("L" * 5000, "L" * 107 + "_42000050"),
], ids=["star", "regex", "ansi", "nul", "5000-chars"])
def test_counter_names_that_cannot_be_columns_are_renamed_once(label, column):
    data = _PCF.replace(b"PAPI_TOT_INS [Instr completed]", label.encode() + b" [x]")
    cat = parse_pcf(data, "t.pcf")
    assert cat.counter_name(42000050) == column
    assert len(cat.renamed_lines) == 1 and column in cat.renamed_lines[0][1]


def test_hostile_counter_and_node_names_are_stored_escaped(tmp_path, run_cli):
    """A counter label `*` gave a DuplicateError traceback; labels and .row node names with escape sequences
    reached the terminal raw through `sql`. Ingest now stores them renamed/escaped and says so."""
    pcf = _PCF.replace(b"PAPI_TOT_INS [Instr completed]", b"* [x]").replace(
        b"PAPI_TOT_CYC [Total cycles]", b"\x1b]0;T\x07EVIL [x]")
    prv = _with_companion(tmp_path / "t", ".pcf", pcf)
    row = prv.with_suffix(".row")
    row.write_bytes(row.read_bytes().replace(b"\nc7101\n", b"\nc7101\x1b[2J\n"))  # a node name
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    assert f"{prv.with_suffix('.pcf')}:142: " in err and f"{row}:20: name holds control characters" in err
    code, out, err = run_cli("sql", "select column_name from (describe bursts)", "-w", wh)
    assert code == 0 and "counter_42000050" in out and "\\x1b]0;T\\x07EVIL" in out
    code, out, err = run_cli("sql", "select * from bursts limit 3", "-w", wh)
    assert "\x1b" not in out + err


# ------------------------------------------------------------------------------ F7: --app and table cells
def test_app_with_control_characters_is_refused_like_an_experiment_name(tmp_path, run_cli):
    """`--app $'EV\\x1b[2JIL\\nerror: forged'` was stored and printed raw by `runs` (a screen clear, a forged
    error line); --app now follows the experiment-name rule."""
    prv = copy_trace(PRIME, tmp_path / "t")
    code, out, err = run_cli("ingest", prv, "--app", "EV\x1b[2JIL\nerror: forged", "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "control character" in err, err
    assert "\x1b" not in err and not (tmp_path / "wh").exists()


def test_simulate_app_with_control_characters_is_refused(tmp_path, run_cli):
    """`simulate --app $'a\x1b[2Jb'` wrote trace files whose names hold ESC (which ingest then refuses)."""
    code, out, err = run_cli("simulate", tmp_path / "s", "--app", "a\x1b[2Jb", "--ranks", "2", "--iterations", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "control character" in err, err
    assert not (tmp_path / "s").exists()


def test_table_cells_are_printed_escaped(capsys):
    """Whatever a stored value holds (a warehouse written by an older version, a query's own text), a table cell
    or header cannot print a line of its own or an escape sequence."""
    from rich.table import Table

    from synthtrace.pipelines.cli_base import print_table

    table = Table("name\x1b]0;title\x07")
    table.add_row("ok\nerror: forged\x1b[2J")
    print_table(table)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out and "\\x1b]0;title\\x07" in out
    assert not any(line.lstrip("│| ").startswith("error:") for line in out.splitlines()), out


# ------------------------------------------------------------------------------ F1/F4: hostile machine profiles
_GENERIC = (Path(__file__).parents[1] / "tracelib" / "domain" / "machines" / "generic.toml").read_text()
_PROFILE_DEFECTS = {  # (line of generic.toml, its replacement, the key the error names)
    "text count": ("line_bytes = 64", 'line_bytes = "abc"', "line_bytes"),  # ValueError traceback
    "text latency": ("latency_us = 1.5", 'latency_us = "x"', "latency_us"),  # ValueError
    "text cache": ("l1d_per_core = 32", 'l1d_per_core = "big"', "l1d_per_core"),  # ValueError
    "inf count": ("sockets = 2", "sockets = inf", "sockets"),  # OverflowError
    "inf bandwidth": ("dram_per_socket = 150.0", "dram_per_socket = inf", "dram_per_socket"),  # ZeroDivisionError
    "network not a table": ("[network]\nlatency_us = 1.5\nlinks_per_node = 1\n", "", "[network]"),  # AttributeError
    "caches not a table": ("[caches_kib]\n", "", "[caches_kib]"),  # AttributeError
    "nan frequency": ("frequency_ghz = 2.5", "frequency_ghz = nan", "frequency_ghz"),  # silently accepted
    "inf frequency": ("frequency_ghz = 2.5", "frequency_ghz = inf", "frequency_ghz"),
    "nan peak": ("avx2 = 16.0", "avx2 = nan", "avx2"),
    "negative latency": ("latency_us = 1.5", "latency_us = -5", "latency_us"),
    "no links": ("links_per_node = 1", "links_per_node = 0", "links_per_node"),
    "negative line": ("line_bytes = 64", "line_bytes = -64", "line_bytes"),
}


def _profile(path: Path, defect: str) -> Path:
    old, new, _ = _PROFILE_DEFECTS[defect]
    assert old in _GENERIC
    text = _GENERIC.replace(old, new, 1)
    if defect == "network not a table":
        text = "network = 5\n" + text
    if defect == "caches not a table":
        text = "caches_kib = 3\n" + text.replace("l1d_per_core = 32\nl2_per_core = 1024\nl3_per_socket = 32768\n", "")
    path.write_text(text)
    return path


@pytest.mark.parametrize("defect", list(_PROFILE_DEFECTS))
def test_hostile_machine_profile_is_one_line_naming_file_and_key(tmp_path, run_cli, defect):
    """Seven forms gave a 50-line traceback (exit 1), six were accepted silently and stored archetypes computed
    from NaN or a zero link count: each is now one line naming the file and the key, exit 2, before any work."""
    bad = _profile(tmp_path / "m.toml", defect)
    code, out, err = run_cli("archetypes", "prime", "--machine", bad, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(bad) in err and _PROFILE_DEFECTS[defect][2] in err and "Traceback" not in err
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize(("content", "reason"), [
    (b"\xff\xfe", "not UTF-8 text (byte 1)"),  # UnicodeDecodeError traceback (attack F19)
    (b"name = 'x'\n" + b"# padding\n" * 120_000, "larger than 1024 KiB"),  # read whole by tomllib
])
def test_machine_profile_that_is_not_text_or_too_big_is_one_line(tmp_path, run_cli, content, reason):
    bad = tmp_path / "m.toml"
    bad.write_bytes(content)
    code, out, err = run_cli("archetypes", "prime", "--machine", bad, "-w", tmp_path / "wh")
    assert code == 2 and err.strip() == f"error: {bad}: {reason}" + (
        ", so not a machine profile" if "UTF-8" in reason else ": not a machine profile"), err


@pytest.mark.parametrize(("old", "new", "said"), [
    ("cores_per_socket = 32", "cores_per_sockets = 32",
     "unknown key 'cores_per_sockets' (did you mean 'cores_per_socket'?)"),
    ("latency_us = 1.5", "latency_us = 1.5\nlatency_ns = 900", "[network]: unknown key 'latency_ns'"),
    ("avx2 = 16.0", "avx2 = 16.0\navx-512 = 32.0", "[peak_flops_per_cycle]: unknown key 'avx-512'"),
    ("l3_per_core = 25.0", "l3_per_cores = 25.0", "[bandwidth_gbs]: unknown key 'l3_per_cores'"),
    ("l1d_per_core = 32", "l1d_per_core = 32\nL2 = 1024", "[caches_kib]: unknown key 'L2'"),
])
def test_an_unknown_key_in_a_machine_profile_is_named_not_ignored(tmp_path, run_cli, old, new, said):
    """A misspelt key was ignored silently (attack 6 note): `cores_per_sockets = 32` left the profile without its
    core count, a `latency_ns` beside `latency_us` was never read. Each is one line naming the file and the key."""
    assert old in _GENERIC
    bad = tmp_path / "m.toml"
    bad.write_text(_GENERIC.replace(old, new, 1))
    code, out, err = run_cli("archetypes", "prime", "--machine", bad, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{bad}" in err and said in err, err


def test_every_preset_is_still_a_valid_profile():
    from synthtrace.tracelib.domain.machine import load_machine, presets

    assert all(load_machine(name).cores_per_node >= 1 for name in presets())


def test_a_night_with_a_failed_stage_does_not_exit_0(tmp_path, run_cli, monkeypatch):
    """A bad machine.toml failed the night's archetypes every night while `nightly` exited 0: now the failed
    stage (its message naming the file) ends the command with exit 1, as cron and CI read it."""
    from synthtrace.pipelines import nightly

    error = {"stage": "archetypes", "args": ["prime"], "error": "drop/prime/machine.toml: sockets = inf must be ..."}
    monkeypatch.setattr(nightly, "run_night", lambda *a, **k: nightly.NightSummary(
        drop=str(tmp_path), warehouse=str(tmp_path / "wh"), errors=[error]))
    code, out, err = run_cli("nightly", "--drop", tmp_path, "-w", tmp_path / "wh")
    assert code == 1 and "archetypes failed prime: drop/prime/machine.toml" in out, (out, err)


def test_a_bad_machine_toml_is_named_in_the_report_and_refused_for_its_experiment(tmp_path, run_cli):
    """One experiment's bad machine.toml failed the whole nightly report with `OverflowError: cannot convert float
    infinity to integer`, naming no file: the overview report now says it in that experiment's section (naming the
    file) and is written; a report of that experiment alone is refused in one line, exit 2."""
    prv = copy_trace(PRIME, tmp_path / "drop" / "prime")
    bad = _profile(prv.parent / "machine.toml", "inf count")
    wh = tmp_path / "wh"
    assert run_cli("ingest", prv, "--experiment", "prime", "-w", wh)[0] == 0
    out_html = tmp_path / "report.html"
    code, out, err = run_cli("report", "-o", out_html, "-w", wh)
    assert code == 0, err
    assert f"prime: not analysed: {bad}: sockets = inf must be a whole number" in out_html.read_text()
    code, out, err = run_cli("report", "--experiment", "prime", "-o", tmp_path / "one.html", "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{bad}: sockets" in err, err


def test_a_warning_about_a_path_with_control_characters_is_one_escaped_line(tmp_path, run_cli):
    """attack 18 F6: a trace in a folder named ``we<LF>ird\\x1b[31m`` without its .pcf: the warning naming it was
    split over two lines and its escape sequence played by the terminal."""
    prv = copy_trace(PRIME, tmp_path / "we\nird\x1b[31m")
    prv.with_suffix(".pcf").unlink()
    code, out, err = run_cli("ingest", prv, "--experiment", "x", "-w", tmp_path / "wh")
    (warning,) = [line for line in err.splitlines() if "no .pcf" in line]
    assert code == 0 and warning.startswith("warning: ") and "we\\nird\\x1b[31m" in warning, err
    assert "\x1b" not in out + err
