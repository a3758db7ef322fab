"""The machine a benchmark ran on, in one line for the results tables."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def machine_description() -> str:
    """Cores, CPU model, memory and Python version."""
    cpuinfo = Path("/proc/cpuinfo")
    cpu = platform.processor() or "unknown CPU"
    if cpuinfo.is_file():
        cpu = next(
            (ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")), cpu
        )
    mem = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        kb = int(next(ln.split()[1] for ln in meminfo.read_text().splitlines() if ln.startswith("MemTotal")))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return f"{os.cpu_count()} cores ({cpu}){mem}, Python {platform.python_version()}"
