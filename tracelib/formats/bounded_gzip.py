"""A gzip-compressed trace read with a bound on how much it may inflate (issue 23 item 4).

Real traces compress 4-6x (text records of a few distinct shapes; the traces of ``../shared/traces``), a very
regular one a few tens of times. A file that inflates far beyond that is a gzip bomb (8.7 MB of gzip holding 2 GB
of newlines), not a trace: reading it would cost minutes every night for nothing. Past :data:`FREE_BYTES` of output,
more than :data:`MAX_RATIO` bytes out per compressed byte read is refused with one clear error.
"""
from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import BinaryIO

from synthtrace.tracelib.errors import TraceFormatError

MAX_RATIO = 100  # decompressed bytes per compressed byte, at most
FREE_BYTES = 64 * 1024 * 1024  # decompressed bytes read before the ratio is checked


class _BoundedGzip(io.RawIOBase):
    """The decompressed bytes of ``path``, stopping with :class:`TraceFormatError` at a bomb's ratio."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "rb")
        self._gzip = gzip.GzipFile(fileobj=self._file, mode="rb")
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        n = self._gzip.readinto(buffer)
        self._out += n
        if self._out > FREE_BYTES and self._out > MAX_RATIO * max(self._file.tell(), 1):
            raise TraceFormatError(self.path, None, f"decompresses to more than {MAX_RATIO} times its compressed "
                                   f"size ({self._out >> 20} MiB from {self._file.tell() >> 10} KiB so far): a gzip "
                                   "bomb, not a trace (real traces compress 4-20 times)")
        return n

    def close(self) -> None:
        if not self.closed:
            self._gzip.close()
            self._file.close()
        super().close()


def open_gzip(path: Path) -> BinaryIO:
    """A buffered reader (``peek``, ``readline``) of the decompressed bytes of ``path``, bounded as above."""
    return io.BufferedReader(_BoundedGzip(path), buffer_size=1 << 20)
