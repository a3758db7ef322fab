"""Inputs of attack 8 (issue 23, B5, B7, B8, B10): a model artifact that inflates to gigabytes, OTF2 names holding
control characters, OTF2 events files moved between locations, a Paraver header date that is no date. Each is
refused in one line or read with a warning that says what was done."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testing.traces import PRIME, TRACES, copy_trace

pytestmark = pytest.mark.real_traces


def _runs(run_cli, wh: Path, columns: str) -> list[dict]:
    code, out, err = run_cli("sql", f"SELECT {columns} FROM runs", "-w", wh, "-f", "json")
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------ B10: a header date that is no date
def test_an_invalid_paraver_header_date_is_said_and_the_trace_read(tmp_path, run_cli):
    """``#Paraver (31/02/2018 at 25:61)`` was stored as started_at NULL with no warning (the nightly series are
    ordered by started_at): the ingest warns, naming the file, line 1 and the text, and stores the run."""
    prv = copy_trace(PRIME, tmp_path / "t")
    data = prv.read_bytes()
    prv.write_bytes(data.replace(b"#Paraver (25/10/2018 at 14:04)", b"#Paraver (31/02/2018 at 25:61)", 1))
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    said = f"{prv}:1: header date '31/02/2018 at 25:61' is no date"
    assert said in err
    (run,) = _runs(run_cli, tmp_path / "wh", "started_at, n_bursts, warnings")
    assert run["started_at"] is None and run["n_bursts"] == 704
    assert any(said in w for w in run["warnings"]), run["warnings"]


# ------------------------------------------------------------------------------ B7: OTF2 names with control characters
PING_PONG_PAPI = TRACES / "otf2" / "ping-pong-otf2-papi"


def _archive_copy(dest: Path) -> Path:
    """A copy of the ping-pong-otf2-papi archive (4 files per location, 2 ranks)."""
    shutil.copytree(PING_PONG_PAPI, dest)
    return dest


def _replace_in(path: Path, old: bytes, new: bytes) -> None:
    """The first ``old`` replaced by ``new`` of the same length (an OTF2 string definition keeps its size)."""
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))


def test_otf2_names_with_control_characters_are_stored_escaped_and_said(tmp_path, run_cli):
    """A region named ``\\u202eX\\x1b[2J`` instead of MPI_Send was stored raw, and ``sql --format csv`` cleared the
    terminal; a metric name likewise. Both are kept escaped (as the .row and .pcf names), with one warning naming
    the definitions file."""
    archive = _archive_copy(tmp_path / "pp")
    _replace_in(archive / "traces.def", b"MPI_Send", "\u202eX\x1b[2J".encode())
    _replace_in(archive / "traces.def", b"PAPI_TOT_CYC", b"\x1b]0;T\x07PAPI_C")
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", archive, "-w", wh)
    assert code == 0, err
    assert f"{archive / 'traces.def'}: name holds control characters: kept escaped (2 names)" in err
    code, out, err = run_cli("sql", "SELECT DISTINCT mpi_call FROM mpi_calls ORDER BY 1", "-w", wh, "-f", "csv")
    assert code == 0 and "\x1b" not in out + err and "\u202e" not in out
    assert '"\\u202eX\\x1b[2J"' in out.splitlines()
    code, out, err = run_cli("sql", "SELECT column_name FROM (DESCRIBE bursts)", "-w", wh, "-f", "csv")
    assert code == 0 and '"\\x1b]0;T\\x07PAPI_C"' in out.splitlines() and "\x1b" not in out
    (run,) = _runs(run_cli, wh, "warnings")
    assert any("kept escaped (2 names)" in w for w in run["warnings"])


# ------------------------------------------------------------------------------ B5: a model artifact that is a bomb
def _stored_model(wh_root: Path, model_id: str, artifact: bytes) -> None:
    """``artifact`` committed as model ``model_id``, its SHA-256 recorded (a tamperer who may write ``models/``
    recomputes it: the integrity check passes)."""
    from datetime import UTC, datetime

    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.model_store import MODEL_SCHEMA, write_model

    record = {c: None for c in MODEL_SCHEMA if c not in ("artifact", "artifact_sha256")}
    record |= {"model_id": model_id, "target": "ipc", "created_at": datetime.now(UTC), "status": "ok"}
    write_model(Warehouse(wh_root), record, artifact)


def _rewritten(artifact: bytes, member: str, data: bytes | None = None, compression: int = 0) -> bytes:
    """``artifact`` with ``member`` replaced by ``data`` (kept when None), written with ``compression``."""
    import io
    import zipfile

    src, out = zipfile.ZipFile(io.BytesIO(artifact)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, data if name == member and data is not None else src.read(name),
                         compress_type=compression if name == member else zipfile.ZIP_STORED)
    return out.getvalue()


@pytest.fixture(scope="module")
def skops_artifact() -> tuple[bytes, str]:
    """A model artifact as synthtrace writes it (skops, members stored) and the name of its largest ``.npy``."""
    import io
    import zipfile

    import numpy as np
    import skops.io as sio
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    artifact = sio.dumps(DecisionTreeRegressor(random_state=0).fit(rng.random((200, 3)), rng.random(200)))
    infos = zipfile.ZipFile(io.BytesIO(artifact)).infolist()
    return artifact, max((i for i in infos if i.filename.endswith(".npy")), key=lambda i: i.file_size).filename


def test_a_model_artifact_whose_member_inflates_is_refused_before_loading(tmp_path, skops_artifact):
    """A 5.7 MB model.skops whose one .npy member (a tree's nodes) inflated to 3 GiB took 3.4 GB and 9+ minutes
    in `predict`, deaf to SIGTERM. Here 256 MiB of zeros deflated to 256 kB: refused from the zip directory, before
    skops reads a member, in one line naming the model and the member."""
    import zipfile

    import numpy as np

    from synthtrace.models.registry import load
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.model_store import ArtifactIntegrityError

    artifact, member = skops_artifact
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.uint8))
    header["shape"] = (256 << 20,)
    npy = io_bytes(lambda f: np.lib.format.write_array_header_1_0(f, header)) + bytes(256 << 20)
    bomb = _rewritten(artifact, member, npy, zipfile.ZIP_DEFLATED)
    assert len(bomb) < 2 << 20
    _stored_model(tmp_path / "wh", "bomb", bomb)
    with pytest.raises(ArtifactIntegrityError) as info:
        load(Warehouse(tmp_path / "wh"), "bomb")
    said = str(info.value)
    assert said.startswith("model bomb (") and f"member {member!r} is compressed" in said and "\n" not in said


def test_a_model_artifact_whose_zip_directory_lies_is_refused(tmp_path, skops_artifact):
    """A directory entry that says a member is larger than the bytes stored for it (the size a reader trusts to
    bound what it inflates) is refused before loading; what synthtrace writes is loaded."""
    import io
    import struct
    import zipfile

    from synthtrace.models.registry import load
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.model_store import ArtifactIntegrityError

    artifact, member = skops_artifact
    at = artifact.index(b"PK\x01\x02")
    while artifact[at + 46:at + 46 + len(member)] != member.encode():  # the member's central directory entry
        at = artifact.index(b"PK\x01\x02", at + 4)
    lying = bytearray(artifact)
    struct.pack_into("<L", lying, at + 24, 3 << 30)  # its uncompressed size (APPNOTE 4.3.12): 3 GiB
    _stored_model(tmp_path / "wh", "lying", bytes(lying))
    with pytest.raises(ArtifactIntegrityError, match=f"member {member!r} declares 3,221,225,472 bytes stored as"):
        load(Warehouse(tmp_path / "wh"), "lying")
    good = zipfile.ZipFile(io.BytesIO(artifact))
    assert all(i.compress_type == zipfile.ZIP_STORED for i in good.infolist())  # what synthtrace writes is read
    _stored_model(tmp_path / "wh", "good", artifact)
    assert load(Warehouse(tmp_path / "wh"), "good").estimator is not None


def io_bytes(write) -> bytes:
    """What ``write(file)`` writes, as bytes."""
    import io

    buf = io.BytesIO()
    write(buf)
    return buf.getvalue()


# ------------------------------------------------------------------------- B8: events files moved between locations
def test_an_events_file_copied_over_another_location_is_refused(tmp_path, run_cli):
    """``cp traces/0.evt traces/1.evt`` was read silently: rank 1 "sent to itself", every receive unmatched, 32
    messages instead of 16. Refused in one line that names the twin files (two real locations never record the same
    bytes; alone, without unpaired messages, that is a warning: test_twin_events_files_without_messages_...)."""
    archive = _archive_copy(tmp_path / "pp")
    shutil.copyfile(archive / "traces" / "0.evt", archive / "traces" / "1.evt")
    code, out, err = run_cli("ingest", archive, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "16 of the 16 receives have no matching send" in err
    assert f"{archive / 'traces' / '1.evt'} holds the same bytes as 0.evt, the events of rank 0" in err
    assert not (tmp_path / "wh").exists()


def test_twin_events_files_without_messages_are_read_with_a_warning(tmp_path):
    """Two ranks that only meet in a barrier, with the same local clock ticks (set apart by their local clock
    offsets: the clock_offsets variant), write byte-identical events files; that is legal, so it is said, not
    refused."""
    from synthtrace.tracelib.formats.otf2 import Otf2Trace
    from testing.otf2_variants import clock_offsets

    anchor = clock_offsets(tmp_path / "a").anchor
    stream = Otf2Trace(anchor).read(run_id="twins")
    with pytest.warns(UserWarning, match="holds the same bytes as 0.evt"):
        for _ in stream:
            pass
    assert stream.summary.n_calls == 2


def _swapped(folder: Path) -> Path:
    """Swap the events files of locations 0 and 1 in an archive's event ``folder``; returns 0.evt's path."""
    evt0, evt1 = folder / "0.evt", folder / "1.evt"
    first, second = evt0.read_bytes(), evt1.read_bytes()
    evt0.write_bytes(second)
    evt1.write_bytes(first)
    return evt0


def test_swapped_events_files_are_refused_and_salvage_reads_them_with_a_warning(tmp_path, run_cli):
    """Swapping 0.evt and 1.evt was read silently (every message a send to self, none received). OTF2 names no
    location in an events file; MPI pairs the k-th send from A to B with a tag with the k-th receive on B from A
    with that tag, and here no receive has a send: refused, and --salvage reads it with that warning."""
    archive = _archive_copy(tmp_path / "pp")
    _swapped(archive / "traces")
    code, out, err = run_cli("ingest", archive, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "16 of the 16 receives have no matching send" in err and "--salvage" in err
    code, out, err = run_cli("ingest", archive, "-w", tmp_path / "wh", "--salvage")
    assert code == 0 and "16 of the 16 receives have no matching send" in err, err


def test_an_events_file_with_more_events_than_its_location_announces_is_refused(tmp_path, run_cli):
    """The definitions announce each location's number of events: a file holding more is another location's (two
    of the 4 ranks of the MPI variant swapped; fewer was already refused as cut)."""
    from testing.otf2_variants import mpi

    anchor = mpi(tmp_path / "a").anchor
    evt0 = _swapped(tmp_path / "a" / "traces")
    code, out, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{evt0}: 47 events, more than the 37 the definitions announce for location 0" in err


@pytest.mark.parametrize("name", ["ping-pong-otf2", "ping-pong-otf2-papi"])
def test_real_otf2_archives_are_read_as_before(tmp_path, run_cli, name):
    """The checks of moved events files refuse none of the real archives and warn of none: 16 messages, all
    paired."""
    code, out, err = run_cli("ingest", TRACES / "otf2" / name, "-w", tmp_path / "wh")
    assert code == 0 and "matching" not in err and "same bytes" not in err, err
    code, out, err = run_cli("sql", "SELECT count(*) AS n, count(s_time_ns) AS s, count(r_time_ns) AS r "
                             "FROM mpi_messages", "-w", tmp_path / "wh", "-f", "csv")
    assert code == 0 and out.splitlines()[1] == "16,16,16", out + err


def _one_tag_ping_pong(root: Path) -> Path:
    """2 ranks, 4 round trips on one tag (rank 0 sends at 1000 k + 100, rank 1 receives by +150, answers at +200,
    rank 0 receives by +250): the common ping-pong that two swapped events files turn into paired messages."""
    from testing.otf2_variants import _Archive

    a = _Archive(root, ranks=2, threads=1)
    a.mpi("MPI_Send", "MPI_Recv")
    ev = [a.events(r) for r in range(2)]
    for e in ev:
        e.program_begin(0, "ping-pong", [])
    for k in range(4):
        t = 1000 * k
        for e, peer, send_at, recv_at in ((ev[0], 1, 100, 250), (ev[1], 0, 200, 150)):
            for at, call in sorted(((send_at, "MPI_Send"), (recv_at, "MPI_Recv"))):
                e.enter(t + at - 10, call)
                if call == "MPI_Send":
                    e.mpi_send(t + at, peer, a.world, 5, 64)
                else:
                    e.mpi_recv(t + at, peer, a.world, 5, 64)
                e.leave(t + at + 10, call)
    for e in ev:
        e.program_end(5000, 0)
    return a.close()


def test_swapped_events_files_of_a_one_tag_ping_pong_are_refused(tmp_path, run_cli):
    """With one tag both ways, the swapped files pair every message (a rank "sends to itself"), but each is
    received before it is sent on one thread's clock: impossible, refused; the archive as written is read."""
    anchor = _one_tag_ping_pong(tmp_path / "a")
    code, out, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 0 and "warning" not in err, err
    _swapped(tmp_path / "a" / "traces")
    code, out, err = run_cli("ingest", anchor, "-w", tmp_path / "wh2")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "task 1 thread 1: a message to itself (tag 5) received at 150 ns, before it was sent at 200 ns" in err
