"""Where the events of an OTF2 events file end: bytes after its END_OF_FILE record (issue 23, attack 9 C9: ``cat
1.evt 1.evt > 1.evt`` ingested as the original, silently), and a file cut before it (a copy interrupted, a job
killed while it flushed).

The OTF2 library reads a location's events up to the file's END_OF_FILE record and never looks further, so bytes
after it (an appended copy, another tool's leftovers) are not read by it or by any tool built on it. They are said
(:attr:`EventsEnd.trailing`), not refused: the events the definitions announce were read whole, as Vampir and Scalasca
read them, so the run is what the archive describes; the warning names the file and the byte where the unread data
starts.

A file cut before its END_OF_FILE record is worse: the library reads a whole chunk into a buffer of the chunk size,
and past a short file's end it parses the buffer's uninitialised bytes as records (valgrind: "conditional jump
depends on uninitialised value" in ``otf2_buffer_read_header``). What it then returns depends on what the heap held:
garbage events, an error, or a crash of the process (a pytest worker died on it). :func:`events_end` finds such a
file from its own bytes before the library reads it, and how many events are whole before the cut, so a reader can
refuse it or (salvage) ask the library for those events alone; the same walk finds bytes after the END_OF_FILE
record. An END_OF_CHUNK record before a chunk's last event (a record's type byte zeroed) in a chunk other than the
last makes libotf2 skip the chunk's rest and go on with the next chunk: :func:`skipped_events` says which events.
Definitions files share the layout without timestamps; :func:`definitions_damage` finds one cut or zeroed the same
way (attack 20 F17).

An events file is a sequence of chunks of the archive's event chunk size (bytes), the last one cut where its data
ends. Each chunk starts with a header: the token :data:`_CHUNK_HEADER`, the endianness byte, and the numbers of its
first and last event (8 bytes each, counted from 1). Then come records: a timestamp (:data:`_TIMESTAMP` and 8
bytes), an attribute list (:data:`_ATTRIBUTE_LIST`) or an event (its type byte, then its length in one byte, or 0xFF
and 8 bytes, then that many bytes), and at the end of a full chunk :data:`_END_OF_CHUNK` (the rest of the chunk
unused), at the end of the file :data:`_END_OF_FILE` and :data:`_END_OF_BUFFER` (OTF2's ``OTF2_Buffer.h``).
A file of one chunk is read once; of one of several, each chunk's header and first record, its first timestamp (a chunk
never begins before the chunk before it began, attack 22 F1; review23: each chunk was read whole and walked), and the
last chunk whole; every chunk is read when a location's events fall short (:func:`skipped_events`). The events whole in
a cut file are counted from the headers of its complete chunks, each checked against the chunk before, its bytes and the
definitions (:func:`_chained_events`), never from one header's numbers as read (attack 21 F3: a last header saying its
chunk starts at event 2^62 had libotf2 asked for that many events, past the cut).
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from synthtrace.tracelib.jit import cached_njit

_END_OF_CHUNK, _END_OF_BUFFER, _END_OF_FILE, _CHUNK_HEADER, _TIMESTAMP, _ATTRIBUTE_LIST = 0, 1, 2, 3, 5, 6
_HEADER_BYTES = 18  # token, endianness, first event number, last event number
_FIRST_RECORD = _HEADER_BYTES + 9  # a chunk's header and its first record, the timestamp of its first event
_LARGEST_CHUNK = 16 * 1024 * 1024  # OTF2_CHUNK_SIZE_MAX (bytes)
FILE_MAGIC = b"\x03"  # first byte of every OTF2 file (anchor, definitions, events): a chunk header's token
_ENDIANNESS = {0x42: "little", 0x23: "big"}
# how the walk of a chunk's records ends (:func:`_walk`)
_AT_END_OF_FILE, _AT_END_OF_CHUNK, _PAST_THE_BYTES, _NOT_FOLLOWED = 0, 1, 2, 3


@dataclass(frozen=True)
class CutEvents:
    """An events file that ends before OTF2's END_OF_FILE record, or whose chunks are out of sequence: its events
    can be read only up to ``whole``."""

    size: int  # bytes of the file
    whole: int  # events whole before the cut (count, from the file's start), or before ``damage``
    where: str  # where the file ends, for a message
    damage: ChunkDamage | None = None  # a chunk out of sequence: ``whole`` counts the chunks before it
    damaged: bool = False  # the events end at a damaged record (attack 21 F4), not at the file's end
    whole_file: bool = False  # the file ends with its END_OF_FILE record; a chunk header within is ``damage``

    def reason(self, announced: int) -> str:
        """The refusal, for a location whose definitions announce ``announced`` events."""
        if self.damage is not None:
            what = "an events file" if self.whole_file else "an events file cut short"
            before = ("it" if self.damage.dropped in (None, self.damage.at) else
                      f"byte {self.damage.dropped} (the first chunk that began after it)")
            return (f"{self.damage.what} at byte {self.damage.at} of {what} ({self.size} bytes, {self.where}): "
                    f"{self.damage.why}; the chunks before {before} hold {self.whole} of the {announced} events "
                    "the definitions announce")
        what = "damaged" if self.damaged else "cut short, no end-of-file record"
        return (f"{what} ({self.size} bytes): {self.where}; {self.whole} of the {announced} events the "
                "definitions announce are whole")


@dataclass(frozen=True)
class ChunkDamage:
    """A chunk header whose event numbers do not follow the chunk before, or hold more events than the chunk's
    bytes or the definitions can (attack 21 F3: a cut file's last header said its chunk starts at event 2^62); or
    a chunk that begins no later than the chunk before it began (attack 22 F1: a chunk copied over the next, or two
    swapped, the headers edited to chain). Not found: a chunk of another location copied over the same-numbered
    chunk, its times in step with this location's (attack 23 F10): nothing in its header or times tells them
    apart (the region or metric references of its records could, only in archives whose locations map references
    of their own, and only by walking every record: not done)."""

    at: int  # byte offset of the chunk header
    why: str  # what it says and what was expected, for a message
    what: str = "damaged chunk header"  # what is damaged there, for a message
    dropped: int | None = None  # byte of the first chunk out of place, when not ``at`` (of two swapped, the first)

    @property
    def kept_before(self) -> int:
        """Byte of the first chunk a salvage drops: the chunks before it are read."""
        return self.at if self.dropped is None else self.dropped


@dataclass(frozen=True)
class EventsEnd:
    """How an events file ends, from one walk of its last chunk: cut before its END_OF_FILE record, or with bytes
    after it that OTF2 never reads; neither when it ends as written, or when its layout cannot be followed (left to
    the library, which refuses what it cannot read)."""

    cut: CutEvents | None = None
    trailing: tuple[int, int] | None = None  # (byte offset where the unread data starts, bytes of it)
    not_otf2: bool = False  # the file's first 16 bytes are no OTF2 chunk header (empty, truncated, bad magic)


def events_end(path: str | os.PathLike, chunk_size: int, n_events: int) -> EventsEnd:
    """How the events file ``path`` (chunks of ``chunk_size`` bytes) of a location whose definitions announce
    ``n_events`` events ends, from its last chunk's header and records, walked once (session 21: the cut and the
    bytes after the END_OF_FILE record were two reads and two walks of that chunk). The chunk holding the last
    announced event is found from the chunk headers (18 bytes each); when it is not the last one (a copy appended:
    ``cat 1.evt 1.evt > 1.evt``) it is walked too. The file's first 16 bytes are checked in the same open."""
    size = os.path.getsize(path)
    step = max(chunk_size, _HEADER_BYTES)
    start = _last_start(size, step)
    with open(Path(path), "rb") as fh:
        head = fh.read(size if start == 0 else 16)
        if len(head) < 16 or head[:1] != FILE_MAGIC:
            return EventsEnd(not_otf2=True)
        fh.seek(start)
        chunk = head if start == 0 else fh.read(size - start)
        if len(chunk) < _HEADER_BYTES:  # the last chunk's header itself is cut: the chunk before ends the events
            before, damage, _ = _chained_events(fh, start, step, n_events)
            where = f"the file ends inside the header of the chunk at byte {start}"
            return EventsEnd(cut=CutEvents(size, before, where, damage))
        first, last = _event_numbers(chunk)
        ended_at = None  # where the last chunk's END_OF_FILE record ends, when that chunk holds the last event
        if first is not None:
            kind, at, events = _walk_chunk(chunk, True)
            if kind == _AT_END_OF_CHUNK:  # a full chunk's end, or a record's type byte zeroed: OTF2 reads on
                where = (f"an end-of-chunk record at byte {start + at} ends the last chunk (from byte {start}) and "
                         "no chunk follows")
                return EventsEnd(cut=_cut_after(fh, start, step, first, events, n_events, size, where, chunk))
            if kind == _PAST_THE_BYTES:
                return EventsEnd(cut=_cut_after(fh, start, step, first, events, n_events, size,
                                                _ends(start + at, size), chunk))
            if kind == _NOT_FOLLOWED:  # attack 21 F4: libotf2 looped on it for good, its memory growing
                where = f"the record at byte {start + at} (token {chunk[at]}) cannot be followed"
                cut = _cut_after(fh, start, step, first, events, n_events, size, where, chunk)
                return EventsEnd(cut=replace(cut, damaged=True))
            if kind == _AT_END_OF_FILE and last >= n_events and (first <= n_events or start == 0):
                ended_at = start + at
        # the chunk holding the last announced event, from the headers: a copy appended to a file whose last chunk
        # was full looks whole from its own last chunk (review21: the bytes after the original went unsaid)
        before, damage, held = ((0, None, start) if start == 0 else
                                _chained_events(fh, size, step, n_events, to_last=True, read=(start, chunk)))
        if damage is not None:
            where = f"its chunks out of sequence from byte {damage.at} (a chunk copied over another?)"
            return EventsEnd(cut=CutEvents(size, before, where, damage, whole_file=True))
        if held == start and ended_at is not None:
            return EventsEnd(trailing=_unread_after(ended_at, size))
        if held is None or held == start:
            return EventsEnd()
        fh.seek(held)
        chunk = fh.read(min(step, size - held))
    kind, end, _ = _walk_chunk(chunk, True)
    return EventsEnd(trailing=_unread_after(held + end, size) if kind == _AT_END_OF_FILE else None)


@dataclass(frozen=True)
class SkippedEvents:
    """Events of a chunk that OTF2 skips without a word: an END_OF_CHUNK record before the chunk's last event (a
    record's type byte zeroed) ends the chunk for libotf2, which goes on with the next one."""

    at: int  # byte offset of the END_OF_CHUNK record
    first: int  # first event skipped (number, counted from 1)
    last: int  # last event skipped


def skipped_events(path: str | os.PathLike, chunk_size: int) -> list[SkippedEvents]:
    """The events OTF2 skips in the chunks (of ``chunk_size`` bytes) of the events file ``path`` before its last
    one, from each chunk's header and records; empty when every chunk's records reach its last event (or the
    layout cannot be followed). Every chunk but the last is read, one at a time: for a location whose events fell
    short of those its definitions announce, to say why (the last chunk is :func:`events_end`'s)."""
    size = os.path.getsize(path)
    step = max(chunk_size, _HEADER_BYTES)
    skipped: list[SkippedEvents] = []
    with open(Path(path), "rb") as fh:
        for start in range(0, size - step, step):  # a chunk follows each of these
            chunk = fh.read(step)
            first, last = _event_numbers(chunk)
            if first is None:
                break
            kind, at, events = _walk_chunk(chunk, True)
            if kind == _AT_END_OF_CHUNK and first + events <= last:
                skipped.append(SkippedEvents(start + at, first + events, last))
    return skipped


def _unread_after(end: int, size: int) -> tuple[int, int] | None:
    """(``end``, bytes from it to ``size``) when a file of ``size`` bytes goes on after its END_OF_FILE record,
    which ends at byte ``end``."""
    return (end, size - end) if end < size else None


def definitions_damage(path: str | os.PathLike, chunk_size: int, what: str = "definitions") -> str | None:
    """Why the definitions file ``path`` (chunks of ``chunk_size`` bytes, the anchor's) cannot be read: not an
    OTF2 file (its first 16 bytes), or, from its last chunk's records, cut or with a record's type byte zeroed
    (attack 20 F17: libotf2 parsed uninitialised memory past the data); None when that chunk ends with the
    END_OF_FILE record, or when its layout cannot be followed. One open; at most one chunk (<= 16 MiB) and the
    file's first 16 bytes are read, whatever the file's size (session 21: a file over 256 KiB was left to the
    library)."""
    size = os.path.getsize(path)
    step = min(max(chunk_size, _HEADER_BYTES), _LARGEST_CHUNK)
    start = _last_start(size, step)
    with open(Path(path), "rb") as fh:
        head = fh.read(min(size, step) if start == 0 else 16)
        if len(head) < 16 or head[:1] != FILE_MAGIC:
            return f"not an OTF2 {what} file (empty, truncated or bad magic)"
        fh.seek(start)
        chunk = head if start == 0 else fh.read(size - start)
    if len(chunk) < _HEADER_BYTES:
        return (f"damaged OTF2 definitions ({size} bytes): cut short, the file ends inside the header of the chunk "
                f"at byte {start} (copy the archive again)")
    if _event_numbers(chunk)[0] is None:
        return None
    kind, at, _ = _walk_chunk(chunk, False)
    if kind == _AT_END_OF_CHUNK:
        return (f"damaged OTF2 definitions ({size} bytes): an end-of-chunk record at byte {start + at} and no chunk "
                "after it (a record's type byte zeroed?)")
    if kind == _PAST_THE_BYTES:
        return (f"damaged OTF2 definitions ({size} bytes): cut short, {_ends(start + at, size)} (copy the archive "
                "again)")
    return None


def _ends(at: int, size: int) -> str:
    """Where a file of ``size`` bytes whose records were walked to byte ``at`` ends."""
    if at < size:
        return f"the file ends inside the record at byte {at}"
    return "the file ends after a whole record, without the end-of-file record"


def _last_start(size: int, step: int) -> int:
    """The offset of the last chunk (of ``step`` bytes) of a file of ``size`` bytes."""
    return (max(size, 1) - 1) // step * step


def _walk_chunk(chunk: bytes, timed: bool) -> tuple[int, int, int]:
    """:func:`_walk` of a chunk whose header has been checked (:func:`_event_numbers`): how it ends, where, and
    the events whole before that."""
    return _walk(np.frombuffer(chunk, dtype=np.uint8), _ENDIANNESS[chunk[1]] == "little", timed)[:3]


def _time_span(chunk: bytes) -> tuple[int, int] | None:
    """(first, last) timestamps (clock ticks) of the records of an events chunk whose header has been checked, as
    far as :func:`_walk` follows them; None when it holds none."""
    stamps, first, last = _walk(np.frombuffer(chunk, dtype=np.uint8), _ENDIANNESS[chunk[1]] == "little", True)[3:]
    return (int(first), int(last)) if stamps else None


def _cut_after(fh, start: int, step: int, first: int, events: int, n_events: int, size: int,
               where: str, chunk: bytes) -> CutEvents:
    """The events whole in a file of ``size`` bytes cut inside its last chunk (at byte ``start``, its header
    numbering its first event ``first``, ``events`` of its records whole), told by ``where``: the complete chunks'
    events, from their headers (:func:`_chained_events`), and the last chunk's, never more than the definitions
    announce (``n_events``). A header that disagrees, or the last chunk (``chunk``) beginning out of time, is the
    damage; the chunks before it hold ``whole``."""
    held, damage, _ = _chained_events(fh, start, step, n_events, cut=chunk)
    if damage is None:
        damage = _disagreement(start, first, held + events, held, n_events, events)
    return CutEvents(size, held if damage is not None else held + events, where, damage)


def _chained_events(fh, end: int, step: int, n_events: int, *, to_last: bool = False,
                    read: tuple[int, bytes] | None = None,
                    cut: bytes | None = None) -> tuple[int, ChunkDamage | None, int | None]:
    """The events of the chunks (of ``step`` bytes) of ``fh`` before byte ``end``, from their headers: each must number
    its events on from the chunk before's, hold no more than its bytes can, and none past the ``n_events`` the
    definitions announce; and it must begin after the chunk before it began (:func:`_out_of_time`). (events of the
    chunks before the first chunk out of sequence or out of place, its damage or None, None). With ``to_last`` the
    walk ends at the chunk holding event ``n_events`` (the last announced; a chunk past it is that chunk: the events
    file of another location, refused once read, attack 8 B8), whose offset is the third item, the events before it
    the first; the chunks after it are not chained (a copy appended: ``cat 1.evt 1.evt``). Attack 21 F7: a chunk
    copied over the next, or two chunks swapped, had libotf2 read one chunk's events twice and drop the other's.
    ``read``: (offset, bytes) of a chunk the caller has read already (the last one), not read again. ``cut``: the
    bytes of the chunk at ``end``, cut short (its events are counted from its records, not its header), whose
    beginning is checked too (chunk23: a cut last chunk copied over another was kept whole by --salvage)."""
    most = (step - _HEADER_BYTES) // 2  # an event record is 2 bytes at least: its type and its length
    held = 0  # events of the chunks chained
    begun: list[_Begun] = []
    for offset, head in _chunk_heads(fh, end, step, read):
        first, last = _event_numbers(head)
        bound = max(n_events, last or 0) if to_last else n_events
        if (damage := _disagreement(offset, first, last, held, bound, most)) is not None:
            return held, damage, None
        if (late := _out_of_time(fh, offset, head, min(step, end - offset), begun, held)) is not None:
            return late
        if to_last and last >= n_events:
            return held, None, offset
        held = last
    if cut is not None and (late := _out_of_time(fh, end, cut, len(cut), begun, held)) is not None:
        return late
    return held, None, None


@dataclass(frozen=True)
class _Begun:
    """A chunk chained: where it begins in time (its first timestamp, clock ticks) and in the file (byte), and the
    events of the chunks before it (count)."""

    time: int
    at: int
    held: int


def _out_of_time(fh, offset: int, head: bytes, size: int, begun: list[_Begun],
                 held: int) -> tuple[int, ChunkDamage, None] | None:
    """(events of the chunks before the first one out of place, the damage, None) when the chunk at byte ``offset``
    (``size`` bytes, ``head`` its first ones) begins no later than the chunk before it began (``begun``, the chunks
    before it; ``held`` their events): a location's events are written by one thread in time order (attack 22 F1: a
    chunk copied over the next begins where its original did; of two swapped the later begins first). Not when it
    begins before the last timestamp of the chunk before: a clock that steps back a tick where a chunk begins (a
    TSC, attack 23 F8) is the warning it is inside a chunk. The chunks out of place begin with the first one that
    began after this one (of two swapped, the one before it: chunk23 kept it under --salvage). None when it is in
    place, and it is added to ``begun``. Its first timestamp is read from its first record (review23: each chunk
    read whole and walked was ~4.5 s per GiB when an archive opened); the chunk before is walked for its last only
    when both begin at the same tick."""
    time = _first_time(fh, offset, head, size)
    if time is None:
        return None
    if begun and (time < begun[-1].time or time == begun[-1].time and _spans_time(fh, begun[-1].at, offset)):
        place = bisect.bisect_right([b.time for b in begun], time)  # the first chunk that began after this one
        dropped = begun[place] if place < len(begun) else _Begun(time, offset, held)
        return dropped.held, _time_going_back(offset, time, begun[-1].time, dropped.at), None
    begun.append(_Begun(time, offset, held))
    return None


def _first_time(fh, offset: int, head: bytes, size: int) -> int | None:
    """The first timestamp (clock ticks) of the events chunk at byte ``offset`` of ``fh`` (``size`` bytes, ``head``
    its first ones, its header checked): from its first record, the timestamp OTF2 writes before a chunk's first
    event; else from its records walked (None: it holds none)."""
    if len(head) >= _FIRST_RECORD and head[_HEADER_BYTES] == _TIMESTAMP:
        return int.from_bytes(head[_HEADER_BYTES + 1:_FIRST_RECORD], _ENDIANNESS[head[1]])
    if len(head) < size:
        fh.seek(offset)
        head = fh.read(size)
    span = _time_span(head)
    return None if span is None else span[0]


def _spans_time(fh, offset: int, end: int) -> bool:
    """Whether the events chunk at byte ``offset`` of ``fh`` (ending by byte ``end``) holds more than one timestamp
    value (its last after its first)."""
    fh.seek(offset)
    span = _time_span(fh.read(end - offset))
    return span is not None and span[1] > span[0]


def _time_going_back(at: int, first: int, before: int, dropped: int) -> ChunkDamage:
    """The damage of the chunk at byte ``at`` whose first timestamp ``first`` is not after ``before``, the first of
    the chunk before it (clock ticks); the chunks from byte ``dropped`` are out of place."""
    return ChunkDamage(at, f"it begins ({first} clock ticks) no later than the chunk before it began ({before}), "
                       f"where one thread wrote the location's events in time order: a chunk copied "
                       "over another or two swapped (its events would be read twice or out of place)",
                       "chunk out of time order", dropped)


def _disagreement(at: int, first: int | None, last: int | None, held: int, n_events: int,
                  most: int) -> ChunkDamage | None:
    """Why the header at byte ``at`` numbering events ``first`` to ``last`` cannot follow chunks holding ``held``
    events in a file of ``n_events`` (announced), its chunk holding ``most`` events at most; None when it can."""
    if first is None or last is None:
        return ChunkDamage(at, "no chunk header there")
    if first != held + 1:
        return ChunkDamage(at, f"it numbers its first event {first} where {held + 1} follows the chunk before")
    if last > n_events:
        return ChunkDamage(at, f"it reaches event {last}, past the {n_events} the definitions announce")
    if not 0 <= last - held <= most:
        return ChunkDamage(at, f"it numbers its events {first} to {last}, where its bytes hold 0 to {most}")
    return None


def _event_numbers(head: bytes) -> tuple[int | None, int | None]:
    """(first, last) event numbers of a chunk header; (None, None) when ``head`` is not one."""
    if len(head) < _HEADER_BYTES or head[0] != _CHUNK_HEADER or head[1] not in _ENDIANNESS:
        return None, None
    order = _ENDIANNESS[head[1]]
    return int.from_bytes(head[2:10], order), int.from_bytes(head[10:18], order)


def _chunk_heads(fh, end: int, step: int, read: tuple[int, bytes] | None) -> Iterator[tuple[int, bytes]]:
    """(offset, header and first record) of each chunk of ``fh`` (chunks of ``step`` bytes) before byte ``end``; the
    chunk ``read`` (offset, bytes) as given, whole."""
    for offset in range(0, end, step):
        if read is not None and offset == read[0]:
            yield read
            continue
        fh.seek(offset)
        yield offset, fh.read(min(_FIRST_RECORD, end - offset))


@cached_njit
def _walk(chunk: np.ndarray, little: bool, timed: bool) -> tuple[int, int, int, int, np.uint64, np.uint64]:
    """The records of a chunk (uint8, from its header) of an events file (``timed``: timestamp and attribute list
    tokens) or a definitions file (none: every record has a length): (how the walk ends, the offset after the last
    whole record or after the END_OF_FILE record and the END_OF_BUFFER that follows it, events whole before that,
    and the timestamps walked: how many, the first and the last (clock ticks)).
    Ends:
    :data:`_AT_END_OF_FILE`, :data:`_AT_END_OF_CHUNK` (a full chunk, another follows), :data:`_PAST_THE_BYTES` (the
    bytes end inside a record or without an end record), :data:`_NOT_FOLLOWED` (a token no chunk holds there).
    Compiled: a Python loop took ~40 ms of CPU for a full 1 MiB chunk, a location's last chunk at OTF2's default
    chunk size."""
    at, n, events = _HEADER_BYTES, chunk.size, 0
    stamps, first, last = 0, np.uint64(0), np.uint64(0)
    while at < n:
        token = chunk[at]
        if token == _END_OF_FILE:
            end = at + 2 if at + 1 < n and chunk[at + 1] == _END_OF_BUFFER else at + 1
            return _AT_END_OF_FILE, end, events, stamps, first, last
        if token == _END_OF_CHUNK:
            return _AT_END_OF_CHUNK, at, events, stamps, first, last
        if token == _END_OF_BUFFER or token == _CHUNK_HEADER:
            return _NOT_FOLLOWED, at, events, stamps, first, last
        if timed and token == _TIMESTAMP:
            if at + 9 > n:
                return _PAST_THE_BYTES, at, events, stamps, first, last
            last = _uint64_at(chunk, at + 1, little)
            first = last if stamps == 0 else first
            stamps += 1
            at += 9
            continue
        if at + 1 >= n:
            return _PAST_THE_BYTES, at, events, stamps, first, last
        length = np.int64(chunk[at + 1])
        body = at + 2
        if length == 0xFF:  # a long record: its length in the next 8 bytes
            if body + 8 > n:
                return _PAST_THE_BYTES, at, events, stamps, first, last
            length = np.int64(_uint64_at(chunk, body, little))
            body += 8
            if length < 0:
                return _NOT_FOLLOWED, at, events, stamps, first, last
        if body + length > n:
            return _PAST_THE_BYTES, at, events, stamps, first, last
        at = body + length
        if not (timed and token == _ATTRIBUTE_LIST):
            events += 1
    return _PAST_THE_BYTES, at, events, stamps, first, last


@cached_njit
def _uint64_at(chunk: np.ndarray, at: int, little: bool) -> np.uint64:
    """The 8 bytes of ``chunk`` from ``at`` as an unsigned number, in the chunk's byte order."""
    value = np.uint64(0)
    for i in range(8):
        byte = np.uint64(chunk[at + i] if little else chunk[at + 7 - i])
        value |= byte << np.uint64(8 * i)
    return value
