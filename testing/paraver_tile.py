"""Tile a Paraver trace in time: ``copies`` back-to-back repetitions of its records, as if the program ran
its recorded window ``copies`` times. Used to build large inputs for scaling studies and crash tests from a
real trace, so that sizes grow while the record mix stays real."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.header import format_header, parse_header
from synthtrace.tracelib.formats.paraver.reader import companion

_TIME_FIELDS = {"1": (5, 6), "2": (5,), "3": (5, 6, 11, 12)}


def tile_trace(src: str | Path, dest: str | Path, copies: int) -> Path:
    """Write ``dest`` (.prv, with the source's .pcf/.row) holding ``copies`` time-shifted copies of ``src``.

    The header's duration becomes ``copies`` x the source's. Returns the path of the new .prv.
    """
    src, dest = Path(src), Path(dest)
    lines = src.read_text().splitlines()
    header = parse_header(lines[0], str(src))
    if header.time_scale != 1:
        raise TraceFormatError(src, 1, "tile_trace needs a trace timed in ns")
    head = [ln for ln in lines[1:] if ln.startswith(("c:", "#"))]
    # the body as one format string with a {} per time field: a copy is one str.format call
    templates, times = [], []
    for ln in lines[1:]:
        if not ln or ln.startswith(("c:", "#")):
            continue
        f = ln.split(":")
        for i in _TIME_FIELDS.get(f[0], ()):
            times.append(int(f[i]))
            f[i] = "{}"
        templates.append(":".join(f))
    body = "\n".join(templates) + "\n"
    t = np.asarray(times, dtype=np.int64)
    span = header.duration_ns
    out_header = format_header(dataclasses.replace(header, duration_ns=span * copies))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as out:
        out.write(out_header + "\n")
        out.writelines(h + "\n" for h in head)
        for k in range(copies):
            out.write(body.format(*(t + k * span).tolist()))
    for suffix in (".pcf", ".row"):
        if companion(src, suffix).is_file():
            shutil.copyfile(companion(src, suffix), companion(dest, suffix))
    return dest
