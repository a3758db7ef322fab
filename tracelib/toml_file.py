"""Read a small TOML settings file (a machine profile, archetype thresholds): bounded, decoded, one clear error."""
from __future__ import annotations

import tomllib
from pathlib import Path

#: a settings file is a few kB; anything larger is not one (and is not read whole)
MAX_SETTINGS_BYTES = 1 << 20


def read_toml(path: Path, error: type[Exception], what: str) -> dict:
    """The TOML table of ``path`` (at most :data:`MAX_SETTINGS_BYTES`, UTF-8). Anything else, a FIFO or a device
    included, raises ``error`` with one line naming the file and what ``what`` it is not."""
    if not path.is_file():
        raise error(f"{path}: not a regular file, so not a {what}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SETTINGS_BYTES + 1)
        if len(raw) > MAX_SETTINGS_BYTES:
            raise error(f"{path}: larger than {MAX_SETTINGS_BYTES >> 10} KiB: not a {what}")
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start + 1}), so not a {what}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror})") from None
