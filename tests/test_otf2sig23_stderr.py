"""What another thread writes to stderr while a worker opens an OTF2 archive reaches stderr (attack 22 F6: Ctrl-C of
``nightly`` while a worker thread read a big archive's global definitions: exit 130 with nothing on stderr).

The otf2 wheel's definition callbacks print the traceback of an exception they meet; the reader captured it by
swapping ``sys.stderr`` for every thread (contextlib.redirect_stderr), so the main thread's "aborted" line, written
meanwhile, went into the worker's capture and was never printed. The capture is now the worker thread's alone."""
from __future__ import annotations

import sys
import threading

from synthtrace.tracelib.formats.otf2.library import _python_callback_errors


def test_another_threads_line_is_not_taken_by_a_workers_capture(capsys):
    capturing, written = threading.Event(), threading.Event()
    messages: list[str] = []

    def worker() -> None:
        with _python_callback_errors(messages):
            sys.stderr.write("An unhandled python exception has occurred\nValueError: a name of the archive\n")
            capturing.set()
            assert written.wait(60)

    thread = threading.Thread(target=worker)
    thread.start()
    assert capturing.wait(60)
    sys.stderr.write("aborted\n")  # the main thread, as a Ctrl-C ends the command
    written.set()
    thread.join(60)
    assert capsys.readouterr().err == "aborted\n"
    assert messages == ["ValueError: a name of the archive"]  # the worker's own reason, not the main thread's line
