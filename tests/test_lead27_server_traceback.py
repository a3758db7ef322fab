"""attack27 A5: 44 minutes into a long night, the ephemeral Prefect server's own event sweeper logged "Error sweeping
held events" with two chained tracebacks (sqlite "database is locked"), 120 lines on the night's terminal: the
server's stderr is forwarded while it serves. Its record line still shows, the traceback goes to the server's log
(PREFECT_HOME) with one line saying where; what it writes after shows again."""
from __future__ import annotations

import contextvars
import os
import threading

from prefect.settings import PREFECT_HOME, temporary_settings

from synthtrace.pipelines.nightly import SERVER_LOG, _ServerStderr

RECORD = b"20:25:55.123 | ERROR   | prefect.server.events.triggers - Error sweeping held events\n"
TRACEBACK = (b"Traceback (most recent call last):\n  File \"x.py\", line 1, in sweep\n    run()\n"
             b"sqlite3.OperationalError: database is locked\n\n"
             b"The above exception was the direct cause of the following exception:\n\n"
             b"Traceback (most recent call last):\n  File \"y.py\", line 2, in run\n"
             b"sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n")
AFTER = b"20:26:01.000 | WARNING | prefect.server - something the user should see\n"


def _forwarded(tmp_path, written: list[bytes]) -> bytes:
    """What :class:`_ServerStderr` forwards to the terminal while the server serves, given ``written`` in chunks."""
    server_read, server_write = os.pipe()
    term_read, term_write = os.pipe()
    forwarder = _ServerStderr()
    with temporary_settings({PREFECT_HOME: str(tmp_path)}):
        # the settings live in a context variable, which a new thread does not inherit
        thread = threading.Thread(target=contextvars.copy_context().run,
                                  args=(forwarder._forward, server_read, term_write))
        thread.start()
        for chunk in written:
            os.write(server_write, chunk)
        os.close(server_write)
        thread.join(60)
    with os.fdopen(term_read, "rb") as term:
        return term.read()


def test_a_traceback_the_server_logs_while_it_serves_is_one_line_and_kept_in_its_log(tmp_path):
    whole = RECORD + TRACEBACK + AFTER
    said = _forwarded(tmp_path, [whole[:70], whole[70:200], whole[200:]])  # cut anywhere
    lines = said.decode().splitlines()
    assert lines[0] == RECORD.decode().rstrip("\n") and lines[-1] == AFTER.decode().rstrip("\n")
    assert len(lines) == 3 and "traceback" in lines[1] and str(tmp_path / SERVER_LOG) in lines[1]
    assert "Traceback" not in said.decode()
    assert TRACEBACK in (tmp_path / SERVER_LOG).read_bytes()
