"""Text from traces or users shown on a terminal: control characters escaped, so no value can forge a line.

A newline, carriage return or escape sequence inside a counter name, a ``.row`` node name or a table cell would
let trace content print its own ``error:`` lines, clear the screen or set the window title (issue 23, attack F7).
"""
from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path


def escaped(text: str) -> str:
    """``text`` with every non-printable character as its Python escape (``\\n``, ``\\x1b``, ``\\u2028``); a byte
    of a name that is not UTF-8 (Python's surrogate escape, U+DC80-U+DCFF) as ``\\xNN``, as :func:`utf8_text`
    stores it (attack 21 F8: messages said ``\\udcff`` where the stored text says ``\\xff``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    """The escape of the non-printable character ``c`` (see :func:`escaped`)."""
    if "\udc80" <= c <= "\udcff":
        return f"\\x{ord(c) - 0xDC00:02x}"
    return c.encode("unicode_escape", "backslashreplace").decode("ascii")


def utf8_text(raw: bytes) -> str:
    """The bytes ``raw`` (a path) as text Parquet can hold, one to one: a byte that is not UTF-8 as ``\\xNN`` (as
    ``ls -b`` shows it), a backslash as ``\\\\`` (so that a folder named ``d\\xff`` and one named ``d`` and byte
    0xFF differ: attack 20 F3), every other character as it is. :func:`utf8_bytes` is its inverse."""
    return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


#: an escape :func:`utf8_text` writes: a doubled backslash, or a byte that is not UTF-8 (0x80-0xFF)
_UTF8_ESCAPE = re.compile(r"\\(\\|x[89a-f][0-9a-f])")


def utf8_bytes(text: str) -> bytes:
    """The bytes :func:`utf8_text` made ``text`` of (a lone backslash, as older code stored it, kept as it is)."""
    return _UTF8_ESCAPE.sub(lambda m: "\\" if m[1] == "\\" else chr(0xDC00 + int(m[1][1:], 16)),
                            text).encode("utf-8", "surrogateescape")


def utf8_path(text: str) -> Path:
    """The path a stored ``text`` names (a run's ``source_path``: :func:`utf8_text` of the path's bytes)."""
    return Path(os.fsdecode(utf8_bytes(text)))


def is_utf8(text: str | os.PathLike) -> bool:
    """Whether ``text`` (a path) is UTF-8: False when it holds a byte a Latin-1 tool or a Windows share wrote, which
    Python holds as a lone surrogate."""
    try:
        os.fspath(text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> str:
    """``text`` as a stored table holds it (UTF-8 only): itself when it is UTF-8, else :func:`utf8_text` of its bytes
    (a path not UTF-8 that a reader's warning quotes: attack 20 F1)."""
    if is_utf8(text):
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")  # a byte of a file name, as Python holds it
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")  # any other lone surrogate: its three bytes
    return utf8_text(raw)


def clipped(text: str, limit: int = 60) -> str:
    """``text`` as an error line quotes a value a user or a file gave: :func:`escaped`, and cut to its first
    ``limit`` characters with ``...`` when longer (a 2 GB line, a 20,000-name list, is never quoted whole)."""
    return escaped(text[:limit]) + ("..." if len(text) > limit else "")


#: what a character of these Unicode categories is called; any other that does not print is "a non-printing
#: character" (a space other than the plain one, a line separator, a format character such as U+200B)
_KINDS = {"Cc": "a control character", "Cs": "a lone surrogate (no character)"}


def unprintable(text: str) -> str | None:
    """The first character of ``text`` a terminal would not print as itself, described for a message
    (``"U+00A0 NO-BREAK SPACE at character 3"``: a control character, a line or paragraph separator, a space other
    than the plain one, a format character; a byte of a file name that is not UTF-8, which Python holds as a lone
    surrogate, as that byte: attack 9 called it "a control character"), or None when every character prints."""
    if text.isprintable():
        return None
    at, c = next((i, c) for i, c in enumerate(text) if not c.isprintable())
    if 0xDC80 <= ord(c) <= 0xDCFF:  # how Python holds a byte of a file name that is not UTF-8 (surrogateescape)
        return f"a byte that is not UTF-8 (0x{ord(c) - 0xDC00:02X}) at character {at + 1}"
    kind = _KINDS.get(unicodedata.category(c), "a non-printing character")
    name = unicodedata.name(c, "")  # control characters have no Unicode name
    return f"{kind} (U+{ord(c):04X}{' ' + name if name else ''}) at character {at + 1}"


@dataclass
class EscapedNames:
    """The names one file gives (``.row`` names; OTF2 region, metric and string definitions), each kept
    :func:`escaped` when it holds control characters, never raw: a name reaches ``sql --format csv`` and the terminal
    as stored (an ``ESC[2J`` cleared the screen, attack 8 B7). Counts them, and keeps where the first was, for the
    one warning its reader gives (:meth:`note`)."""

    first: int | str | None = None  # where the first escaped name was: a line number, "region 12", ...
    count: int = 0

    def kept(self, name: str, where: int | str) -> str:
        """``name`` as stored: itself when every character prints, else :func:`escaped` (and counted)."""
        if name.isprintable():
            return name
        if not self.count:
            self.first = where
        self.count += 1
        return escaped(name)

    def note(self) -> str | None:
        """The warning's text (``name holds control characters: kept escaped (N names)``), None when none was."""
        return f"name holds control characters: kept escaped ({self.count} names)" if self.count else None
