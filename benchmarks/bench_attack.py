"""The attacker's and fault injector's families of issue 23, rerun against the code as it is: escaping exceptions,
data losses and peak memory.

Families (each counted; the run fails loudly if one case breaks its invariant):

1. **Paraver**: ``--paraver N`` structure-aware cases (:mod:`testing.attack_cases`: semantic defects of short real
   traces, floods, gzip; ``--fresh-share`` of them drawn from the defects added by the second rerun and by session
   25's: hostile, redefined and over-the-cap ``c:`` lines, a body cut mid-record) plus the gzip bomb,
   ``--salvage-share`` of them ingested with ``--salvage``, each ``synthtrace ingest``-ed by one long-lived worker
   process (a fresh process per case costs seconds of imports on a loaded machine; a case that takes longer than
   ``--case-timeout-s`` is a hang, and the worker is started again). Invariant: exit 0, or exit 2 with one ``error:``
   line; no traceback; a refused trace leaves no run, no staging and no new warehouse.
2. **OTF2**: ``--otf2 N`` archives with one semantic defect each (:mod:`testing.hostile_otf2`, the fresh ones in the
   same share, with them the damaged chunks of a multi-chunk archive: copied, swapped, cut, garbled), same
   invariant. The worker's peak RSS over both families is the memory figure.
3. **Damaged stored files** (``--damaged N``): commands and night stages' readers on the merged LULESH pair with one
   stored table's files damaged (random bytes, a cut footer, zero bytes, a damaged page), in the same worker:
   exit 0 or one error line, a damaged frame or page always refused naming a damaged file, nothing stored changed.
4. **Kills**: ``--kills N`` writers SIGKILLed at a random moment, in turn: swapping an experiment folder
   (``Warehouse.staged(replace=True)``), the same without atomic exchange killed exactly between the two renames,
   removing and storing a folder again (``remove``/``staged``), replacing one file of a folder
   (``update_dir``), a ``synthtrace sql`` process holding its query's files, and a ``synthtrace ingest`` of a
   real trace or a multi-chunk OTF2 archive (SIGKILL, or SIGINT as a Ctrl-C, sent once the program's first line
   ran: a Ctrl-C inside Python's own start-up is the interpreter's). After each kill the next writer
   (or query) must leave the folder whole, old or new (never mixed, never lost), ``.staging`` empty, and no link
   of the killed query behind; a stopped ingest leaves no run or the whole run, as its Ctrl-C line says.
5. **Queries**: ``--queries N`` queries from two threads while a forked writer adds and removes a second run and
   replaces the first by a new copy of itself: every answer must be a consistent state (the ``runs``, ``bursts``
   and ``mpi_calls`` counts of 1 or 2 whole runs) and no query may fail. ``--queries-by-path N``: the same with
   the queries unable to take links (they bind by path): a consistent state or one refusal line.
6. **SQL** (``--sql``): hostile statements (sandbox escapes, memory and time bombs, every DuckDB type in every
   output format, odd column names), each a ``synthtrace sql`` process at ``--memory-limit 512MiB --timeout 10``:
   exit 0 or one error line, no traceback, refused when it reads outside the warehouse, peak RSS within
   :data:`SQL_RSS_CAP_MB`, stopped within its time limit plus :data:`SQL_GRACE_S`; the warehouse unchanged.

Runs in chunks (``--store`` keeps every chunk's figures; the report adds them up):

    nice -n 10 python benchmarks/bench_attack.py --paraver 400 --otf2 0 --kills 0 --queries 0 --seed 1

Writes the "Run 6" section of benchmarks/results/attack.md (``--out``; the sections before it are kept).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

MEMORY_CAP_MB = 1536
SQL_RSS_CAP_MB = 1536
SQL_MEMORY_LIMIT = "512MiB"
SQL_TIMEOUT_S = 10
SQL_GRACE_S = 60
RUN_HEADING = "## Run 6"
RUN_TITLE = ("(session 6: damaged stored files, one output rule, layout links, planted records; in chunks of <= 5 "
             "minutes)")

_WORKER = """
import contextlib, io, json, resource, sys, threading, time, traceback
from synthtrace.pipelines.cli import main
for line in sys.stdin:
    case = json.loads(line)
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(case["args"] if "args" in case else ["ingest", *case["paths"], "-w", case["warehouse"],
                                                             *(["--salvage"] if case.get("salvage") else [])])
        except BaseException:
            code = -1
            err.write(traceback.format_exc())
        swapped = sys.stderr is not err  # something replaced sys.stderr during the case
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(json.dumps({"code": code, "stderr": err.getvalue(), "peak_mb": peak, "seconds": time.monotonic() - t0,
                      "stderr_swapped": swapped, "threads": sorted(t.name for t in threading.enumerate())}),
          flush=True)
"""


def _one_line_violation(res: dict) -> tuple[str | None, list[str]]:
    """What breaks "exit 0, or exit 2 with one ``error:`` line, no traceback" in a worker's answer (or None), and
    its error lines."""
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    if res["code"] not in (0, 2) or "Traceback" in res["stderr"]:
        return f"escaped: exit {res['code']}", errors
    if [ln for ln in lines if not ln.startswith(("error:", "warning:", "note:"))]:
        return "stray stderr", errors
    if (res["code"] == 2) != bool(errors) or len(errors) > 1:
        return "not one error line", errors
    return None, errors


def _violation(case: dict, res: dict) -> str | None:
    """What is wrong with the outcome of one ingest, or None."""
    why, errors = _one_line_violation(res)
    if why is not None:
        return why
    wh = Path(case["warehouse"])
    if errors and wh.exists():
        return "a refused ingest left a warehouse"
    if not errors and len(list(wh.glob("runs/*/run.parquet"))) != 1:
        return "an accepted trace stored no run"
    if wh.exists() and list((wh / ".staging").iterdir()):
        return "staging left behind"
    return None


class _Worker:
    """The long-lived ingest process; started again after a case it did not answer in time."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        #: the worker's own standard error (what a case wrote past its redirection: C libraries, sys.__stderr__)
        self.own_stderr = tempfile.TemporaryFile("w+")

    def ask(self, case: dict, timeout_s: float) -> dict | None:
        """The worker's answer for ``case``, or None when it hung or died (it is then killed)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.own_stderr, text=True)
        at = self.own_stderr.seek(0, os.SEEK_END)
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close(kill=True)
            return None
        self.own_stderr.seek(at)
        return json.loads(line) | {"worker_stderr": self.own_stderr.read()[-500:]}

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def ingest_family(cases: list[dict], case_timeout_s: float) -> dict:
    """Feed ``cases`` to one worker; counts, violations, peak MB. A case's own ``timeout_s`` overrides
    ``case_timeout_s``."""
    worker = _Worker()
    out = {"cases": 0, "exit0": 0, "exit2": 0, "violations": [], "peak_mb": 0, "by_defect": {}}
    try:
        for case in cases:
            timeout_s = case.get("timeout_s", case_timeout_s)
            res = worker.ask(case, timeout_s)
            out["cases"] += 1
            if res is None:
                out["violations"].append((case["defect"], f"no answer within {timeout_s:.0f} s (hang or crash)",
                                          case["paths"]))
                continue
            out["peak_mb"] = max(out["peak_mb"], res["peak_mb"])
            out["exit0" if res["code"] == 0 else "exit2"] += res["code"] in (0, 2)
            d = out["by_defect"].setdefault(case["defect"] + ("/salvage" if case.get("salvage") else ""), [0, 0])
            d[0 if res["code"] == 0 else 1] += 1
            if (why := _violation(case, res)) is not None:
                out["violations"].append((case["defect"], why, case["paths"], res["stderr"][-500:],
                                          {k: res.get(k) for k in ("seconds", "stderr_swapped", "threads",
                                                                   "worker_stderr")}))
            if out["cases"] % 100 == 0:  # progress
                print(json.dumps({k: v for k, v in out.items() if k != "by_defect"} | {"violations": len(
                    out["violations"])}), flush=True)
            shutil.rmtree(Path(case["paths"][0]).parent, ignore_errors=True)
            shutil.rmtree(case["warehouse"], ignore_errors=True)
    finally:
        worker.close()
    return out


def damaged_family(base: Path, n: int, rnd: random.Random, case_timeout_s: float) -> dict:
    """``n`` commands that read a stored table of the merged LULESH pair with that table's files damaged (random
    bytes, a footer cut behind valid magic bytes, zero bytes, or a data page overwritten behind an intact footer:
    :mod:`testing.attack_cases`), each run by the long-lived worker on a copy. Invariant: exit 0 or 2 with one
    ``error:`` line and no traceback; a damaged file, frame or page, is always refused (a command that exits 0
    after reading a damaged page answered from garbage); a refusal that says a stored file is damaged names one of
    them; a refusal leaves the warehouse as it was."""
    from testing.attack_cases import DAMAGE, DAMAGED_EXPERIMENT, PAGE_DAMAGE, STORED_READERS, add_model_record
    from testing.traces import LULESH_A, LULESH_B, copy_trace, tree_digest

    worker = _Worker()
    stored = base / "damaged-source" / "wh"
    for prv in (LULESH_A, LULESH_B):
        copy_trace(prv, stored.parent / "drop")
    for args in (["ingest", str(stored.parent / "drop"), "--experiment", DAMAGED_EXPERIMENT], ["merge",
                                                                                                DAMAGED_EXPERIMENT]):
        res = worker.ask({"args": [*args, "-w", str(stored)]}, case_timeout_s)
        if res is None or res["code"] != 0:
            raise RuntimeError(f"could not build the warehouse to damage: {args} -> {res}")
    add_model_record(stored)
    kinds = DAMAGE | PAGE_DAMAGE
    out = {"cases": 0, "exit0": 0, "exit2": 0, "violations": [], "peak_mb": 0, "by_defect": {}}
    try:
        for i in range(n):
            table, kind = rnd.choice(sorted(STORED_READERS)), rnd.choice(sorted(kinds))
            pattern, commands, _ = STORED_READERS[table]
            args = rnd.choice(commands)
            case = base / f"damaged-{i}"
            wh = case / "wh"
            shutil.copytree(stored, wh, symlinks=True)
            (case / "out").mkdir()  # the folder of the outputs of report/export: an output's folder is not made
            files = sorted(wh.glob(pattern))
            for f in files:
                f.write_bytes(kinds[kind](f.read_bytes()))
            before = tree_digest(wh)
            argv = [*(a.format(out=case / "out") for a in args), "-w", str(wh)]
            res = worker.ask({"args": argv}, case_timeout_s)
            out["cases"] += 1
            name = f"{table}/{kind}"
            if res is None:
                out["violations"].append((name, f"no answer within {case_timeout_s:.0f} s (hang or crash)", argv))
                continue
            out["peak_mb"] = max(out["peak_mb"], res["peak_mb"])
            out["exit0" if res["code"] == 0 else "exit2"] += res["code"] in (0, 2)
            d = out["by_defect"].setdefault(name, [0, 0])
            d[0 if res["code"] == 0 else 1] += 1
            if (why := _damaged_violation(res, files, kind in DAMAGE, before, tree_digest(wh))) is not None:
                out["violations"].append((name, why, argv, res["stderr"][-500:]))
            shutil.rmtree(case, ignore_errors=True)
    finally:
        worker.close()
    return out


def _damaged_violation(res: dict, files: list[Path], frame: bool, before: dict, after: dict) -> str | None:
    """What is wrong with one command's outcome on a warehouse with ``files`` damaged (``frame``: their frame, which
    every reader checks), or None."""
    why, errors = _one_line_violation(res)
    if why is not None:
        return why
    if res["code"] == 0:  # every command of STORED_READERS reads its table: exit 0 answered from damaged bytes
        return "a damaged file was read as sound" if frame else "exit 0 after reading a damaged page (garbage)"
    if "damaged" in errors[0] and not any(str(f) in errors[0] for f in files):
        return "says damaged but names no damaged file"
    return "a refused command changed the warehouse" if before != after else None


#: the counts a consistent state of the warehouse has: one or two whole runs
_COUNTS = "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts), (SELECT count(*) FROM mpi_calls)"

# ------------------------------------------------------------------------------------------------------- kills
KILL_MODES = ("swap_window", "swap", "remove", "update", "query", "ingest_kill", "ingest_int")
#: the command line as the console script runs it from a terminal (a signal after the command is said too): Ctrl-C
#: raises KeyboardInterrupt even when this bench was started in the background (SIGINT then ignored, inherited)
#: through the console script's own entry module (parafix26: it defers a Ctrl-C while the command line's modules load)
#: It says :data:`_STARTED` on stderr once the entry module holds Ctrl-C: a signal is sent only after that, as a
#: SIGINT inside Python's own start-up (``site``, before any of the program's code) is the interpreter's, not the
#: program's; the time to that line is recorded apart (``startup_s``), the window such a Ctrl-C would hit
_STARTED = "bench-attack: started"
_CLI = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from synthtrace.pipelines.entry import main; "
        f"sys.stderr.write({_STARTED!r} + '\\n'); sys.stderr.flush(); sys.exit(main())")


def _window_renames(rnd: random.Random) -> None:
    """In a forked child: no atomic exchange, and SIGKILL itself between the two renames of a swap after a few."""
    from synthtrace.warehouse import layout

    layout._exchange = lambda a, b: False
    real, left = os.rename, rnd.randint(0, 3)

    def rename(src, dst):
        nonlocal left
        real(src, dst)
        if ".old." in str(dst):
            if left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            left -= 1
    os.rename = rename


def _writer(root: Path, mode: str, seed: int) -> None:
    """In a forked child: change ``experiments/x`` (files a, b, c holding one version number) forever, by
    ``mode``: swap it for a new version, remove it and store it again, or replace its file b alone."""
    from synthtrace.warehouse import layout

    wh = layout.Warehouse(root)
    rnd = random.Random(seed)
    if mode == "swap_window":
        _window_renames(rnd)
    target = wh.experiment_dir("x")
    version = 0
    while True:
        version += 1
        if mode in ("swap", "swap_window"):
            with wh.staged(target, replace=True) as stage:
                for name in "abc":
                    (stage / name).write_text(str(version))
        elif mode == "remove":
            wh.remove(target)
            with wh.staged(target) as stage:
                for name in "abc":
                    (stage / name).write_text(str(version))
        else:  # update: b alone, through update_dir (a and c kept by hard link)
            import polars as pl

            wh.update_dir(target, {"b": pl.DataFrame({"version": [version]})})


def _folder_problem(target: Path, mode: str) -> str | None:
    """What is wrong with ``experiments/x`` after a kill and the next writer's recovery, or None. A whole state
    includes its checksums (issue 23): every file matches the folder's ``checksums.json``."""
    from synthtrace.warehouse.checksums import content_damage
    from synthtrace.warehouse.layout import MANIFEST

    if mode == "remove" and not target.exists():
        return None  # killed between remove and the new version: removed, which is a whole state
    if not target.is_dir():
        return "the folder is gone"
    names = sorted(p.name for p in target.iterdir() if p.name != MANIFEST)
    if (bad := [n for n in names if (target / n).is_file() and content_damage(target / n) is not None]):
        return f"files that do not match the folder's checksums: {bad}"
    if mode == "update":
        import polars as pl

        if names != ["a", "b.parquet", "c"] or {(target / n).read_text() for n in "ac"} != {"0"}:
            return f"files lost or changed: {names}"
        try:
            pl.read_parquet(target / "b.parquet")
        except Exception as exc:  # any unreadable file is the violation
            return f"b.parquet unreadable: {exc}"
        return None
    versions = {(target / n).read_text() for n in "abc" if (target / n).is_file()}
    return None if names == ["a", "b", "c"] and len(versions) == 1 else f"mixed or partial folder {names} {versions}"


_QUERY_LOOP = """
import sys
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.sql import query_rows
wh = Warehouse(sys.argv[1])
print("ready", flush=True)
while True:
    query_rows(wh, sys.argv[2])
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    except OSError:
        return []


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_a_query(base: Path, rnd: random.Random, expected: tuple) -> str | None:
    """Start a process querying the warehouse in a loop, SIGKILL it at a random moment; the next query must answer
    ``expected`` and leave no link of either behind."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows

    wh = Warehouse(base / "wh-kill-query")
    proc = subprocess.Popen([sys.executable, "-c", _QUERY_LOOP, str(wh.root), _COUNTS], stdout=subprocess.PIPE,
                            text=True)
    proc.stdout.readline()
    time.sleep(rnd.uniform(0.0, 0.5))
    children = _children(proc.pid)  # the query process the loop had forked at that moment, if any
    proc.kill()
    proc.wait()
    proc.stdout.close()
    deadline = time.monotonic() + 10

    def held() -> list[str]:  # links of a query whose lease is held: one forked after the children were sampled
        return [p.name for p in wh.staging_dir.glob("query.*") if wh.owner_alive(p.name.rsplit(".", 1)[-1])]

    while (alive := [c for c in children if _running(c)] or held()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive:
        return f"the query process {alive} outlived its killed caller"
    got = query_rows(wh, _COUNTS)[1][0]
    if got != expected:
        return f"after a killed query the next one answered {got}, not {expected}"
    if left := list(wh.staging_dir.iterdir()):
        return f"left in .staging: {[p.name for p in left]}"
    return None


def _ingest_process(trace: Path, root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CLI, "ingest", str(trace), "-w", str(root)], text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's code


def _started(proc: subprocess.Popen) -> tuple[bool, str]:
    """(whether it said :data:`_STARTED`, what it wrote on stderr before) of a child of :func:`_ingest_process`,
    read up to that line or its end."""
    before = []
    for line in proc.stderr:
        if line.rstrip("\n") == _STARTED:
            return True, "".join(before)
        before.append(line)
    return False, "".join(before)


def _ingest_whole(trace: Path, root: Path) -> tuple[float, tuple]:
    """(seconds from its start line to its end, the counts of :data:`_COUNTS`) of one ingest of ``trace`` left to
    end."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows

    proc = _ingest_process(trace, root)
    said, before = _started(proc)
    t0 = time.monotonic()
    _, err = proc.communicate()
    if proc.returncode != 0 or not said:
        raise RuntimeError(f"could not ingest {trace}: {(before + err)[-500:]}")
    return time.monotonic() - t0, query_rows(Warehouse(root), _COUNTS)[1][0]


def _stop_an_ingest(root: Path, trace: Path, whole: tuple[float, tuple], sig: int, rnd: random.Random,
                    startups: list[float]) -> str | None:
    """``synthtrace ingest`` of ``trace`` sent ``sig`` (SIGKILL, or SIGINT as a Ctrl-C) at a random moment of the
    time a whole ingest took (``whole``: its seconds and counts), counted from the moment it said it started (its
    seconds to that appended to ``startups``; a child that never says it is a violation: nothing was tested). After
    the next writer's recovery the warehouse holds no run or the whole run (every file matching its folder's
    checksums, the counts of a whole ingest) and an empty ``.staging``; a Ctrl-C ends in exit 0, or 130 with one
    line that says what was stored, as stored."""
    from synthtrace.warehouse.checksums import content_damage
    from synthtrace.warehouse.layout import MANIFEST, Warehouse
    from synthtrace.warehouse.sql import query_rows

    t0 = time.monotonic()
    proc = _ingest_process(trace, root)
    said, before = _started(proc)
    startups.append(time.monotonic() - t0)
    if said:
        time.sleep(rnd.uniform(0.0, whole[0]))
        proc.send_signal(sig)
    # read through the same buffered pipe :func:`_started` read from (``communicate(timeout=...)`` reads the raw
    # descriptor and would lose what that buffer already holds); a timer ends a child that does not end
    timed_out = threading.Event()
    timer = threading.Timer(300, lambda: (timed_out.set(), proc.kill()))
    timer.start()
    try:
        err = before + proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
    if timed_out.is_set():
        return f"the ingest did not end within 300 s of {signal.Signals(sig).name}"
    if not said:
        return f"no start line (exit {proc.returncode}), no signal sent: {err[-300:]}"
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("warning:", "note:"))]
    if "Traceback" in err or proc.returncode not in ((0, -signal.SIGKILL) if sig == signal.SIGKILL else (0, 130)):
        return f"exit {proc.returncode}: {err[-300:]}"
    if proc.returncode == 130 and len(lines) != 1:
        return f"exit 130 with {len(lines)} lines: {err[-300:]}"
    if not root.exists():
        return None if proc.returncode != 0 else "exit 0 and no warehouse"
    wh = Warehouse(root).ensure()  # the next writer recovers
    runs = sorted(p for p in wh.runs_dir.iterdir()) if wh.runs_dir.is_dir() else []
    said_stored = proc.returncode == 0 or "stored" in (lines or [""])[-1]
    if len(runs) > 1 or (proc.returncode != -signal.SIGKILL and said_stored != bool(runs)):
        return f"exit {proc.returncode}, said {lines[-1:]}, and {len(runs)} runs stored"
    for run in runs:
        files = [f for f in run.rglob("*") if f.is_file() and f.name != MANIFEST]
        if not (run / "run.parquet").is_file() or any(content_damage(f) is not None for f in files):
            return f"a part run stored: {sorted(f.name for f in files)[:12]}"
        if (got := query_rows(wh, _COUNTS)[1][0]) != whole[1]:
            return f"the stored run counts {got}, a whole ingest {whole[1]}"
    if left := list(wh.staging_dir.iterdir()):
        return f"left in .staging: {[p.name for p in left]}"
    return None


def kill_family(base: Path, n: int, rnd: random.Random) -> dict:
    import polars as pl

    from synthtrace.pipelines.cli import main
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows
    from testing import hostile_otf2
    from testing.traces import LULESH_A, PRIME

    out = {"kills": 0, "by_mode": {m: 0 for m in KILL_MODES}, "window_kills": 0, "recovered_new": 0,
           "violations": []}
    startups: list[float] = []  # seconds from each stopped ingest's spawn to its "started" line
    kq = base / "wh-kill-query"
    assert main(["ingest", str(PRIME), "-w", str(kq)]) == 0
    expected = query_rows(Warehouse(kq), _COUNTS)[1][0]
    # a real trace and a multi-chunk OTF2 archive (the chunk checks, the read's stop checks), each ingested once whole
    traces = [LULESH_A, hostile_otf2.chunked(base / "kill-chunked")] if n > KILL_MODES.index("ingest_kill") else []
    wholes = [_ingest_whole(t, base / f"kill-whole-{i}") for i, t in enumerate(traces)]
    for k in range(n):
        mode = KILL_MODES[k % len(KILL_MODES)]
        out["kills"] += 1
        out["by_mode"][mode] += 1
        if mode == "query":
            if (why := _kill_a_query(base, rnd, expected)) is not None:
                out["violations"].append((k, mode, why))
            continue
        if mode.startswith("ingest"):
            i = (k // len(KILL_MODES)) % len(traces)
            sig = signal.SIGKILL if mode == "ingest_kill" else signal.SIGINT
            if (why := _stop_an_ingest(base / f"k{k}", traces[i], wholes[i], sig, rnd, startups)) is not None:
                out["violations"].append((k, mode, traces[i].name, why))
            shutil.rmtree(base / f"k{k}", ignore_errors=True)
            continue
        root = base / f"k{k}"
        wh = Warehouse(root).ensure()
        target = wh.experiment_dir("x")
        with wh.staged(target) as stage:  # a commit's folder: writers replace no folder no commit wrote
            for name in "ac" if mode == "update" else "abc":
                (stage / name).write_text("0")
            if mode == "update":
                pl.DataFrame({"version": [0]}).write_parquet(stage / "b.parquet")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                _writer(root, mode, k)
            finally:
                os._exit(1)
        if mode != "swap_window":
            time.sleep(rnd.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(status):  # the writer writes until killed: it failed, and nothing was killed
            out["violations"].append((k, mode, f"the writer exited {os.WEXITSTATUS(status)} before its kill"))
        out["window_kills"] += mode == "swap_window" and os.WIFSIGNALED(status)  # only SIGKILL is ever sent
        out["recovered_new"] += mode != "remove" and not target.exists()
        Warehouse(root).ensure()  # the next writer recovers
        if (why := _folder_problem(target, mode)) is not None:
            out["violations"].append((k, mode, why))
        if left := list(wh.staging_dir.iterdir()):
            out["violations"].append((k, mode, f"staging left behind: {[p.name for p in left]}"))
        shutil.rmtree(root)
    if startups:  # the start-up window no signal is sent in (Python's own, before the program's first line)
        out["startup_s"] = {"min": round(min(startups), 3), "max": round(max(startups), 3),
                            "median": round(sorted(startups)[len(startups) // 2], 3)}
    return out


# ----------------------------------------------------------------------------------------------------- queries
def _run_churn(root: Path, stop_after_s: float, pause_s: float = 0.05) -> None:
    """In a forked child: add a copy of the warehouse's run under a second id, remove it, and replace the first
    run by a new copy of itself (new files, same content), again and again, pausing up to ``pause_s`` seconds
    (uniformly drawn) after each add and each replace."""
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(root)
    src = next(wh.runs_dir.iterdir())
    end, rnd = time.monotonic() + stop_after_s, random.Random(1)
    while time.monotonic() < end:
        with wh.staged(wh.run_dir("copy0000deadbeef")) as stage:
            shutil.copytree(src, stage, dirs_exist_ok=True)
        time.sleep(rnd.uniform(0.0, pause_s))  # the second run stays a moment
        wh.remove(wh.run_dir("copy0000deadbeef"))
        with wh.staged(src, replace=True) as stage:
            shutil.copytree(src, stage, dirs_exist_ok=True)
        time.sleep(rnd.uniform(0.0, pause_s))


def query_family(base: Path, n: int, by_path: bool = False, pause_s: float = 0.05) -> dict:
    """``n`` queries from two threads during the churn of :func:`_run_churn`. ``by_path``: the queries find no room
    for links in ``.staging`` (as without write access to it) and bind the files by path while the writer still
    commits; a query may then be refused with one line after repeated changes (counted as ``refused``), never
    answered with a mixed state. A writer that stops before the last query is a violation: queries of a warehouse
    nobody changes prove nothing (``.staging`` made a link stopped it at its first commit, attack 6 F2)."""
    from synthtrace.pipelines.cli import main
    from synthtrace.warehouse.errors import WarehouseError
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows
    from testing.traces import PRIME

    root = base / ("wh-queries-by-path" if by_path else "wh-queries")
    assert main(["ingest", str(PRIME), "-w", str(root)]) == 0
    wh = Warehouse(root)
    one = query_rows(wh, _COUNTS)[1][0]
    whole = {one, tuple(2 * v for v in one)}
    out = {"queries": 0, "two_runs_seen": 0, "refused": 0, "violations": [], "one_run": list(one),
           "churn_pause_s": pause_s}
    lock = threading.Lock()
    writer_error = base / f"{root.name}.writer-error"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _run_churn(root, 3600, pause_s)
        except BaseException:
            import traceback

            writer_error.write_text(traceback.format_exc())
        finally:
            os._exit(0)
    if by_path:  # the readers alone cannot take links (no room in .staging); the writer commits as ever
        from synthtrace.warehouse import snapshot

        links_folder, snapshot._links_folder = snapshot._links_folder, lambda *_: None

    def reader(count: int) -> None:
        for _ in range(count):
            refused = False
            try:
                got = query_rows(wh, _COUNTS)[1][0]
                why = None if got in whole else f"inconsistent state: {got}"
            except WarehouseError as exc:  # by path: refused after repeated changes, one line
                refused = by_path and "changed while it was read" in str(exc)
                got, why = (0,), None if refused else f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # every failure is counted
                got, why = (0,), f"{type(exc).__name__}: {exc}"
            with lock:
                out["queries"] += 1
                out["refused"] += refused
                out["two_runs_seen"] += got[0] == 2
                if why:
                    out["violations"].append(why)

    try:
        threads = [threading.Thread(target=reader, args=(n // 2,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stopped = os.waitpid(pid, os.WNOHANG)[0] == pid  # the writer churns until killed: else it failed
        if not stopped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if by_path:
            snapshot._links_folder = links_folder
    if stopped:
        why = writer_error.read_text().strip().splitlines()[-1] if writer_error.exists() else "no error written"
        out["violations"].append(f"the churning writer stopped before the queries ended: {why}")
    return out


# --------------------------------------------------------------------------------------------------------- sql
#: (statement, formats, must be refused: it reads outside the warehouse)
SQL_CASES: list[tuple[str, tuple[str, ...], bool]] = [
    ("SELECT length(repeat('x', 1 << 30)) AS n", ("table",), False),
    ("SELECT list(range) FROM range(50000000)", ("table",), False),
    ("SELECT * FROM range(30000000)", ("table", "json", "csv", "parquet"), False),
    ("SELECT length(string_agg(repeat('x', 100000), ',')) AS n FROM range(20000)", ("table",), False),
    ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t", ("table",), False),
    ("SELECT * FROM range(100000000) ORDER BY random()", ("csv",), False),
    ("SELECT count(*) FROM bursts a, bursts b, bursts c, bursts d", ("table",), False),
    ("SELECT " + "(" * 5000 + "1" + ")" * 5000, ("table",), False),
    ("SELECT " + "+".join(["1"] * 30000), ("table",), False),  # a command-line argument holds 128 KiB
    ("SELECT 1; SELECT 2", ("table",), False),
    # rerun 4: scalars and lists DuckDB builds outside its memory limit, and scalars that ignore its interrupt
    ("SELECT length(range(1 << 28)) AS n", ("table",), False),
    ("SELECT length(list_concat(range(1 << 26), range(1 << 26))) AS n", ("table",), False),
    ("SELECT length(regexp_replace(repeat('a', 1 << 27), 'a', 'bbbb', 'g')) AS n", ("table",), False),
    ("SELECT length(lpad('x', 1 << 30, 'y')) AS n", ("table",), False),
    ("SELECT length(to_json(range(1 << 25))) AS n", ("table",), False),
    ("SELECT length(array_to_string(range(1 << 26), ',')) AS n", ("table",), False),
    ("SELECT length(repeat(repeat('ab', 1 << 14), 1 << 15)) AS n", ("table",), False),
    ("SELECT cardinality(map_from_entries(list_transform(range(1 << 24), x -> (x, x)))) AS n", ("table",), False),
    ("SELECT count(*) FROM (SELECT list(range) AS l FROM range(1 << 27) GROUP BY range % 2)", ("table",), False),
    ("SELECT count(*) FROM (SELECT unnest(range(1 << 28)))", ("table",), False),
    ("SELECT length(json_group_array(range)) AS n FROM range(1 << 27)", ("table",), False),
    ("SELECT levenshtein(repeat('a', 200000), repeat('b', 200000)) AS d", ("table",), False),
    ("SELECT range(1 << 22) AS l", ("csv", "json", "parquet"), False),
    ("SELECT * FROM read_parquet('.staging/query.*/0.parquet')", ("table",), True),
    ("SELECT * FROM read_parquet('runs/*/run.parquet')", ("table",), True),
    ("SELECT * FROM parquet_metadata('/etc/passwd')", ("table",), True),
    ("FROM query('SELECT * FROM read_text(''/etc/passwd'')')", ("table",), True),
    ("SELECT * FROM read_blob('/proc/self/environ')", ("table",), True),
    ("SELECT * FROM read_csv('/proc/self/fd/0')", ("table",), True),
    ("SELECT * FROM read_parquet('/proc/self/fd/3')", ("table",), True),
    ("SELECT * FROM read_parquet('/proc/self/cwd/../../etc/passwd')", ("table",), True),
    ("SELECT * FROM glob('/**')", ("table",), True),
    ("SELECT * FROM sniff_csv('/etc/passwd')", ("table",), True),
    ("SELECT * FROM read_json_auto('/etc/hostname')", ("table",), True),
    ("SELECT * FROM read_parquet('https://example.com/x.parquet')", ("table",), True),
    ("SELECT * FROM duckdb_secrets()", ("table",), True),
    ("SELECT * FROM read_parquet(['/etc/passwd', '/etc/hostname'])", ("table",), True),
    ("SELECT * FROM 'runs/../../../../etc/passwd'", ("table",), True),
    ("SELECT 'x'::BLOB AS b, INTERVAL 1 DAY AS i, uuid() AS u, 'nan'::DOUBLE AS n, 'inf'::DOUBLE AS f, "
     "[1, 2] AS l, {'a': 1} AS st, MAP {'k': 2} AS m, 1.5::DECIMAL(38, 10) AS d, 'infinity'::DATE AS dt, "
     "now() AS ts, 170141183460469231731687303715884105727::HUGEINT AS h, 'a' || chr(0) || 'b' AS nul, "
     "union_value(k := 1) AS un, '\\x80'::BLOB AS b2, 18446744073709551615::UBIGINT AS ub, '12:00'::TIME AS t, "
     "'2020-01-01 00:00:00+05'::TIMESTAMPTZ AS tz, '101'::BIT AS bi, [INTERVAL 1 HOUR] AS li, "
     "{'u': union_value(k := 2)} AS su, 10::VARINT AS vi, 'a'::ENUM('a', 'b') AS en",
     ("table", "json", "csv", "parquet"), False),
    ("SELECT 1 AS a, 2 AS a, 3 AS \"A\"", ("table", "json", "csv", "parquet"), False),
    ("SELECT 1 AS \"line\nbreak\", 2 AS \"quote\"\"\", 3 AS \"\x1b[31mred\", 4 AS \"\u202eevil\"",
     ("table", "json", "csv", "parquet"), False),
    ("SELECT 1 WHERE false", ("table", "json", "csv", "parquet"), False),
    ("SELECT [[[[1]]]] AS deep, [] AS empty_list, NULL AS nothing, [NULL] AS ln, {'': 1} AS empty_key",
     ("table", "json", "csv", "parquet"), False),
    ("SELECT 'x' AS \"" + "c" * 60000 + "\"", ("table", "json", "csv", "parquet"), False),
    ("SELECT chr(27) || '[2J' || chr(27) || '[31m pwned' AS s, 'a' || chr(10) || 'error: forged' AS t",
     ("table", "json", "csv"), False),
    ("SELECT 1/0, 0/0", ("table", "json"), False),
    ("SELECT pg_sleep(1)", ("table",), False),
    ("SUMMARIZE SELECT * FROM bursts", ("table", "json", "csv", "parquet"), False),
    ("EXPLAIN (FORMAT JSON) SELECT * FROM runs", ("table", "json", "csv", "parquet"), False),
    ("DESCRIBE SELECT 'x'::BLOB", ("table", "json", "csv", "parquet"), False),
    ("SELECT * FROM duckdb_settings()", ("table",), False),
    ("SELECT current_setting('allowed_paths')", ("table",), False),
    ("SELECT * FROM runs, bursts", ("json",), False),
]

_SQL_PROBE = """
import contextlib, io, json, resource, sys, time, traceback
from synthtrace.pipelines.cli import main
err, out = io.StringIO(), io.StringIO()
t0 = time.monotonic()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except BaseException:
        code = -1
        err.write(traceback.format_exc())
print(json.dumps({"code": code, "stderr": err.getvalue()[-2000:], "stdout_bytes": len(out.getvalue()),
                  "seconds": time.monotonic() - t0,
                  "peak_mb": max(resource.getrusage(who).ru_maxrss >> 10
                                 for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))}))
"""


def _sql_violation(res: dict, refused: bool) -> str | None:
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    if res["code"] not in (0, 2) or "Traceback" in res["stderr"]:
        return f"escaped: exit {res['code']}"
    if len(lines) > 1:
        return f"{len(lines)} stderr lines"
    if refused and res["code"] != 2:
        return "answered a read outside the warehouse"
    if res["peak_mb"] > SQL_RSS_CAP_MB:
        return f"peak RSS {res['peak_mb']} MB over {SQL_RSS_CAP_MB} MB"
    if res["seconds"] > SQL_TIMEOUT_S + SQL_GRACE_S:
        return f"ran {res['seconds']:.0f} s at --timeout {SQL_TIMEOUT_S}"
    return None


def sql_family(base: Path, part: tuple[int, int] = (1, 1)) -> dict:
    """The statements of :data:`SQL_CASES` (``part`` = (k, n): the k-th of n interleaved shares of them)."""
    from synthtrace.pipelines.cli import main
    from testing.traces import PRIME, tree_digest

    wh = base / "wh-sql"
    assert main(["ingest", str(PRIME), "-w", str(wh)]) == 0
    before = tree_digest(wh)
    out = {"cases": 0, "exit0": 0, "exit2": 0, "violations": [], "peak_mb": 0, "max_seconds": 0.0}
    k, n = part
    for statement, formats, refused in SQL_CASES[k - 1::n]:
        for fmt in formats:
            target = base / f"sql-out.{fmt}"
            args = ["sql", statement, "-w", str(wh), "-f", fmt, "--timeout", str(SQL_TIMEOUT_S),
                    "--memory-limit", SQL_MEMORY_LIMIT, *(["-o", str(target)] if fmt == "parquet" else [])]
            try:
                proc = subprocess.run([sys.executable, "-c", _SQL_PROBE, *args], capture_output=True, text=True,
                                      timeout=SQL_TIMEOUT_S + SQL_GRACE_S + 60, cwd=wh,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's code
                res = json.loads(proc.stdout.splitlines()[-1])
            except (subprocess.TimeoutExpired, IndexError, ValueError) as exc:
                res = {"code": -9, "stderr": f"probe died: {type(exc).__name__}", "peak_mb": 0, "seconds": 0.0}
            out["cases"] += 1
            out["exit0" if res["code"] == 0 else "exit2"] += res["code"] in (0, 2)
            if res["peak_mb"] > out["peak_mb"]:
                out["peak_mb"], out["peak_case"] = res["peak_mb"], [statement[:120], fmt]
            out["max_seconds"] = max(out["max_seconds"], res["seconds"])
            if (why := _sql_violation(res, refused)) is not None:
                out["violations"].append((statement[:80], fmt, why, res["stderr"][-300:]))
            target.unlink(missing_ok=True)
    if (after := tree_digest(wh)) != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        out["violations"].append(("(all)", "-", "the warehouse changed", f"{changed[:10]}"))
    return out


# ---------------------------------------------------------------------------------------------- snapshot cost
def snapshot_cost(base: Path, n_runs: int) -> dict:
    """Seconds to take hold of the files of ``runs``, ``bursts`` and ``mpi_calls`` in a warehouse of ``n_runs``
    runs: linked (:mod:`synthtrace.warehouse.snapshot`, what a query does now) against the listing by path it
    replaced (:func:`synthtrace.warehouse.catalog.view_files`), best and median of 5, same run."""
    import statistics

    from synthtrace.warehouse import snapshot
    from synthtrace.warehouse.catalog import view_files
    from testing.stored_runs import warehouse_with_runs

    wh = warehouse_with_runs(base / "wh-snapshot", n_runs)
    views = ["runs", "bursts", "mpi_calls"]

    def timed(fn) -> list[float]:
        xs = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - t0)
        return [min(xs), statistics.median(xs)]

    def pin() -> None:
        with snapshot.pinned(wh, views):
            pass

    return {"runs": n_runs, "files": sum(len(v) for v in view_files(wh, views).values()),
            "by_path_s": timed(lambda: view_files(wh, views)), "linked_s": timed(pin), "violations": []}


# -------------------------------------------------------------------------------------------------------- main
def _paraver_cases(base: Path, n: int, rnd: random.Random, fresh_share: float, salvage_share: float) -> list[dict]:
    from testing.attack_cases import (FRESH_PARAVER_DEFECTS, OVER_CAP, PARAVER_DEFECTS, SESSION25_PARAVER_DEFECTS,
                                      gzip_bomb, paraver_case)

    cases = [{"paths": [str(gzip_bomb(base / "bomb"))], "warehouse": str(base / "bomb-wh"), "defect": "gzip_bomb"}]
    if n:  # the c: lines past the reader's cap, once: minutes of a loaded machine's CPU
        cap = paraver_case(base / "cap", rnd, OVER_CAP)[0]
        cases.append({"paths": [str(cap)], "warehouse": str(base / "cap-wh"), "defect": OVER_CAP, "timeout_s": 1200})
    for k in range(n):
        pool = FRESH_PARAVER_DEFECTS + SESSION25_PARAVER_DEFECTS if rnd.random() < fresh_share else PARAVER_DEFECTS
        prv, defect = paraver_case(base / f"p{k}", rnd, rnd.choice(pool))
        cases.append({"paths": [str(prv)], "warehouse": str(base / f"p{k}-wh"), "defect": defect,
                      "salvage": rnd.random() < salvage_share})
    return cases


def _otf2_cases(base: Path, n: int, rnd: random.Random, fresh_share: float, salvage_share: float) -> list[dict]:
    from testing import hostile_otf2
    from testing.attack_cases import otf2_case

    cases = []
    for k in range(n):
        pool = (hostile_otf2.FRESH_DEFECTS + hostile_otf2.CHUNK_DEFECTS if rnd.random() < fresh_share
                else hostile_otf2.DEFECTS)
        anchor, defect = otf2_case(base / f"o{k}" / "archive", rnd, pool, base / "chunked")
        cases.append({"paths": [str(anchor)], "warehouse": str(base / f"o{k}-wh"), "defect": defect,
                      "salvage": rnd.random() < salvage_share})
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paraver", type=int, default=0)
    ap.add_argument("--otf2", type=int, default=0)
    ap.add_argument("--damaged", type=int, default=0, help="commands reading a damaged stored table")
    ap.add_argument("--kills", type=int, default=0)
    ap.add_argument("--queries", type=int, default=0)
    ap.add_argument("--queries-by-path", type=int, default=0,
                    help="the query family with no room for links in .staging: queries bind by path")
    ap.add_argument("--churn-pause-s", type=float, default=0.05,
                    help="--queries-by-path: the writer pauses up to this long after each change")
    ap.add_argument("--sql", action="store_true", help="the hostile statements of SQL_CASES")
    ap.add_argument("--sql-part", default="1/1", help="K/N: the K-th of N interleaved shares of the statements")
    ap.add_argument("--snapshot-runs", type=int, default=0, help="time a query's file snapshot over N runs")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--fresh-share", type=float, default=0.5, help="of the ingest cases, from the fresh defects")
    ap.add_argument("--salvage-share", type=float, default=0.3, help="of the ingest cases, ingested with --salvage")
    ap.add_argument("--case-timeout-s", type=float, default=180.0, help="one ingest case; past it, a hang")
    ap.add_argument("--store", type=Path, default=ROOT / "benchmarks" / "results" / "attack_run6.json")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attack.md")
    ap.add_argument("--heading", default=RUN_HEADING, help="the section of --out the report replaces")
    ap.add_argument("--title", default=RUN_TITLE)
    args = ap.parse_args()

    rnd = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="synthtrace-attack-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    command = " ".join(sys.argv[1:])
    bad = 0
    try:
        for family, wanted, run in (
            ("paraver", args.paraver, lambda: ingest_family(
                _paraver_cases(base, args.paraver, rnd, args.fresh_share, args.salvage_share), args.case_timeout_s)),
            ("otf2", args.otf2, lambda: ingest_family(
                _otf2_cases(base, args.otf2, rnd, args.fresh_share, args.salvage_share), args.case_timeout_s)),
            ("damaged", args.damaged, lambda: damaged_family(base, args.damaged, rnd, args.case_timeout_s)),
            ("kills", args.kills, lambda: kill_family(base, args.kills, rnd)),
            ("queries", args.queries, lambda: query_family(base, args.queries)),
            ("queries_by_path", args.queries_by_path, lambda: query_family(base, args.queries_by_path, True,
                                                                           args.churn_pause_s)),
            ("sql", args.sql, lambda: sql_family(base, tuple(map(int, args.sql_part.split("/"))))),
            ("snapshot", args.snapshot_runs, lambda: snapshot_cost(base, args.snapshot_runs)),
        ):
            if not wanted:
                continue
            t0 = time.monotonic()
            result = run() | {"seconds": time.monotonic() - t0}
            _store_chunk(args.store, {"family": family, "seed": args.seed, "command": command,
                                      "load": os.getloadavg()[0], "at": time.strftime("%H:%M UTC", time.gmtime()),
                                      **result})
            bad += len(result["violations"])
            print(f"{family}: {len(result['violations'])} violations, {result.get('peak_mb', '-')} MB peak, "
                  f"{result['seconds']:.0f} s", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    write_report(args.store, args.out, args.heading, args.title)
    return 1 if bad else 0


def _store_chunk(store: Path, chunk: dict) -> None:
    """Add ``chunk`` to ``store`` (under a lock: chunks of two families may end at once)."""
    import fcntl

    with open(Path(tempfile.gettempdir()) / f"{store.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        chunks = json.loads(store.read_text()) if store.exists() else []
        chunks.append(chunk)
        store.write_text(json.dumps(chunks, indent=1, default=str))


def write_report(store: Path, out: Path, heading: str = RUN_HEADING, title: str = RUN_TITLE) -> None:
    """The ``heading`` section of ``out`` (the text before it kept), from every chunk in ``store`` added up."""
    chunks = [c for c in (json.loads(store.read_text()) if store.exists() else []) if "superseded" not in c]
    fam: dict[str, dict] = {}
    for c in chunks:
        key = c["family"] + (f"@{c.get('churn_pause_s', 0.05)}" if c["family"] == "queries_by_path" else "")
        f = fam.setdefault(key, {"chunks": 0, "seconds": 0.0, "violations": [], "peak_mb": 0, "loads": []})
        f["chunks"] += 1
        f["seconds"] += c["seconds"]
        f["violations"] += c["violations"]
        f["peak_mb"] = max(f["peak_mb"], c.get("peak_mb", 0))
        f["loads"].append(c["load"])
        for key in ("cases", "exit0", "exit2", "kills", "window_kills", "recovered_new", "queries", "two_runs_seen",
                    "refused"):
            f[key] = f.get(key, 0) + c.get(key, 0)
        for name, (a, b) in c.get("by_defect", {}).items():
            prev = f.setdefault("by_defect", {}).get(name, (0, 0))
            f["by_defect"][name] = (prev[0] + a, prev[1] + b)
        for name, v in c.get("by_mode", {}).items():
            modes = f.setdefault("by_mode", {})
            modes[name] = modes.get(name, 0) + v
        if (st := c.get("startup_s")) is not None:  # chunks' medians kept as the largest, a bound not a median
            prev = f.get("startup_s", st)
            f["startup_s"] = {"min": min(prev["min"], st["min"]), "max": max(prev["max"], st["max"]),
                              "median": max(prev["median"], st["median"])}
    loads = [x for f in fam.values() for x in f["loads"]]
    lines = [
        f"{heading} {title}", "",
        f"`nice -n 10 python benchmarks/bench_attack.py ...` in {len(chunks)} chunks (commands and seeds in "
        f"`benchmarks/results/{store.name}`). Machine: {machine_description()}, shared by 7 sessions: 1-minute "
        f"load average {min(loads, default=0):.0f}-{max(loads, default=0):.0f} during the chunks.", "",
        "| family | cases | exit 0 | exit 2 | escaping exceptions / violations | peak RSS | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {"paraver": "Paraver (structure-aware, half fresh, + gzip bomb)", "otf2": "OTF2 (semantic, half fresh)",
             "damaged": "commands reading a damaged stored table (random bytes, cut footer, empty, damaged page, "
                        "one flipped bit)"}
    for key in ("paraver", "otf2", "damaged"):
        if (f := fam.get(key)) is not None:
            lines.append(f"| {names[key]} | {f['cases']} | {f['exit0']} | {f['exit2']} | {len(f['violations'])} | "
                         f"{f['peak_mb']} MB | {f['seconds']:.0f} |")
    if (k := fam.get("kills")) is not None:
        modes = ", ".join(f"{m} {v}" for m, v in k["by_mode"].items())
        lines.append(f"| kill -9 ({modes}; {k['window_kills']} between the two renames, {k['recovered_new']} "
                     f"found mid-swap) | {k['kills']} | | | {len(k['violations'])} data losses | | "
                     f"{k['seconds']:.0f} |")
        if (st := k.get("startup_s")) is not None:
            lines.append(f"| (stopped ingests: signals sent after the program's first line; Python's own start-up "
                         f"before it {st['min']}-{st['max']} s, median <= {st['median']} s) | | | | | | |")
    if (q := fam.get("queries")) is not None:
        lines.append(f"| queries during runs add/rm/replace | {q['queries']} ({q['two_runs_seen']} saw 2 runs) | | | "
                     f"{len(q['violations'])} | | {q['seconds']:.0f} |")
    for key in sorted(k for k in fam if k.startswith("queries_by_path@")):
        q, pause = fam[key], key.split("@")[1]
        lines.append(f"| queries bound by path (no room for links in `.staging`) during runs add/rm/replace, "
                     f"the writer pausing up to {pause} s after each change | {q['queries']} ({q['two_runs_seen']} "
                     f"saw 2 runs, {q['refused']} refused with one line after repeated changes) | | | "
                     f"{len(q['violations'])} | | {q['seconds']:.0f} |")
    if (s := fam.get("sql")) is not None:
        lines.append(f"| hostile `sql` statements x formats (--memory-limit {SQL_MEMORY_LIMIT}, --timeout "
                     f"{SQL_TIMEOUT_S}) | {s['cases']} | {s['exit0']} | {s['exit2']} | {len(s['violations'])} | "
                     f"{s['peak_mb']} MB | {s['seconds']:.0f} |")
    for c in chunks:
        if c["family"] == "snapshot":
            (p_min, p_med), (l_min, l_med) = c["by_path_s"], c["linked_s"]
            lines.append(f"| cost: a query's hold on runs+bursts+mpi_calls, {c['runs']} runs ({c['files']} files) | "
                         f"linked {l_min:.3f} s (median {l_med:.3f}) vs listed by path {p_min:.3f} s (median "
                         f"{p_med:.3f}): x{p_min / l_min:.1f} | | | | | {c['seconds']:.0f} |")
    lines += ["", f"Memory caps judged: {MEMORY_CAP_MB} MB for every ingest input (the worker's peak over all its "
              f"cases); {SQL_RSS_CAP_MB} MB for each `sql` process.", ""]
    for key in ("paraver", "otf2", "damaged"):
        if (f := fam.get(key)) is not None:
            lines += [f"Outcomes per {names[key]} defect (exit 0 / exit 2):", "",
                      ", ".join(f"{d} {a}/{b}" for d, (a, b) in sorted(f["by_defect"].items())), ""]
    violations = [(key, v) for key, f in fam.items() for v in f["violations"]]
    if violations:
        lines += ["Violations:", ""] + [f"- {key}: {v}" for key, v in violations[:60]] + [""]
    text = out.read_text() if out.exists() else "# Attack rerun (issue 23)\n"
    head = text.split(f"\n{heading}", 1)[0].rstrip("\n")
    out.write_text(head + "\n\n" + "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
