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
#: bytes of the hash that ends a derived name (64 bits: a birthday search needs ~4e9 names for one pair)
HASH_BYTES = 8
#: how a derived name ends: ``~`` and the hex digits of a 4-byte (older code's) or 8-byte hash
_DERIVED = re.compile(r"~([0-9a-f]{8}){1,2}\Z")
_DERIVED_NOW = re.compile(rf"~[0-9a-f]{{{2 * HASH_BYTES}}}\Z")


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


def one_spelling(text: str) -> str:
    """``text`` in Unicode NFC: the one spelling of a name the warehouse keeps or compares (``café`` typed, é one
    character, and ``café`` from a Mac's file name, e and a combining accent, print alike: they are one name)."""
    return unicodedata.normalize("NFC", text)


def check_name(name: str, what: str = "experiment") -> str:
    """``name`` in Unicode NFC when valid; else :class:`InvalidNameError` (one line: the name and the reason). NFC:
    ``café`` typed (é one character) and ``café`` from a folder a Mac made (e and a combining accent) print alike,
    so they are one name (attack 12: two experiments that ``runs`` printed identically)."""
    if (problem := name_problem(name)) is not None:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidNameError(f"{what} name {shown!r} {problem}")
    return one_spelling(name)


def name_from_folder(folder: str) -> str:
    """The experiment name a folder's name gives (DESIGN §3), in NFC (a Mac's ``café[1]`` and the same name typed
    are one: attack 14 F4): the folder's name itself when it is a valid name; else (``run[3]``, ``out_{8x8}``, a
    blank at an end, over :data:`MAX_CHARS`: job-array folders) its printable characters with the forbidden ones as
    ``_``, blanks and leading dots stripped, cut, then ``~`` and a 64-bit hash of the whole name (:func:`_hashed`),
    so that two such folders never share an experiment (attack 13 F6: the folder's name refused every trace in it;
    attack 14 F5: a 32-bit hash was matched in 11,488 tries). A valid name that ends as a derived one does
    (``run_3_~`` and 8 or 16 hex digits) is derived too: it never joins ``run[3]``'s experiment."""
    text = one_spelling(folder)
    if name_problem(text) is None and not _DERIVED.search(text):
        return text
    return _hashed(_kept(text, MAX_BYTES - 1 - 2 * HASH_BYTES), text.encode("utf-8", "surrogateescape"))


def legacy_folder_names(folder: str) -> list[str]:
    """The names older code derived from a folder named ``folder`` when they differ from :func:`name_from_folder`'s
    (before attack 14 F4/F5: the name as it came, not NFC, with a 32-bit hash): what the folder index filed that
    folder's runs under, so that a folder already ingested keeps going to its experiment. Those of both spellings of
    the folder, NFC and NFD (attack 16 F9: a Mac's NFD folder, stored by older code, and the same folder copied or
    typed in NFC are one folder today; only the spelling at hand was looked up). Not a name that ends as today's
    derived names do (a folder literally named so, ingested by older code, would otherwise find the runs of the
    folder whose derived name it copies)."""
    today = name_from_folder(folder)
    out: list[str] = []
    for spelling in dict.fromkeys((folder, one_spelling(folder), unicodedata.normalize("NFD", folder))):
        old = spelling if name_problem(spelling) is None else _hashed(_kept(spelling, MAX_BYTES - 16),
                                                                     spelling.encode("utf-8", "surrogateescape"), 4)
        if old != today and old not in out and not _DERIVED_NOW.search(old):
            out.append(old)
    return out


def _kept(text: str, max_bytes: int) -> str:
    """What a derived name keeps of ``text`` before its hash: printable characters, the forbidden ones as ``_``,
    without blanks at its ends or leading dots, at most :data:`_FILE_NAME_CHARS` characters and ``max_bytes``."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    kept = "".join("_" if c in _FORBIDDEN or not c.isprintable() else c for c in text).strip().lstrip(".")
    kept = kept[:_FILE_NAME_CHARS]
    while len(kept.encode("utf-8")) > max_bytes:
        kept = kept[:-1]
    return kept.rstrip()


def _hashed(kept: str, whole: bytes, n_bytes: int = HASH_BYTES) -> str:
    """``kept``, ``~`` and the blake2b hash of ``whole`` (``n_bytes`` bytes, in hex): the one step of every name
    derived from another (:func:`name_from_folder`, :func:`file_name`)."""
    return f"{kept}~{hashlib.blake2b(whole, digest_size=n_bytes).hexdigest()}"


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
    return _hashed(safe[:_FILE_NAME_CHARS].strip(".") or "_", name.encode("utf-8", "surrogatepass"))
