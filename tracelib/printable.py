"""Text from traces or users shown on a terminal: control characters escaped, so no value can forge a line.

A newline, carriage return or escape sequence inside a counter name, a ``.row`` node name or a table cell would
let trace content print its own ``error:`` lines, clear the screen or set the window title (issue 23, attack F7).
"""
from __future__ import annotations


def escaped(text: str) -> str:
    """``text`` with every non-printable character as its Python escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
