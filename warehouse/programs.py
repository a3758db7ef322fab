"""Program identity of the warehouse's runs (issue 28 item 3): runs of one program are one program whatever their
file names or scales.

At ingest a run's :class:`~synthtrace.tracelib.formats.program.ProgramSymbols` (its binary and its own symbols) are
compared with the programs already in the warehouse:

- the same binary name is the same program, a different binary name a different one;
- without a binary name, symbol sets that overlap by :data:`SAME_PROGRAM_JACCARD` or more (Jaccard) are one program;
  fewer than :data:`MIN_SYMBOLS` symbols say nothing (the run is its own program, named as before).

The run's program key is stored beside it (``program.json``); :func:`run_programs` reads them back for the folds of
every evaluation on unseen programs, and :func:`choose_program` gives the default app when ``--app`` is not given:
the binary's name, else the app of the matching program's first run, else the name from the file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from synthtrace.tracelib.formats.program import ProgramSymbols
from synthtrace.warehouse.layout import Warehouse

PROGRAM_FILE = "program.json"
#: symbol sets at least this similar (Jaccard) are one program (runs of one binary at other scales share ~0.9;
#: kernels of one benchmark suite sharing its harness ~0.6)
SAME_PROGRAM_JACCARD = 0.8
#: fewer of the program's own symbols than this do not identify it
MIN_SYMBOLS = 3


@dataclass(frozen=True)
class Program:
    """A run's program: its ``key`` (None: unidentified), the ``app`` to default to (None: from the file name), and
    what it was identified from."""

    key: str | None
    app: str | None
    symbols: ProgramSymbols

    def write(self, run_dir: Path) -> None:
        """Store the identity beside a run (its staged directory)."""
        (run_dir / PROGRAM_FILE).write_text(json.dumps({
            "key": self.key, "binary": self.symbols.binary, "symbols": sorted(self.symbols.symbols)}))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _symbol_key(symbols: frozenset[str]) -> str:
    return "symbols:" + hashlib.sha256("\n".join(sorted(symbols)).encode()).hexdigest()[:16]


def _stored(wh: Warehouse) -> list[tuple[str, dict]]:
    """(run_id, stored identity) of every run that has one, by run id."""
    if not wh.runs_dir.is_dir():
        return []
    out = []
    for f in sorted(wh.runs_dir.glob(f"*/{PROGRAM_FILE}")):
        try:
            out.append((f.parent.name, json.loads(f.read_text())))
        except (OSError, ValueError):
            continue  # a damaged identity file only loses the match
    return out


def choose_program(wh: Warehouse, symbols: ProgramSymbols) -> Program:
    """The program of a run about to be ingested, matched against the runs already in ``wh``."""
    if symbols.binary:
        return Program(symbols.binary, symbols.binary, symbols)
    if len(symbols.symbols) < MIN_SYMBOLS:
        return Program(None, None, symbols)
    from synthtrace.warehouse.runs import runs_table
    best: tuple[float, str, str] | None = None
    for run_id, stored in _stored(wh):
        if stored.get("binary") or not stored.get("key"):
            continue
        score = jaccard(symbols.symbols, frozenset(stored.get("symbols", ())))
        if score >= SAME_PROGRAM_JACCARD and (best is None or score > best[0]):
            best = (score, run_id, stored["key"])
    if best is None:
        return Program(_symbol_key(symbols.symbols), None, symbols)
    runs = runs_table(wh)
    apps = runs.filter(runs["run_id"] == best[1])["app"].to_list() if runs.height else []
    return Program(best[2], apps[0] if apps else None, symbols)


def run_programs(wh: Warehouse) -> dict[str, str]:
    """run_id -> program key, for the runs whose program was identified."""
    return {run_id: s["key"] for run_id, s in _stored(wh) if s.get("key")}
