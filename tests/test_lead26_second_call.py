"""An in-process caller (a notebook, a test, a wrapper script) running two commands: a Ctrl-C in the second one's
start-up says "aborted" with exit 130, never the first command's stop or commits (review26 F4: after parafix26
moved ``arm()`` behind the address-space set-up, the first command's state leaked into that window)."""
from __future__ import annotations

import signal
from pathlib import Path

import synthtrace.pipelines.address_space as address_space
import synthtrace.warehouse.layout as layout
from synthtrace.pipelines import cli, interrupts


def test_a_ctrl_c_before_the_guard_of_a_second_call_says_aborted(monkeypatch, capsys):
    """The first command was stopped by SIGTERM after storing a run; the second is interrupted while it sets up its
    address space. Failed first: exit 143, "terminated (SIGTERM) after it stored .../first"."""
    monkeypatch.setattr(interrupts, "received", signal.SIGTERM)
    monkeypatch.setattr(layout, "COMMITTED", [Path("/wh/runs/first")])

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(address_space, "fit_to_address_space", interrupted)
    code = cli.main(["--version"])
    err = capsys.readouterr().err
    assert code == 130, err
    assert err.strip() == "aborted", err
