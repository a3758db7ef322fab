"""The Paraver tokenizer kernel before and after a change, on the same bytes in the same process (issue 14: named
parameters for ``_tokenize`` must not slow the ingest).

The earlier kernel is the file ``tracelib/formats/paraver/tokenizer.py`` of ``--before-rev`` (``git show``), the later
one
that file of the work tree; both are loaded the same way, as modules of their own from a temp folder (so neither
has an advantage of cache or placement), and tokenize the same blocks of a real LULESH trace tiled in time (``--mb``),
in the
reader's block size, ``--repeat`` times, the order of the two swapped every time; the lowest CPU time of each is
reported.

    python benchmarks/bench_tokenizer.py --before-rev REV [--mb 300] [--repeat 5] [--trace PRV]

``--trace`` tokenizes that trace instead (e.g. a records-dense shape of ``benchmarks/dense_traces.py``).

Writes benchmarks/results/tokenizer.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402
from synthtrace.tracelib.formats.paraver.header import ParaverHeader  # noqa: E402
from synthtrace.tracelib.formats.paraver.reader import DEFAULT_CHUNK_BYTES, ParaverTrace  # noqa: E402
from testing.paraver_tile import tile_trace  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _blocks(prv: Path) -> tuple[ParaverHeader, int, list[np.ndarray]]:
    """The header, the first record line and the records in blocks of whole lines of about the reader's chunk
    size (the header and communicator lines before them as the reader skips them)."""
    trace = ParaverTrace(prv)
    data = prv.read_bytes()
    body = memoryview(data)[len(trace._prefix):]
    blocks, start = [], 0
    while start < len(body):
        cut = bytes(body[start: start + DEFAULT_CHUNK_BYTES]).rfind(b"\n") + start + 1
        blocks.append(np.frombuffer(body[start:cut], dtype=np.uint8).copy())
        start = cut
    return trace.header, trace._body_line, blocks


def _state(tk, header):
    tasks = [len(t) for t in header.threads_per_task]
    threads = [n for ts in header.threads_per_task for n in ts]
    return tk.TokenizerState(time_scale=header.time_scale, max_raw_time=header.duration_ns // header.time_scale,
                             n_cpus=header.n_cpus,
                             appl_first_task=np.concatenate([[0], np.cumsum(tasks)]).astype(np.int64),
                             task_first_thread=np.concatenate([[0], np.cumsum(threads)]).astype(np.int64))


def _run(tk, header: ParaverHeader, first_line: int, blocks: list[np.ndarray]) -> tuple[float, float, int]:
    """(CPU s, wall s, records) of tokenizing every block once with a fresh state."""
    state, line, records = _state(tk, header), first_line, 0
    c0, w0 = time.process_time(), time.perf_counter()
    for b in blocks:
        n = b.size
        t = tk.tokenize(b, line, state, (n // 200, n // 20, n // 50, n // 1000))
        assert not t.error[0], t.error
        line += t.n_lines
        records += int(t.n_records[1:8].sum())  # the lines read and those read as written twice
    return time.process_time() - c0, time.perf_counter() - w0, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before-rev", required=True)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--trace", type=Path, help="tokenize this .prv instead of the tiled LULESH trace")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tokenizer.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tokenizer-") as tmp:
        tmp = Path(tmp)
        old, new = tmp / "tokenizer_before.py", tmp / "tokenizer_after.py"
        kernel = f"{args.before_rev}:tracelib/formats/paraver/tokenizer.py"
        old.write_bytes(subprocess.run(["git", "show", kernel], cwd=ROOT,
                                       capture_output=True, check=True).stdout)
        new.write_bytes((ROOT / "tracelib" / "formats" / "paraver" / "tokenizer.py").read_bytes())
        before, after = _module("tokenizer_before", old), _module("tokenizer_after", new)
        if args.trace is not None:
            prv = args.trace
        else:
            copies = max(1, round(args.mb * 1e6 / SOURCE.stat().st_size))
            prv = tile_trace(SOURCE, tmp / f"lulesh.x{copies}.prv", copies)
        header, first_line, blocks = _blocks(prv)
        mb = prv.stat().st_size / 1e6
    for tk in (before, after):  # compile (or load) both kernels, outside the timing
        _run(tk, header, first_line, blocks[:1])
    load0 = os.getloadavg()[0]
    runs: dict[str, list[tuple[float, float, int]]] = {"before": [], "after": []}
    for i in range(args.repeat):
        for name, tk in (("before", before), ("after", after))[:: 1 if i % 2 == 0 else -1]:
            runs[name].append(_run(tk, header, first_line, blocks))
    load1 = os.getloadavg()[0]
    (rb, ra) = (min(runs["before"]), min(runs["after"]))
    assert rb[2] == ra[2], "both kernels must keep the same records"
    lines = [
        f"## Paraver tokenizer kernel: {args.before_rev} / this work tree",
        "",
        f"Machine: {machine_description()}; load average {load0:.1f} before, {load1:.1f} after. Command: "
        f"`python benchmarks/bench_tokenizer.py --before-rev {args.before_rev} --mb {args.mb} --repeat "
        f"{args.repeat}{f' --trace {args.trace}' if args.trace else ''}`: {mb:.0f} MB of {prv.name} records "
        f"({ra[2]:,} records) in {len(blocks)} blocks of "
        f"{DEFAULT_CHUNK_BYTES >> 20} MiB, both kernels loaded alike, their order swapped on every run, the lowest "
        f"CPU time of {args.repeat} runs.",
        "",
        "| kernel | CPU s | wall s | MB/s (CPU) |",
        "|---|---|---|---|",
    ]
    for name, r in ((f"before ({args.before_rev})", rb), ("after (this work tree)", ra)):
        lines.append(f"| {name} | {r[0]:.2f} | {r[1]:.2f} | {mb / r[0]:.0f} |")
    lines += ["", f"after / before CPU time: {ra[0] / rb[0]:.3f}", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
