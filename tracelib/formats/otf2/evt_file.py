"""Where the events of an OTF2 events file end (issue 23, attack 9 C9: ``cat 1.evt 1.evt > 1.evt`` ingested as the
original, silently).

The OTF2 library reads a location's events up to the file's END_OF_FILE record and never looks further, so bytes
after it (an appended copy, another tool's leftovers) are not read by it or by any tool built on it. They are said
(:func:`trailing_bytes`), not refused: the events the definitions announce were read whole, as Vampir and Scalasca
read them, so the run is what the archive describes; the warning names the file and the byte where the unread data
starts.

An events file is a sequence of chunks of the archive's event chunk size (bytes), the last one cut where its data
ends. Each chunk starts with a header: the token :data:`_CHUNK_HEADER`, the endianness byte, and the numbers of its
first and last event (8 bytes each). Then come records: a timestamp (:data:`_TIMESTAMP` and 8 bytes), an attribute
list or an event (its type byte, then its length in one byte, or 0xFF and 8 bytes, then that many bytes), and at
the end of a full chunk :data:`_END_OF_CHUNK` (the rest of the chunk unused), at the end of the file
:data:`_END_OF_FILE` and :data:`_END_OF_BUFFER` (OTF2's ``OTF2_Buffer.h``). Only the chunk headers (18 bytes
each) and the records of the last chunk are read.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from synthtrace.tracelib.jit import cached_njit

_END_OF_CHUNK, _END_OF_BUFFER, _END_OF_FILE, _CHUNK_HEADER, _TIMESTAMP = 0, 1, 2, 3, 5
_HEADER_BYTES = 18  # token, endianness, first event number, last event number
_ENDIANNESS = {0x42: "little", 0x23: "big"}


def trailing_bytes(path: str | os.PathLike, chunk_size: int, n_events: int) -> tuple[int, int] | None:
    """(byte offset where the unread data starts, bytes of it) for the events file ``path`` of a location whose
    definitions announce ``n_events`` events, written in chunks of ``chunk_size`` bytes; None when nothing follows
    its END_OF_FILE record, or when its layout cannot be followed (its events were read by the library: a layout
    this does not know is not said)."""
    size = os.path.getsize(path)
    with open(Path(path), "rb") as fh:
        start = _last_chunk(fh, size, chunk_size, n_events)
        if start is None:
            return None
        fh.seek(start)
        end = _end_of_file(fh.read(min(chunk_size, size - start)))
    if end is None or start + end >= size:
        return None
    return start + end, size - start - end


def _last_chunk(fh, size: int, chunk_size: int, n_events: int) -> int | None:
    """The offset of the chunk holding event ``n_events`` (the last announced), from the chunk headers."""
    for offset in range(0, size, max(chunk_size, _HEADER_BYTES)):
        fh.seek(offset)
        head = fh.read(_HEADER_BYTES)
        if len(head) < _HEADER_BYTES or head[0] != _CHUNK_HEADER or head[1] not in _ENDIANNESS:
            return None
        last = int.from_bytes(head[10:18], _ENDIANNESS[head[1]])
        if last >= n_events:
            return offset
    return None


def _end_of_file(chunk: bytes) -> int | None:
    """The offset in ``chunk`` (the last chunk, from its header) just after its END_OF_FILE record and the
    END_OF_BUFFER that follows it; None when a record runs past the chunk or the chunk ends first."""
    end = _walk(np.frombuffer(chunk, dtype=np.uint8), _ENDIANNESS[chunk[1]] == "little")
    return None if end < 0 else int(end)


@cached_njit
def _walk(chunk: np.ndarray, little: bool) -> int:
    """:func:`_end_of_file` over the chunk's bytes (uint8): the offset, or -1. Compiled: a Python loop took ~40 ms
    of CPU for a full 1 MiB chunk, a location's last chunk at OTF2's default chunk size."""
    at, n = _HEADER_BYTES, chunk.size
    while at < n:
        token = chunk[at]
        if token == _END_OF_FILE:
            return at + 2 if at + 1 < n and chunk[at + 1] == _END_OF_BUFFER else at + 1
        if token == _END_OF_CHUNK or token == _END_OF_BUFFER or token == _CHUNK_HEADER:
            return -1  # not the end of a file's last chunk
        if token == _TIMESTAMP:
            at += 9
            continue
        if at + 1 >= n:
            return -1
        length = np.int64(chunk[at + 1])
        at += 2
        if length == 0xFF:  # a long record: its length in the next 8 bytes
            if at + 8 > n:
                return -1
            length = np.int64(0)
            for i in range(8):
                byte = np.int64(chunk[at + i] if little else chunk[at + 7 - i])
                length |= byte << np.int64(8 * i)
            at += 8
            if length < 0:
                return -1
        at += length
    return -1
