"""The one rule for names users give (experiments, runs) that become folder names under the warehouse.

A name is printable text of at most :data:`MAX_CHARS` characters (:data:`MAX_BYTES` in UTF-8, within every
file system's limit), without path separators, without a leading dot (``.``, ``..`` and hidden folders), without
surrounding blanks and without glob characters (DuckDB would read them as a pattern), in Unicode NFC (the checked
name is normalised: one spelling of ``café``, whoever typed it). It is checked at the CLI
edge (:func:`name_option`, a typer callback) and again wherever a path is built from it
(:meth:`synthtrace.warehouse.layout.Warehouse.experiment_dir`), so no name ever reaches outside its folder.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.printable import unprintable

MAX_CHARS = 120
MAX_BYTES = 240
_FORBIDDEN = set("/\\*?[]{}")
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")
#: characters of a name kept in its file name before the hash (file systems allow 255 bytes)
_FILE_NAME_CHARS = 100


class InvalidNameError(BadInputError):
    """An experiment or run name that could not be a folder of its own under the warehouse."""


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid experiment or run name, or None when it is."""
    if not name:
        return "is empty"
    try:
        n_bytes = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:  # undecodable bytes of the command line arrive as lone surrogates
        return f"is not UTF-8 text (at character {exc.start + 1})"
    if len(name) > MAX_CHARS or n_bytes > MAX_BYTES:
        return f"is too long ({len(name)} characters, {n_bytes} bytes; at most {MAX_CHARS} and {MAX_BYTES})"
    if (what := unprintable(name)) is not None:
        return f"holds {what}"
    if bad := sorted(_FORBIDDEN & set(name)):
        return f"holds {' '.join(bad)} (path separators and glob characters are not allowed)"
    if name.startswith("."):
        return "starts with a dot"
    if name != name.strip():
        return "starts or ends with a blank"
    return None


def check_name(name: str, what: str = "experiment") -> str:
    """``name`` in Unicode NFC when valid; else :class:`InvalidNameError` (one line: the name and the reason). NFC:
    ``café`` typed (é one character) and ``café`` from a folder a Mac made (e and a combining accent) print alike,
    so they are one name (attack 12: two experiments that ``runs`` printed identically)."""
    if (problem := name_problem(name)) is not None:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidNameError(f"{what} name {shown!r} {problem}")
    return unicodedata.normalize("NFC", name)


def name_from_folder(folder: str) -> str:
    """The experiment name a folder's name gives (DESIGN §3): the folder's name itself when it is a valid name;
    else (``run[3]``, ``out_{8x8}``, a blank at an end, over :data:`MAX_CHARS`: job-array folders) its printable
    characters with the forbidden ones as ``_``, blanks and leading dots stripped, cut, then ``~`` and a hash of the
    whole name, so that two such folders never share an experiment (attack 13 F6: the folder's name refused every
    trace in it, and the night quarantined them)."""
    if name_problem(folder) is None:
        return folder
    text = folder.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    kept = "".join("_" if c in _FORBIDDEN or not c.isprintable() else c for c in text).strip().lstrip(".")
    kept = kept[:_FILE_NAME_CHARS]
    while len(kept.encode("utf-8")) > MAX_BYTES - 16:
        kept = kept[:-1]
    digest = hashlib.blake2b(folder.encode("utf-8", "surrogateescape"), digest_size=4).hexdigest()
    return f"{kept.rstrip()}~{digest}"


def name_option(value: str | None) -> str | None:
    """Typer callback for an ``--experiment``/``EXPERIMENT`` parameter: the name checked, None passed through."""
    return None if value is None else check_name(value)


def file_name(name: str) -> str:
    """A file name (without extension) for an experiment or application name, one per name: a name of letters,
    digits and ``_.+-`` only is its own file name; any other (``solver a``, ``a/b``, ``..``, a 300-character
    name) is its safe characters, then ``~`` and a hash of the whole name (``~`` is never in an own name), so that
    ``solver a`` and ``solver_a`` never share a file (issue 23 item 9)."""
    safe = _UNSAFE_FILE_CHARS.sub("_", name)
    if safe == name and name.strip(".") and len(name) <= _FILE_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{safe[:_FILE_NAME_CHARS].strip('.') or '_'}~{digest}"
