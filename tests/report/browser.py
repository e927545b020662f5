"""Headless Chromium for the `browser` tests: its command line for a page's DOM
(`--dump-dom`) and a screenshot (`--screenshot`), and a page driven over the DevTools
protocol (aiohttp's websocket client) for what needs clicks and time: opening a trial,
sorting, filtering, a live page refreshing.

A missing Chromium fails the test with the way to install it; it never skips. Every
Chromium runs in its own session (process group) and the group is checked gone after it:
no test leaves a browser process behind.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",  # as root in a container; the report is our own page
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
]
BROWSER_WAIT_SEC = 60.0


def chromium() -> str:
    """The Chromium binary, or a test failure that says how to get one."""
    for name in (os.environ.get("TRIALBOX_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(name) if name else None
        if found:
            return found
    pytest.fail(
        "no headless Chromium found: install it with scripts/ensure-browser.sh (on Debian: "
        "apt-get install chromium), or set TRIALBOX_CHROMIUM to a Chromium binary, and rerun",
        pytrace=False,
    )


def _alive_in_group(pgid: int) -> list[int]:
    """The processes of group `pgid` that still run (zombies, which only wait for init to
    reap them, do not count), read from /proc."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def _reap(process: subprocess.Popen[Any]) -> None:
    """End the browser and every process of its group (its helpers linger a second or two
    after it exits; TERM ends them at once), then check that none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive_in_group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # a state, bounded
    left = _alive_in_group(process.pid)
    if left:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"chromium left processes behind (now killed): {left}")


def run(args: list[str], profile: Path) -> str:
    """`chromium FLAGS ARGS` to its end; its stdout."""
    process = subprocess.Popen(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = process.communicate(timeout=BROWSER_WAIT_SEC)
    finally:
        _reap(process)
    assert process.returncode == 0, f"chromium {args} exited {process.returncode}"
    return out


def dump_dom(url: str, profile: Path) -> str:
    """The DOM after the page's script ran, serialized (`--dump-dom`)."""
    return run(["--dump-dom", url], profile)


def screenshot(url: str, out: Path, profile: Path, size: tuple[int, int]) -> bytes:
    run([f"--screenshot={out}", f"--window-size={size[0]},{size[1]}", url], profile)
    return out.read_bytes()


class Page:
    """One tab over the DevTools protocol: evaluate script, wait for a state."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.socket.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.socket.receive_json(), BROWSER_WAIT_SEC)
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, within: float = 15.0) -> Any:
        """The expression's value once truthy; an AssertionError after `within` seconds."""
        deadline = time.monotonic() + within
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"still false after {within} s: {expression}")
            await asyncio.sleep(0.05)

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        )

    async def screenshot(self, width: int, height: int) -> bytes:
        await self.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=height,
            deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        shot = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


@contextlib.asynccontextmanager
async def browser_page(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with one tab, driven over DevTools; closed and reaped after."""
    process = await asyncio.to_thread(
        subprocess.Popen,
        [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + BROWSER_WAIT_SEC
        while not port_file.is_file() or not port_file.read_text().strip():
            assert process.poll() is None, f"chromium exited {process.returncode} at start"
            assert time.monotonic() < deadline, "chromium opened no DevTools port"
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json()
            [tab] = [t for t in targets if t["type"] == "page"]
            async with session.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                yield Page(socket)
    finally:
        await asyncio.to_thread(_reap, process)
