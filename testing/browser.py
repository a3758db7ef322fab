"""Open a page in headless Chromium (Debian's ``chromium`` package) and report what a reader's browser did: the
requests it made, the console errors and uncaught exceptions, and facts read from the loaded page.

It talks to the browser over the DevTools protocol (a websocket; the ``websockets`` package comes with Prefect).
"""
from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@dataclass
class PageLoad:
    """What loading a page did."""

    requests: list[str] = field(default_factory=list)  # every URL the page asked for (the page itself first)
    failed: list[str] = field(default_factory=list)  # requests that failed, with the reason
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    facts: object = None  # the value of the ``probe`` expression, evaluated once the page has loaded


def _devtools_port(proc: subprocess.Popen, lines: list[str], timeout_s: float) -> int:
    """The port Chromium prints on stderr ("DevTools listening on ws://127.0.0.1:PORT/...")."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for line in list(lines):
            if m := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError("chromium ended before it listened: " + "".join(lines)[-2000:])
        time.sleep(0.1)
    raise TimeoutError("chromium did not open its DevTools port")


def load_page(page: Path, probe: str = "null", timeout_s: float = 180.0) -> PageLoad:
    """Load ``page`` (a local file) in a fresh headless Chromium profile; ``probe``: a JavaScript expression
    evaluated after the load event (its JSON value lands in :attr:`PageLoad.facts`)."""
    from websockets.sync.client import connect

    exe = chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH")
    with tempfile.TemporaryDirectory(prefix="synthtrace-chromium-") as profile:
        proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        drain = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        drain.start()
        try:
            port = _devtools_port(proc, lines, timeout_s)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout_s) as r:
                target = next(t for t in json.load(r) if t.get("type") == "page")
            with connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout_s) as ws:
                return _load(ws, page, probe, timeout_s)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _load(ws, page: Path, probe: str, timeout_s: float) -> PageLoad:
    ids = itertools.count(1)
    result = PageLoad()
    replies: dict[int, dict] = {}
    loaded = False

    def handle(message: dict) -> None:
        nonlocal loaded
        method, params = message.get("method"), message.get("params", {})
        if "id" in message:
            replies[message["id"]] = message
        elif method == "Network.requestWillBeSent":
            result.requests.append(params["request"]["url"])
        elif method == "Network.loadingFailed":
            result.failed.append(f"{params.get('errorText')} ({params.get('requestId')})")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            result.errors.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                         for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            result.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Page.loadEventFired":
            loaded = True

    def call(method: str, **params) -> dict:
        n = next(ids)
        ws.send(json.dumps({"id": n, "method": method, "params": params}))
        end = time.monotonic() + timeout_s
        while n not in replies:
            handle(json.loads(ws.recv(timeout=max(0.1, end - time.monotonic()))))
        return replies.pop(n)

    for domain in ("Network", "Runtime", "Log", "Page"):
        call(f"{domain}.enable")
    call("Page.navigate", url=page.resolve().as_uri())
    end = time.monotonic() + timeout_s
    while not loaded:
        handle(json.loads(ws.recv(timeout=max(0.1, end - time.monotonic()))))
    settle = time.monotonic() + 1.0  # late requests or errors after the load event
    while (left := settle - time.monotonic()) > 0:
        try:
            handle(json.loads(ws.recv(timeout=left)))
        except TimeoutError:
            break
    reply = call("Runtime.evaluate", expression=f"JSON.stringify({probe})", returnByValue=True)
    result.facts = json.loads(reply.get("result", {}).get("result", {}).get("value") or "null")
    return result
