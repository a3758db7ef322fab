"""Fuzzing ``synthtrace ingest`` with seeded mutations of the real traces in ../shared/traces.

Each case copies a real trace, damages it (bytes flipped, lines cut, duplicated, swapped or emptied, digits
grown to 30 characters, fields dropped, the file truncated, the .pcf/.row garbled, an OTF2 archive's files
flipped or cut) and runs the CLI on it. Whatever the damage, the outcome is exit 0, or exit 2 with one error
line on stderr; never a traceback, never a hang; on failure the warehouse is exactly as it was.

The cases run in one subprocess per batch (a hang is caught by its timeout); the time budget is bounded by
``SYNTHTRACE_FUZZ_SECONDS`` (default 60 s) and the seed by ``SYNTHTRACE_FUZZ_SEED``, printed on failure.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testing.traces import JACOBI, LULESH_B, PRIME, TRACES, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]

BUDGET_S = float(os.environ.get("SYNTHTRACE_FUZZ_SECONDS", "60"))
SEED = int(os.environ.get("SYNTHTRACE_FUZZ_SEED", "20261201"))
CASE_TIMEOUT_S = 120  # one batch of cases; a hang ends here
OTF2_ARCHIVES = [TRACES / "otf2" / "ping-pong-otf2", TRACES / "otf2" / "ping-pong-otf2-papi"]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _mutate_text(data: bytes, rnd: random.Random) -> bytes:
    """One damage of a text file (a .prv, .pcf or .row), drawn from what broken tools and disks produce."""
    lines = _lines(data)
    i = rnd.randrange(len(lines))
    kind = rnd.choice(["flip", "cut", "dup", "swap", "empty", "digits", "drop_field", "truncate", "header", "junk"])
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if kind == "cut":
        del lines[i: i + rnd.randint(1, 50)]
    elif kind == "dup":
        lines[i:i] = lines[i: i + rnd.randint(1, 20)]
    elif kind == "swap":
        j = rnd.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "empty":
        lines[i] = b"\n"
    elif kind in ("digits", "drop_field", "header"):
        k = 0 if kind == "header" else i
        fields = lines[k].rstrip(b"\n").split(b":")
        f = rnd.randrange(len(fields))
        if kind == "drop_field":
            del fields[f]
        else:
            fields[f] = rnd.choice([b"9" * 30, b"18446744073709551616", b"-1", b"", b"0", b"2147483648"])
        lines[k] = b":".join(fields) + b"\n"
    elif kind == "truncate":
        return data[: rnd.randrange(len(data))]
    else:
        lines[i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 200))) + b"\n"
    return b"".join(lines)


def _paraver_case(src: Path, dest: Path, rnd: random.Random) -> Path:
    prv = copy_trace(src, dest)
    target = rnd.choices([prv, prv.with_suffix(".pcf"), prv.with_suffix(".row")], weights=[6, 2, 1])[0]
    target.write_bytes(_mutate_text(target.read_bytes(), rnd))
    return prv


def _otf2_case(src: Path, dest: Path, rnd: random.Random) -> Path:
    shutil.copytree(src, dest)
    for f in dest.rglob("*"):
        f.chmod(0o644 if f.is_file() else 0o755)
    files = [f for f in dest.rglob("*") if f.is_file() and f.suffix in (".otf2", ".def", ".evt")]
    f = rnd.choice(files)
    b = bytearray(f.read_bytes())
    if rnd.random() < 0.3:
        del b[rnd.randrange(len(b)):]
    else:
        for _ in range(rnd.choice([1, 3, 20])):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    f.write_bytes(bytes(b))
    return dest / "traces.otf2"


_RUNNER = """
import contextlib, io, json, sys
from synthtrace.pipelines.cli import main
out = []
for case in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["ingest", *case["paths"], "-w", case["warehouse"]])
        except BaseException as exc:  # what escaped the CLI edge
            import traceback
            code, _ = -1, err.write(traceback.format_exc())
    out.append({"code": code, "stderr": err.getvalue()})
print(json.dumps(out))
"""


def _run_batch(cases: list[dict]) -> list[dict]:
    env = {**os.environ, "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=CASE_TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _check_outcome(case: dict, res: dict, where: str) -> int:
    """The invariants of any ingest of hostile input; returns the exit code."""
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    others = [ln for ln in lines if not ln.startswith(("error:", "warning:", "note:"))]
    assert res["code"] in (0, 2), f"exit {res['code']} {where}"
    assert not others, f"stray stderr lines {where}"
    assert "Traceback" not in res["stderr"], where
    assert len(errors) <= len(case["paths"]), where  # one line per trace that failed
    assert (res["code"] == 2) == bool(errors), where
    wh = Path(case["warehouse"])
    runs = list((wh / "runs").glob("*/run.parquet"))  # a failed trace leaves nothing behind
    assert len(runs) <= len(case["paths"]) - len(errors), where
    assert not list((wh / ".staging").glob("*")), where
    if len(errors) == len(case["paths"]):
        assert not wh.exists(), f"a refused ingest created a warehouse {where}"
    return res["code"]


def _checked_batch(cases: list[dict], batch_no: int) -> list[int]:
    """Ingest ``cases`` in one subprocess and check each outcome (:func:`_check_outcome`); their exit codes."""
    try:
        results = _run_batch(cases)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ingest hung on one of {cases} (seed {SEED}, batch {batch_no})")
    return [_check_outcome(case, res, f"(seed {SEED}, batch {batch_no}, {case.get('defect', 'mutated')}) "
                                      f"{case['paths']}:\n{res['stderr'][-3000:]}")
            for case, res in zip(cases, results)]


def test_structure_aware_cases_give_exit_0_or_one_line(tmp_path):
    """Issue 23: well-formed traces with one semantic defect each (counts out of range, records outside the
    header's resources, counters named like key columns, 2^63 timestamps, NaN metrics, sends outside the world,
    floods; and the fresh mutations of the third attack rerun), Paraver and OTF2, until half the time budget is
    spent; every Paraver defect is drawn at least once."""
    from testing import hostile_otf2
    from testing.attack_cases import FRESH_PARAVER_DEFECTS, PARAVER_DEFECTS, otf2_case, paraver_case

    rnd = random.Random(SEED + 1)
    deadline = time.monotonic() + BUDGET_S / 2
    todo = list(PARAVER_DEFECTS + FRESH_PARAVER_DEFECTS)
    batch_no, n_cases, defects = 0, 0, set()
    while todo or time.monotonic() < deadline:
        batch_no += 1
        cases = []
        for k in range(8):
            case_dir = tmp_path / f"s{batch_no}" / f"c{k}"
            if todo:
                path, defect = paraver_case(case_dir / "prv", rnd, todo.pop())
            elif rnd.random() < 0.3:
                path, defect = otf2_case(case_dir / "otf2", rnd, hostile_otf2.DEFECTS + hostile_otf2.FRESH_DEFECTS)
            else:
                path, defect = paraver_case(case_dir / "prv", rnd)
            defects.add(defect)
            cases.append({"paths": [str(path)], "warehouse": str(case_dir / "wh"), "defect": defect})
        n_cases += len(_checked_batch(cases, batch_no))
        shutil.rmtree(tmp_path / f"s{batch_no}")
    assert set(PARAVER_DEFECTS + FRESH_PARAVER_DEFECTS) <= defects
    print(f"structure-aware fuzz: {n_cases} cases, {len(defects)} defects (seed {SEED})")


def test_fuzzed_traces_give_exit_0_or_one_line(tmp_path):
    """Batches of mutated copies (2 traces per ingest call, so a failure cannot disturb the next trace), until the
    time budget is spent."""
    rnd = random.Random(SEED)
    sources = [PRIME, JACOBI, LULESH_B]
    deadline = time.monotonic() + BUDGET_S
    n_cases, outcomes = 0, {0: 0, 2: 0}
    batch_no = 0
    while time.monotonic() < deadline:
        batch_no += 1
        cases = []
        for k in range(6):
            case_dir = tmp_path / f"b{batch_no}" / f"c{k}"
            paths = []
            for j in range(2):
                if rnd.random() < 0.25:
                    paths.append(_otf2_case(rnd.choice(OTF2_ARCHIVES), case_dir / f"otf2-{j}", rnd))
                else:
                    paths.append(_paraver_case(rnd.choice(sources), case_dir / f"prv-{j}", rnd))
            wh = case_dir / "wh"
            cases.append({"paths": [str(p) for p in paths], "warehouse": str(wh)})
        for code in _checked_batch(cases, batch_no):
            n_cases += 1
            outcomes[code] += 1
        shutil.rmtree(tmp_path / f"b{batch_no}")
    assert n_cases >= 6
    print(f"fuzz: {n_cases} cases in {BUDGET_S:.0f} s, exit 0: {outcomes[0]}, exit 2: {outcomes[2]} (seed {SEED})")


# ------------------------------------------------------------------ inputs built to exhaust (issue 23 item 4)
_PEAK_RSS = """
import resource, sys, warnings
from pathlib import Path
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.source import open_trace
warnings.simplefilter("ignore")
try:
    source = open_trace(Path(sys.argv[1]))
    outcome = "opened"
except TraceFormatError as exc:
    outcome = str(exc)
try:  # this process's own peak (VmHWM): ru_maxrss also keeps the peak of the process that spawned it (a big
    # xdist worker), which Linux carries over at exec
    peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(peak_kib >> 10)
print(outcome)
"""


def _open_in_child(prv: Path) -> tuple[int, str]:
    """(peak memory in MiB, 'opened' or the error line) of opening ``prv`` in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(prv)], capture_output=True, text=True,
                          timeout=CASE_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak, outcome = proc.stdout.splitlines()[-2:]
    return int(peak), outcome


def _with_body(dest: Path, stem: str, filler: bytes, n: int, compress: bool) -> Path:
    """A copy of PRIME whose header is followed by ``filler`` written ``n`` times, then its records."""
    import gzip

    header, _, body = PRIME.read_bytes().partition(b"\n")
    prv = dest / (f"{stem}.prv.gz" if compress else f"{stem}.prv")
    dest.mkdir(parents=True, exist_ok=True)
    with (gzip.open(prv, "wb", compresslevel=6) if compress else open(prv, "wb")) as fh:
        fh.write(header + b"\n")
        for _ in range(n):
            fh.write(filler)
        fh.write(body)
    for suffix in (".pcf", ".row"):
        shutil.copy(PRIME.with_suffix(suffix), dest / f"{stem}{suffix}")
    return prv


def test_blank_line_flood_after_the_header_takes_bounded_memory(tmp_path):
    """64 MiB of blank lines between the header and the records once took a bytes object per line (an 8.7 MB
    .prv.gz of header and newlines took 6 GB): the lines before the first record are one buffer."""
    prv = _with_body(tmp_path, "flood", b"\r\n" * (1 << 20), 34, compress=False)
    peak_mib, _ = _open_in_child(prv)
    assert peak_mib < 700, f"opening a trace with {prv.stat().st_size >> 20} MiB of blank lines took {peak_mib} MiB"


def test_a_gzip_bomb_is_refused_in_one_line(tmp_path, run_cli):
    """A .prv.gz that inflates a thousandfold (header, 1 GiB of newlines, records) is refused with its reason,
    before its gigabytes are read; a real trace compressed as Extrae users do is read."""
    bomb = _with_body(tmp_path / "bomb", "bomb", b"\n" * (1 << 24), 64, compress=True)
    code, out, err = run_cli("ingest", bomb, "-w", tmp_path / "wh")
    assert code == 2 and "gzip bomb" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "wh" / "runs").exists() or not list((tmp_path / "wh" / "runs").iterdir())
    real = _with_body(tmp_path / "real", "prime", b"", 0, compress=True)
    code, out, err = run_cli("ingest", real, "-w", tmp_path / "wh")
    assert code == 0, err
