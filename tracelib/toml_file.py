"""Read a small settings file (a machine profile, archetype thresholds, counter conflicts): bounded, decoded, one
clear error."""
from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

#: a settings file is a few kB; anything larger is not one (and is not read whole)
MAX_SETTINGS_BYTES = 1 << 20


def read_small_text(path: Path, fail: Callable[[str], Exception], what: str) -> str:
    """The text of ``path``, a regular file of at most :data:`MAX_SETTINGS_BYTES` in UTF-8; anything else (a FIFO,
    a device, a folder, a 2 GB file without a line end: attack 7 A22 read one whole into 16.8 GB) raises
    ``fail(reason)``, the reason saying what ``what`` it is not."""
    if not path.is_file():
        raise fail(f"not a regular file, so not a {what}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SETTINGS_BYTES + 1)
        if len(raw) > MAX_SETTINGS_BYTES:
            raise fail(f"larger than {MAX_SETTINGS_BYTES >> 10} KiB: not a {what}")
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text (byte {exc.start + 1}), so not a {what}") from None
    except OSError as exc:
        raise fail(f"cannot read ({exc.strerror})") from None


def read_toml(path: Path, error: type[Exception], what: str) -> dict:
    """The TOML table of ``path`` (:func:`read_small_text`). Anything else, a FIFO or a device included, raises
    ``error`` with one line naming the file and what ``what`` it is not."""
    text = read_small_text(path, lambda reason: error(f"{path}: {reason}"), what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None
