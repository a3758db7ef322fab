"""The issue-27 table of `benchmarks/bench_ingest.py` names the command that was measured (RESULTS.md quotes it)."""
from __future__ import annotations

from benchmarks import bench_ingest


def test_the_dense_table_names_the_command_each_row_was_measured_with(tmp_path, monkeypatch):
    """It printed a fixed `/work/tools/bin/paramedir nice -n 10 ... --repeat 3` whatever the run was."""
    monkeypatch.setenv("SYNTHTRACE_PARAMEDIR", "/opt/pk/bin/paramedir")
    monkeypatch.setattr(bench_ingest.sys, "argv", ["bench_ingest.py", "--dense-mb", "100", "--repeat", "2"])
    row = {"size_mb": 100.0, "rounds": 2, "paramedir_rounds": 0, "bytes_per_record": 124.0, "ingest_s": 1.0,
           "ingest_cpu_s": 2.0, "process_s": 1.5, "startup_cpu_s": 1.0, "peak_rss_mb": 400.0, "scan_s": 5.0,
           "scan_cpu_s": 5.0, "scan_ratio": 5.0, "scan_cpu_ratio": 2.5, "paramedir_s": None, "paramedir_ratio": None,
           "paramedir_cpu_ratio": None, "commit": "abc1234", "command": bench_ingest._command(), "load": [1.0, 2.0],
           "machine": "2 cores"}
    out = tmp_path / "dense.md"
    bench_ingest._write_dense_table({"ring": row}, out)
    text = out.read_text()
    assert "`SYNTHTRACE_PARAMEDIR=/opt/pk/bin/paramedir" in text
    assert "python benchmarks/bench_ingest.py --dense-mb 100 --repeat 2`" in text
    assert "/work/tools" not in text and "--repeat 3" not in text


def test_a_copy_outside_git_is_labelled_so_not_as_changed_code(tmp_path, monkeypatch, capfd):
    """A `git archive` export (how a before/after run measures main) was labelled `+` (changed code of no commit),
    and git's usage text was printed once per shape."""
    monkeypatch.setattr(bench_ingest, "ROOT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert bench_ingest._commit() == "not a git checkout"
    assert "usage" not in capfd.readouterr().err
