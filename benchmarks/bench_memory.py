"""Peak memory of the commands after ingest (issue 23, attack 7 A21): each command's maximum resident set size
(``/usr/bin/time -v``) and CPU time on a real trace tiled in time to each size, for this checkout and, with
``--before REV``, the tree of commit REV (``git archive``) on the same warehouse. CSV outputs of both are compared
byte for byte (the Perfetto JSON differs by design where the old code printed float noise).

    python benchmarks/bench_memory.py --mb 1000 2000 --before 43d804c --out benchmarks/results/memory.md
    python benchmarks/bench_memory.py --mb 250 --commands export-csv sql-csv     # a quick look

The trace is LULESH (Extrae + PAPI + uncore readers, ../shared/traces) tiled by ``testing.paraver_tile``; it is
ingested once per size by this checkout (``--analyse``: and its archetypes stored first, so that exports carry
labels and ``report`` reads a stored analysis). Needs GNU time at /usr/bin/time and ~3x the largest size of disk.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
EXPERIMENT = "big"
#: command name -> (arguments after ``synthtrace``, output file or None); {wh} and {out} are filled in
COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "export-csv": (["export", EXPERIMENT, "-f", "csv", "-o", "{out}", "-w", "{wh}"], "out.csv"),
    "export-pipit": (["export", EXPERIMENT, "-f", "pipit", "-o", "{out}", "-w", "{wh}"], "out.pipit.csv"),
    "export-perfetto": (["export", EXPERIMENT, "-f", "perfetto", "-o", "{out}", "-w", "{wh}"], "out.json"),
    "sql-csv": (["sql", "SELECT * FROM bursts", "--output", "{out}", "-w", "{wh}"], "sql.csv"),
    "sql-parquet": (["sql", "SELECT * FROM bursts", "--output", "{out}", "-w", "{wh}"], "sql.parquet"),
    "pop": (["pop", "-w", "{wh}"], None),
    "report": (["report", "--out", "{out}", "-w", "{wh}"], "report.html"),
    "archetypes": (["archetypes", EXPERIMENT, "-w", "{wh}"], None),
}
CHILD = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def measure(root: Path, args: list[str]) -> dict:
    """Run ``synthtrace ARGS`` with the tree ``root`` under GNU time: peak RSS (MB), CPU (s), exit code."""
    env = {**os.environ, "PYTHONPATH": str(root), "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", CHILD, *args], cwd=root, env=env,
                       capture_output=True, text=True, check=False)
    fields = dict(ln.strip().rsplit(": ", 1) for ln in p.stderr.splitlines() if ": " in ln and ln.startswith("\t"))
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return {"rss_mb": int(fields["Maximum resident set size (kbytes)"]) / 1024, "cpu_s": cpu,
            "code": p.returncode, "error": p.stderr.strip().splitlines()[0] if p.returncode else ""}


def exported(rev: str, dest: Path) -> Path:
    """The tree of commit ``rev`` in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest


def _digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, nargs="+", default=[1000, 2000], help="trace sizes (MB)")
    ap.add_argument("--before", help="a commit to measure beside this checkout")
    ap.add_argument("--commands", nargs="+", default=[c for c in COMMANDS if c != "archetypes"],
                    choices=list(COMMANDS))
    ap.add_argument("--analyse", action="store_true", help="store the archetypes before the commands run")
    ap.add_argument("--tmp", type=Path, default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table to this file too")
    a = ap.parse_args()
    from testing.paraver_tile import tile_trace

    work = Path(tempfile.mkdtemp(prefix="bench-memory-", dir=a.tmp))
    trees = {"this checkout": ROOT}
    if a.before:
        trees[a.before] = exported(a.before, work / "before")
    rows = []
    try:
        for mb in a.mb:
            copies = max(1, round(mb * 1e6 / SOURCE.stat().st_size))
            trace = tile_trace(SOURCE, work / f"t{mb}" / "lulesh.prv", copies)
            size = trace.stat().st_size / 1e6
            wh = work / f"wh{mb}"
            ingest = measure(ROOT, ["ingest", str(trace), "--experiment", EXPERIMENT, "-w", str(wh)])
            rows.append((f"{size:.0f}", "ingest", "this checkout", ingest, ""))
            if a.analyse:
                rows.append((f"{size:.0f}", "archetypes", "this checkout",
                             measure(ROOT, COMMANDS["archetypes"][0][:-1] + [str(wh)]), ""))
            for name in a.commands:
                args, out = COMMANDS[name]
                digests = {}
                for label, root in trees.items():
                    shutil.rmtree(wh / ".cache", ignore_errors=True)  # the report's cached sections
                    for stored in wh.glob("experiments/*/pop_metrics.parquet"):  # pop computes what is not stored
                        stored.unlink()
                    target = work / f"{label.replace(' ', '_')}.{out}" if out else None
                    r = measure(root, [x.format(wh=wh, out=target) for x in args])
                    digests[label] = _digest(target) if target is not None else None
                    same = ""
                    if len(digests) == 2 and out and out.endswith(".csv"):
                        same = "same bytes" if len(set(digests.values())) == 1 else "DIFFERENT"
                    rows.append((f"{size:.0f}", name, label, r, same))
                    if target is not None:
                        target.unlink(missing_ok=True)
                    print(rows[-1], file=sys.stderr)
            shutil.rmtree(work / f"t{mb}", ignore_errors=True)
            shutil.rmtree(wh, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"Machine: {machine_description()}; load average {os.getloadavg()[0]:.1f} at the end.", "",
             "| trace MB | command | code | peak RSS MB | CPU s | output |", "|---|---|---|---|---|---|"]
    for size, name, label, r, same in rows:
        rss = f"{r['rss_mb']:,.0f}" + ("" if r["code"] == 0 else f" (exit {r['code']}: {r['error'][:60]})")
        lines.append(f"| {size} | {name} | {label} | {rss} | {r['cpu_s']:.1f} | {same} |")
    emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
