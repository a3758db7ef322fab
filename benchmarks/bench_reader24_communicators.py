"""What reading a ``.prv`` header's communicator lines holds (attack 23 F6): a header of 64 MiB of empty
communicator lines (``c:1:<id>:0``, ~4.7M lines) or of one line listing ~8M tasks, read by
``communicator_members`` as it was at ``--base`` and as it is, each in a child process (its peak RSS, MB).
``--padded`` (issue 23, mem25): instead, one line of 3 tasks under the cap padded with blanks after them, or with
leading zeros before its first task, or one line of zero-padded 63-digit numbers (parafix26).

usage: python benchmarks/bench_reader24_communicators.py [--base COMMIT] [--mib 63] [--padded]"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "tracelib/formats/paraver/communicators.py"
HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(1):1:1(1:1)\n"
CHILD = """
import importlib.util, inspect, resource, sys, time
spec = importlib.util.spec_from_file_location("communicators_read", sys.argv[1])
module = importlib.util.module_from_spec(spec); sys.modules[spec.name] = module; spec.loader.exec_module(module)
prefix = open(sys.argv[2], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
start = time.perf_counter()
tasks = ((1 << 21) - 1,)  # every task these headers list is declared (a module since parafix26 checks it)
declared = "tasks" in inspect.signature(module.communicator_members).parameters
frame, said = module.communicator_members(prefix, "t.prv", *((tasks,) if declared else ()))
print(f"{before} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} {time.perf_counter() - start:.1f} "
      f"{frame.height} {len(said)}")
"""


def _headers(folder: Path, mib: int) -> dict[str, Path]:
    """The two hostile headers, written once into ``folder``."""
    empty, wide = folder / "empty.prv", folder / "wide.prv"
    with empty.open("wb") as out:
        out.write(HEAD)
        written, comm = len(HEAD), 1
        while written < mib << 20:
            block = b"".join(b"c:1:%d:0\n" % c for c in range(comm, comm + 100_000))
            out.write(block)
            written, comm = written + len(block), comm + 100_000
    tasks = (mib << 20) // 8
    with wide.open("wb") as out:
        out.write(HEAD + b"c:1:1:%d" % tasks)
        for low in range(0, tasks, 100_000):
            out.write(b"".join(b":%d" % (1_000_000 + k % 1_000_000) for k in range(low, min(low + 100_000, tasks))))
        out.write(b"\n")
    return {"empty lines": empty, "one wide line": wide}


def _padded(folder: Path, mib: int) -> dict[str, Path]:
    """Headers of one valid line listing 3 tasks, ``mib`` MiB of blanks or zeros in it, and of one line of ``mib``
    MiB of zero-padded 63-digit numbers (review25 C1), written into ``folder``."""
    blanks, zeros, padded = folder / "blanks.prv", folder / "zeros.prv", folder / "padded63.prv"
    blanks.write_bytes(HEAD + b"c:1:1:3:1:2:3" + b" " * (mib << 20) + b"\n")
    zeros.write_bytes(HEAD + b"c:1:1:3:" + b"0" * (mib << 20) + b"1:2:3\n")
    numbers = (mib << 20) // 64
    padded.write_bytes(HEAD + b"c:1:1:%d:" % numbers + b":".join([b"0" * 62 + b"1"] * numbers) + b"\n")
    return {"one line padded with blanks": blanks, "one line padded with leading zeros": zeros,
            "one line of zero-padded 63-digit numbers": padded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="2ef7c60", help="the commit to compare with")
    parser.add_argument("--mib", type=int, default=63, help="size of each header (MiB)")
    parser.add_argument("--padded", action="store_true", help="lines of 3 tasks padded with blanks or zeros")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp(prefix="bench-comms-"))
    before = folder / "communicators_before.py"
    before.write_text(subprocess.run(["git", "show", f"{args.base}:{MODULE}"], cwd=root, check=True,
                                     capture_output=True, text=True).stdout)
    print("| header | module | RSS before the call (MB) | peak RSS (MB) | s | rows | warnings |")
    print("|---|---|---|---|---|---|---|")
    for name, header in (_padded if args.padded else _headers)(folder, args.mib).items():
        for label, module in ((args.base, before), ("worktree", root / MODULE)):
            out = subprocess.run([sys.executable, "-c", CHILD, str(module), str(header)], check=True,
                                 capture_output=True, text=True).stdout.split()
            print(f"| {name} | {label} | " + " | ".join(out) + " |", flush=True)


if __name__ == "__main__":
    main()
