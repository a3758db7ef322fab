"""What the check of an OTF2 events file's chunks costs when a trace opens (chunk23, attack 22 F1): before, each
chunk's 18-byte header was read; now each chunk is read and its records walked for its first and last timestamps.
Times ``events_end`` of every events file of an archive with the module as it was at ``--base`` and as it is.

usage: python benchmarks/bench_otf2_chunk_chain.py ARCHIVE_FOLDER [--base COMMIT] [--repeat N]
(ARCHIVE_FOLDER holds ``traces.otf2`` and ``traces/*.evt``; the chunk size is read from the anchor.)"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from synthtrace.tracelib.formats.otf2 import evt_file

MODULE = "tracelib/formats/otf2/evt_file.py"


def _module_at(commit: str):
    """``evt_file`` as it was at ``commit`` (git show), loaded under another name."""
    root = Path(__file__).resolve().parents[1]
    text = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=root, check=True, capture_output=True,
                          text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="bench-evt-")) / "evt_file_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("evt_file_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _chunk_size(anchor: Path) -> int:
    """The archive's events chunk size (bytes), as libotf2 reads it from the anchor."""
    import _otf2

    handle = _otf2.Reader_Open(str(anchor))
    try:
        return int(_otf2.Reader_GetChunkSize(handle)[0])
    finally:
        _otf2.Reader_Close(handle)


def best_seconds(module, files: list[Path], chunk: int, repeat: int) -> float:
    """The best of ``repeat`` times (s) of ``events_end`` over ``files`` (the first call warms the kernels)."""
    for f in files:
        module.events_end(f, chunk, 1 << 62)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for f in files:
            module.events_end(f, chunk, 1 << 62)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path)
    parser.add_argument("--base", default="88bb62a")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    files = sorted((args.archive / "traces").glob("*.evt"))
    chunk = _chunk_size(args.archive / "traces.otf2")
    size = sum(f.stat().st_size for f in files)
    before = best_seconds(_module_at(args.base), files, chunk, args.repeat)
    after = best_seconds(evt_file, files, chunk, args.repeat)
    print(f"{len(files)} events files, {size / 2**20:.1f} MiB, chunks of {chunk / 2**20:g} MiB: "
          f"before ({args.base}) {before * 1e3:.1f} ms, after {after * 1e3:.1f} ms "
          f"({after / size * 2**30 * 1e3:.0f} ms per GiB, page cache warm)")


if __name__ == "__main__":
    sys.exit(main())
