"""The real traces in ../shared/traces (or $SYNTHTRACE_TRACES), and copies of them to break."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SYNTHTRACE_TRACES", ROOT.parent / "shared" / "traces"))
PARAVER = TRACES / "paraver"
LULESH_A = PARAVER / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
LULESH_B = PARAVER / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv"
PRIME = PARAVER / "prime_v0.prv"
JACOBI = PARAVER / "jacobi-2d-imper_v0.prv"
ALL_PARAVER = [LULESH_A, LULESH_B, PRIME, JACOBI]


def copy_trace(prv: Path, dest: Path, stem: str | None = None) -> Path:
    """Copy a .prv with its .pcf/.row into ``dest`` (optionally renamed); returns the new .prv path."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = stem or prv.stem
    for suffix in (".prv", ".pcf", ".row"):
        src = prv.with_suffix(suffix)
        if src.exists():
            shutil.copyfile(src, dest / f"{stem}{suffix}")
    return dest / f"{stem}.prv"


def copy_archive(name: str, dest: Path) -> Path:
    """Copy the real OTF2 archive ``TRACES/otf2/<name>`` to ``dest`` (its files writable, to damage); returns
    ``dest``."""
    shutil.copytree(TRACES / "otf2" / name, dest)
    for f in (dest / "traces").iterdir():
        f.chmod(0o644)
    for f in dest.glob("traces.*"):
        f.chmod(0o644)
    return dest


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes (to prove a warehouse is unchanged)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def ingested(root: Path, folder: str, *traces: Path) -> Path:
    """``traces`` copied into ``root/folder`` and ingested (by the CLI, in this process) into the warehouse
    ``root/wh``, which is returned."""
    from synthtrace.pipelines.cli import main

    for prv in traces:
        copy_trace(prv, root / folder)
    assert main(["ingest", str(root / folder), "-w", str(root / "wh")]) == 0
    return root / "wh"


#: a small ``.pcf``: counter PAPI_TOT_INS (event type 42000050) and MPI_Reduce (type 50000002, value 9)
SAMPLED_PCF = ("EVENT_TYPE\n7  42000050  PAPI_TOT_INS [Instr completed]\n\n"
               "EVENT_TYPE\n9  50000002  MPI Collective Comm\nVALUES\n0  Outside MPI\n9  MPI_Reduce\n")


def written_trace(prv: Path, header: bytes, body: bytes) -> Path:
    """A hand-written Paraver trace at ``prv``: ``header`` (its first line) and record lines ``body``, with the
    :data:`SAMPLED_PCF` beside it; returns ``prv``."""
    prv.write_bytes(header + body)
    prv.with_suffix(".pcf").write_text(SAMPLED_PCF)
    return prv
