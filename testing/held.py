"""What a call holds at its peak, as tracemalloc counts it: Python objects and numpy buffers (Polars' and pyarrow's
own allocations are not seen)."""
from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def traced_peak(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and the most bytes allocated while it ran and not yet freed (its peak)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
