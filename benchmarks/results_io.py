"""Writing a benchmark's markdown results: to stdout, and to ``--out`` when given."""
from __future__ import annotations

from pathlib import Path


def emit(text: str, out: Path | None) -> None:
    """Print ``text`` and, with ``out``, write it there (creating the folder)."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
