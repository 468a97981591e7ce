"""Headless Chromium for tests, driven over the DevTools protocol on a pipe (no driver library):
open a page, click and type as a user does, read what the page shows, and collect what went
wrong on the way (uncaught exceptions, console errors, blocked loads) and every request made."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--window-size=1400,900",
]


def find_chromium() -> str | None:
    """The Chromium (or Chrome) binary: $CHROMIUM if set, else the first of NAMES on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((path for path in map(shutil.which, NAMES) if path), None)


class Browser:
    """One headless browser; `open(url)` gives a page session to `evaluate`, `click` and `press` in.

    The protocol runs over the pipe Chromium reads on fd 3 and writes on fd 4
    (`--remote-debugging-pipe`): JSON messages, each ended by a NUL byte.
    """

    def __init__(self, binary: str, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.events: list[dict] = []
        self._id = 0
        self._buffer = b""
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def onto_fds_3_and_4() -> None:  # in the child, before exec
            # Copies above 10 first, so neither end is overwritten by the other's dup2.
            high_in, high_out = fcntl.fcntl(to_browser, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)
            os.close(high_in)
            os.close(high_out)

        # Every fd Python opens is close-on-exec, so only 3 and 4 (made by dup2) reach Chromium.
        self.process = subprocess.Popen(
            [binary, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=onto_fds_3_and_4,
        )
        os.close(to_browser)
        os.close(from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass

    # --- the protocol --------------------------------------------------------------------------------

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Sends one command and returns its result; events that arrive meanwhile are kept in `events`."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        """The first event called `method` (already received, or the next to come)."""
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._next())

    def _next(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"no message from Chromium in {self.timeout:.0f} s")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    # --- a page ----------------------------------------------------------------------------------------

    def open(self, url: str) -> str:
        """A new tab showing `url`, loaded; returns its session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired")
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, session: str, selector: str) -> None:
        """A real mouse click (move, press, release) at the middle of the first element matching `selector`."""
        box = f"document.querySelector({json.dumps(selector)}).getBoundingClientRect()"
        x, y = self.evaluate(session, f"(r => [r.x + r.width / 2, r.y + r.height / 2])({box})")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                session=session,
            )

    def move_mouse(self, session: str, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=session)

    def press(self, session: str, key: str, code: int) -> None:
        """A key press (down and up) on whatever has the focus, e.g. ("ArrowRight", 39)."""
        for kind in ("rawKeyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code},
                session=session,
            )

    def problems(self) -> list[str]:
        """Uncaught exceptions, console errors and warnings, and browser log errors seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('exception', {}).get('description')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                found.append(f"console.{params['type']}: {[a.get('value') for a in params.get('args', [])]}")
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                found.append(f"log: {params['entry'].get('text')}")
        return found

    def requests(self) -> list[str]:
        """The URL of every request the pages made."""
        return [
            event["params"]["request"]["url"]
            for event in self.events
            if event.get("method") == "Network.requestWillBeSent"
        ]
