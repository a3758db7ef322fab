"""The Prefect server a command talks to, checked before the night needs it (issue 23, attack 7 A13/A17).

With ``PREFECT_API_URL`` set (the README's production set-up) a server that was down gave 130-150 lines of Prefect
and httpx tracebacks, one that accepted connections and never answered hung the night silently, an empty value
(``export PREFECT_API_URL=`` to unset it) left a dozen event-worker tracebacks, and a malformed one a pydantic
traceback while Prefect loaded its settings. Each is now one line, or (empty) the same as unset.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from synthtrace.tracelib.errors import SynthtraceError

#: how long a configured Prefect server has to answer its health check (s): a connect and a read
API_CHECK_TIMEOUT_S = 20.0


class PrefectUnavailableError(SynthtraceError):
    """The ephemeral Prefect server did not start (a very busy machine), or the server PREFECT_API_URL names is
    malformed or does not answer."""


def api_url_from_environment() -> str | None:
    """``PREFECT_API_URL`` as the commands will use it: None when unset or empty (an empty value is removed, so
    that Prefect starts its temporary local server as without it); :class:`PrefectUnavailableError` when it is no
    http(s) URL with a host. Call before Prefect is imported: it reads the variable when it loads."""
    url = os.environ.get("PREFECT_API_URL")
    if url is not None and not url.strip():
        del os.environ["PREFECT_API_URL"]
        return None
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port out of range or not a number raises here
        why = None if parts.scheme in ("http", "https") and parts.hostname else "an http(s) URL with a host is needed"
    except ValueError as exc:
        why = str(exc)
    if why is not None:
        raise PrefectUnavailableError(f"PREFECT_API_URL {url!r} is not a server's URL ({why}); set it to one (e.g. "
                                      "http://127.0.0.1:4200/api) or unset it for a temporary local server")
    return url


def check_prefect_api(url: str, timeout_s: float = API_CHECK_TIMEOUT_S) -> None:
    """Raise :class:`PrefectUnavailableError` (one line naming ``url``) unless the Prefect server at ``url`` answers
    its health check within ``timeout_s``."""
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=timeout_s).raise_for_status()
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        reason = (f"no answer within {timeout_s:g} s" if isinstance(exc, httpx.TimeoutException)
                  else str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise PrefectUnavailableError(
            f"cannot reach the Prefect server at {url} (PREFECT_API_URL): {reason}; start it, or unset "
            "PREFECT_API_URL to run the night on a temporary local server") from None
