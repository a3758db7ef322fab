"""How long `synthtrace simulate` works on after a SIGTERM (roots27, note26: it did not stop within ~5 s at load
~10): a large simulate is sent SIGTERM once its first ground-truth batch is on disk plus ``--after`` seconds; the
child's CPU time (all threads, s) and wall time from the signal to its exit, its exit code and what it left.

    python benchmarks/bench_roots27_simulate_stop.py --synthtrace /work/main/.venv/bin/synthtrace --after 0 20 40
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def _cpu_s(pid: int) -> float:
    """User + system CPU time (s) of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_once(synthtrace: str, after_s: float, args: list[str]) -> dict:
    """One simulate stopped ``after_s`` seconds after its first truth batch: what the stop cost and left."""
    with tempfile.TemporaryDirectory(prefix="bench-roots27-") as tmp:
        out = Path(tmp) / "sim"
        child = subprocess.Popen([synthtrace, "simulate", str(out), *args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        while child.poll() is None and not any(Path(tmp).glob(".sim.*.part/ground_truth/bursts/*")):
            time.sleep(0.05)
        time.sleep(after_s)
        if child.poll() is not None:
            return {"after_s": after_s, "error": "ended before the signal"}
        cpu0, t0 = _cpu_s(child.pid), time.monotonic()
        child.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - t0
        cpu = usage.ru_utime + usage.ru_stime - cpu0
        left = sorted(p.name for p in Path(tmp).iterdir())
        return {"after_s": after_s, "exit": os.waitstatus_to_exitcode(status), "cpu_after_s": round(cpu, 2),
                "wall_after_s": round(wall, 2), "left": left}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthtrace", required=True)
    parser.add_argument("--after", type=float, nargs="+", default=[0.0, 20.0, 40.0])
    parser.add_argument("--args", default="--pattern halo --ranks 256 --iterations 400 --runs 2")
    a = parser.parse_args()
    for after in a.after:
        print(a.synthtrace, stop_once(a.synthtrace, after, a.args.split()), flush=True)


if __name__ == "__main__":
    main()
