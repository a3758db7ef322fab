"""Refusals that named the wrong cause (attack25 N1-N3): an OTF2 events file that is a folder, a FIFO or a link to
/dev/zero was "missing"; a header's communicator count of -1 was "1 applications declared but 2 described"; a
``.prv`` starting with a UTF-8 byte order mark was "no Paraver header", not saying why (paramedir refuses it too:
its first word is then not "#Paraver"). Each is still refused, exit 2, nothing stored; the line says what it is."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from testing.traces import PRIME, copy_archive, copy_trace

pytestmark = pytest.mark.real_traces


@pytest.mark.parametrize(("make", "said"), [
    (lambda evt: evt.mkdir(), "events file of location 1 (rank 1, thread 1) (60 events announced) is a folder, no "
                              "regular file; --salvage reads the trace without it"),
    (os.mkfifo, "is a FIFO, no regular file"),
    (lambda evt: evt.symlink_to("/dev/zero"), "is a link to /dev/zero, a character device, no regular file"),
], ids=["folder", "fifo", "link to /dev/zero"])
def test_an_events_file_that_is_no_file_is_said_for_what_it_is(tmp_path, run_cli, make, said):
    archive = copy_archive("ping-pong-otf2", tmp_path / "pp")
    evt = archive / "traces" / "1.evt"
    evt.unlink()
    make(evt)
    code, _, err = run_cli("ingest", archive, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{evt}: " in err and said in err, err
    assert "missing" not in err and not (tmp_path / "wh" / "runs").exists()


def _with_first_line(tmp_path: Path, rewrite) -> Path:
    """A copy of prime_v0 whose bytes are ``rewrite(bytes)``."""
    prv = copy_trace(PRIME, tmp_path / "t")
    prv.write_bytes(rewrite(prv.read_bytes()))
    return prv


@pytest.mark.parametrize(("rewrite", "said"), [
    (lambda data: data.replace(b"),17\n", b"),-1\n", 1),
     ":1: broken Paraver header: communicator count '-1' is not a non-negative integer"),
    (lambda data: b"\xef\xbb\xbf" + data,
     ":1: no Paraver header (the file must start with '#Paraver ('; it starts with a UTF-8 byte order mark, bytes "
     "EF BB BF, which Paraver does not read either: remove them)"),
], ids=["communicator count -1", "byte order mark"])
def test_a_header_refusal_names_its_cause(tmp_path, run_cli, rewrite, said):
    prv = _with_first_line(tmp_path, rewrite)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and err.strip().splitlines() == [f"error: {prv}{said}"], err
    assert not (tmp_path / "wh" / "runs").exists()
