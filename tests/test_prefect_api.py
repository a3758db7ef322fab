"""A configured Prefect server that does not answer is one line, at once (attack 7 A13).

With PREFECT_API_URL set (the README's production set-up), a server that was down made `nightly` and `serve` print
130-150 lines of Prefect and httpx tracebacks, and one that accepted connections but never answered (overloaded,
a stuck proxy) hung the night without a word."""
from __future__ import annotations

import socket

import pytest

from synthtrace.pipelines.prefect_api import PrefectUnavailableError, api_url_from_environment, check_prefect_api


def test_a_server_that_is_down_is_one_line_naming_it():
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/api"
        with pytest.raises(PrefectUnavailableError) as err:
            check_prefect_api(url, timeout_s=5)
    assert str(err.value).startswith(f"cannot reach the Prefect server at {url} (PREFECT_API_URL): ")
    assert "\n" not in str(err.value)


def test_a_server_that_never_answers_is_given_up_on():
    with socket.socket() as s:  # accepts connections (the backlog), never reads or answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/api"
        with pytest.raises(PrefectUnavailableError, match="no answer within 0.5 s"):
            check_prefect_api(url, timeout_s=0.5)


def test_a_server_that_answers_passes(prefect_api):
    check_prefect_api(prefect_api)


@pytest.mark.parametrize("url", ["http://[::1", "http://256.1.1.1:4200/api", "ftp://host/api", "http://h:99999/api",
                                 "not a url"])
def test_a_malformed_url_is_one_line(url, monkeypatch):
    """A malformed PREFECT_API_URL was a pydantic or httpx traceback of 79-86 lines (attack 7 A17)."""
    monkeypatch.setenv("PREFECT_API_URL", url)
    with pytest.raises(PrefectUnavailableError, match="PREFECT_API_URL") as err:
        check_prefect_api(api_url_from_environment() or "", timeout_s=2)
    assert "\n" not in str(err.value)


def test_an_empty_url_is_unset(monkeypatch):
    """`export PREFECT_API_URL=` is how people unset it: the night ran but printed a dozen event-worker tracebacks."""
    monkeypatch.setenv("PREFECT_API_URL", " ")
    assert api_url_from_environment() is None
    import os

    assert "PREFECT_API_URL" not in os.environ
