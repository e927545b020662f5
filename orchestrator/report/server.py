"""`trialbox view` serving: the report of job folders, read again on every request.

The standard library's threading HTTP server is enough: one reader, a few requests a
minute. It binds 127.0.0.1 unless told otherwise, since trial logs can hold what a task
should not show the network. Routes:

- `GET /` the page (`?part=main`: only its content, what a live page swaps in);
- `GET /api/state` a small JSON document, `{"fingerprint", "running", "jobs"}`, that the page
  polls (every 2 s while a job runs) to learn that something changed;
- `GET /trial?job=JOB&id=TRIAL` one trial's detail, when the page opens it.

`ReportServer` is the server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from orchestrator.common.defaults import DEFAULT_REPORT_HOST as DEFAULT_HOST
from orchestrator.common.defaults import DEFAULT_REPORT_PORT as DEFAULT_PORT
from orchestrator.report.build import live_state, report_html, trial_html
from orchestrator.report.disk import NoJobFound
from orchestrator.report.files import DEFAULT_LOG_CAP
from orchestrator.report.htmlkit import esc

log = logging.getLogger(__name__)

# For fragments and JSON; the page itself carries its own policy with its script's nonce.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'"


class ReportServer(ThreadingHTTPServer):
    """Serves the report of `paths` (job folders, or folders of them)."""

    # Daemon threads: an idle browser socket never holds up Ctrl-C. `serving` still waits
    # (bounded) for the requests being answered, so nothing outlives its block.
    daemon_threads = True

    def __init__(
        self,
        paths: list[Path],
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        log_cap: int = DEFAULT_LOG_CAP,
    ) -> None:
        self.paths = paths
        self.log_cap = log_cap
        self._answering: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """As the standard library does, on a daemon thread this server remembers."""
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        self._answering.add(thread)
        thread.start()

    def wait_for_requests(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds in all, for the requests being answered."""
        deadline = time.monotonic() + timeout
        for thread in list(self._answering):
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}/"


@contextlib.contextmanager
def serving(server: ReportServer) -> Iterator[ReportServer]:
    """The server answering on a thread while the block runs; shut down and closed after
    it, whatever happened, so nothing outlives its caller (tests use this)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.wait_for_requests(timeout=10)
        server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ReportServer
    server_version = "trialbox-view"
    timeout = 30  # a connection that sends nothing is closed, its thread freed

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        paths, cap = self.server.paths, self.server.log_cap
        try:
            if url.path == "/":
                part = "main" if query.get("part") == "main" else "page"
                self._send(report_html(paths, live=True, log_cap=cap, part=part), "text/html")
            elif url.path == "/api/state":
                self._send(live_state(paths).model_dump_json(), "application/json")
            elif url.path == "/trial":
                found = trial_html(paths, query.get("job", ""), query.get("id", ""), cap)
                if found is None:
                    self._error(HTTPStatus.NOT_FOUND, "no such trial in these jobs")
                else:
                    self._send(found, "text/html")
            else:
                self._error(HTTPStatus.NOT_FOUND, "not found")
        except NoJobFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except Exception:  # a bug: answer the request, keep serving, and say where
            log.exception("trialbox view: %s failed", self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "the report failed; see the console")

    def _send(self, text: str, kind: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if kind != "text/html" or not text.startswith("<!doctype"):
            self.send_header("Content-Security-Policy", _POLICY)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(f"<p>{esc(message)}</p>", "text/html", status)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)
