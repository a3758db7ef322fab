"""Defects the third attack rerun (issue 23, fresh mutations) found in files security does not own: each test fails
today and is marked for its owner (xfail strict: it turns the suite red once the fix lands, so the mark goes)."""
from __future__ import annotations

import pytest

from testing import hostile_otf2
from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces


def test_an_otf2_message_length_past_int64_is_refused(tmp_path, run_cli):
    """A send/receive pair whose length is 2^64 - 1 (OTF2 keeps it as uint64): the stored `bytes` became -1.
    A length that no signed 64-bit column can hold is bad input: one line naming the file, exit 2, nothing stored."""
    anchor = hostile_otf2.write(tmp_path / "archive", "msg_len_huge")
    code, out, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "traces" in err, err
    assert not (tmp_path / "wh").exists()


def test_a_trace_name_with_control_characters_cannot_forge_output_lines(tmp_path, run_cli):
    """A trace dropped as `a<newline>error: forged.prv` printed a line `error: forged ...` for an ingest that
    succeeded (and an ESC sequence in a name repaints the terminal): names are printed escaped, one line each."""
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop, stem="a\nerror: forged\x1b[2J")
    code, out, err = run_cli("ingest", drop, "-w", tmp_path / "wh")
    lines = (out + err).splitlines()
    assert not any(ln.startswith("error: forged") for ln in lines), lines
    assert "\x1b" not in out + err
