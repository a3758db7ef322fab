"""The Paraver reader's kernel warm-up (tracelib/formats/paraver/reader.py ``_warm_up``): it runs in a background
thread whose failure is silent (the real read reports it), so it is run here in the foreground."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.formats import bursts
from synthtrace.tracelib.formats.paraver import reader


def test_the_warm_up_reads_its_trace_without_joining_the_bursts_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its tiny trace goes through every kernel of the read, and the bursts' parts, which it drops, are not built
    and joined into one frame (note17: ``feed(...)[1]`` concatenated them only to drop them)."""
    joined: list[int] = []
    whole = bursts._whole

    def spy(parts):
        joined.append(1)
        return whole(parts)

    monkeypatch.setattr(bursts, "_whole", spy)
    reader._warm_up()
    assert joined == []
