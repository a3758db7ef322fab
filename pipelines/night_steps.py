"""The stages after ingest that the nightly flow runs, as plain functions of (experiment, warehouse).

Each one is included only when the module that implements it is part of this installation; the flow reports
the others as skipped.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def available() -> dict[str, Callable[..., Any]]:
    """Name -> function for every stage implemented here."""
    return {}
