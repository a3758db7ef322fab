"""Attack 21 F5: an output killed mid-write (SIGKILL, the OOM killer, a batch job's time limit) left its hidden
part file (``.NAME.<random>.part``) beside the output for good: no later write removed it (a cron'd export killed
each night piles up gigabytes, unseen). The next write of the same output removes part files nobody holds; a
part file a live writer holds is left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from synthtrace.tracelib.atomic_file import write_atomically

_HOLD = """
import sys, time
from pathlib import Path
from synthtrace.tracelib.atomic_file import write_atomically

def slow(tmp: Path) -> None:
    tmp.write_bytes(b"x" * 1000)
    print("writing", flush=True)
    time.sleep(600)

write_atomically(Path(sys.argv[1]), slow)
"""


def _writer(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    return proc


def _parts(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.part"))


def test_a_killed_writers_part_file_is_removed_by_the_next_write(tmp_path):
    out = tmp_path / "result.csv"
    proc = _writer(out)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(_parts(out)) == 1  # what the kill left: its finally never ran
    write_atomically(out, lambda p: p.write_text("a,b\n1,2\n"))
    assert out.read_text() == "a,b\n1,2\n"
    assert _parts(out) == []


def test_a_live_writers_part_file_is_left_alone(tmp_path):
    out = tmp_path / "result.csv"
    proc = _writer(out)
    try:
        held = _parts(out)
        write_atomically(out, lambda p: p.write_text("other\n"))
        assert _parts(out) == held and held[0].stat().st_size == 1000
    finally:
        proc.kill()
        proc.wait()


def test_a_folder_named_like_a_part_is_not_touched(tmp_path):
    out = tmp_path / "result.csv"
    folder = tmp_path / ".result.csv.0123abcd.part"
    folder.mkdir()
    (folder / "keep").write_text("k")
    os.utime(folder, (time.time() - 3600,) * 2)
    write_atomically(out, lambda p: p.write_text("x\n"))
    assert (folder / "keep").read_text() == "k"
