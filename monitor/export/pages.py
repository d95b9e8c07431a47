"""The metrics endpoint in a process of its own: each snapshot rendered once, every
scrape served bytes.

Rendering a page took 0.2-1 s of CPU at the demo's size, and the Faust process paid it
for every scrape while it held the interpreter lock: 20 concurrent scrapers cut the
worker to 0.08x of its rate (issue #24). So the worker hands snapshots to a page process
(`Pages` is the worker's end, `serve_pages` the process), which renders each one once,
in the text format and in OpenMetrics, plain and gzipped, and serves those bytes to
every scrape until the next; a scrape never waits for a render after the first page.

The page process asks for a snapshot (one byte) only while it is scraped (a scrape in
the last DEMAND_SECONDS) and then at most once per `metrics_refresh_seconds`, or per
1 / RENDER_SHARE of its last render if that is longer: rendering takes at most that
share of a core, and none of the worker's; it runs at a lower priority (nice
PAGE_NICENESS), so on a busy machine the fold goes first. The worker's whole cost is
the pickle of a snapshot it asked for. A scrape after a pause (the page older than
STALE_SECONDS) waits for a fresh page. The page process exits when the worker does,
scraped or not.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import multiprocessing
import os
import pickle
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, urlparse

from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest as generate_text
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from monitor.export.collector import PortInUse, cannot_listen, families
from monitor.export.snapshot import Snapshot
from monitor.messages import pack_message, read_message

__all__ = ["DEMAND_SECONDS", "RENDER_SHARE", "Book", "Pages", "serve_pages"]

DEMAND_SECONDS: Final = 300.0  # snapshots are asked for while a scrape came this recently
RENDER_SHARE: Final = 0.1      # of one core, at most, spent rendering pages
STALE_SECONDS: Final = 10.0    # a scrape after a pause waits this long for a fresh page
PAGE_NICENESS: Final = 10
TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"
_WANT: Final = b"?"

log = logging.getLogger("ragmon.worker")


class _Rendered(Collector):
    """A registry's only collector: the families of one snapshot, built once."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics

    def describe(self) -> Iterator[Metric]:  # the names `?name[]=` scrapes select by
        yield from self.metrics


class Book:
    """The pages of the latest snapshot: rendered once per format, gzipped once."""

    def __init__(self, budget: int, full: bool) -> None:
        self.budget = budget
        self.full = full
        self.ready = threading.Condition()
        self.registry: CollectorRegistry | None = None
        self.pages: dict[tuple[bool, bool], bytes] = {}   # (openmetrics, gzip) -> page
        self.scraped = time.monotonic()       # the last scrape (the start counts as one)
        self.installed = float("-inf")        # when the current page was installed
        self.asked_openmetrics = 0.0          # the last scrape that asked for OpenMetrics

    def demanded(self) -> bool:
        """Whether a scrape came within DEMAND_SECONDS."""
        return time.monotonic() - self.scraped < DEMAND_SECONDS

    def install(self, snapshot: Snapshot) -> None:
        """Render `snapshot`'s pages (the formats asked for lately) and make them current."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Rendered(families(snapshot, self.budget, self.full)))
        openmetrics = time.monotonic() - self.asked_openmetrics < DEMAND_SECONDS
        pages: dict[tuple[bool, bool], bytes] = {}
        for form in (False, True) if openmetrics else (False,):
            _render_into(pages, registry, form)
        with self.ready:
            self.registry, self.pages = registry, pages
            self.installed = time.monotonic()
            self.ready.notify_all()

    def page(self, openmetrics: bool, compressed: bool, names: list[str] | None,
             timeout: float = 30.0) -> bytes | None:
        """The current page in a format (`None`: no snapshot within `timeout`); with
        `names`, only those families (rendered for this scrape). After a pause in the
        scrapes (the page older than STALE_SECONDS) this waits for a fresh page, up to
        STALE_SECONDS, rather than serve the old one at once."""
        with self.ready:
            now = self.scraped = time.monotonic()
            if openmetrics:
                self.asked_openmetrics = now
            self.ready.notify_all()  # the asking loop may be waiting for demand
            if now - self.installed > STALE_SECONDS:
                self.ready.wait_for(lambda: self.installed >= now, STALE_SECONDS)
            if not self.ready.wait_for(lambda: self.registry is not None, timeout):
                return None
            registry = self.registry
            assert registry is not None
            if names:
                chosen: dict[tuple[bool, bool], bytes] = {}
                _render_into(chosen, registry.restricted_registry(names), openmetrics)
                return chosen[(openmetrics, compressed)]
            if (openmetrics, compressed) not in self.pages:  # not asked for lately: now, once
                _render_into(self.pages, registry, openmetrics)
            return self.pages[(openmetrics, compressed)]


def _render_into(pages: dict[tuple[bool, bool], bytes], registry: Any,
                 openmetrics: bool) -> None:
    """Render `registry` in one format into `pages`, plain and gzipped."""
    if openmetrics:
        plain: bytes = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
    else:
        plain = generate_text(registry)
    pages[(openmetrics, False)] = plain
    pages[(openmetrics, True)] = gzip.compress(plain, compresslevel=6)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 made a burst of 20 scrapers wait 1 s (SYN retry)
    book: Book


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes: a thread per scraper
    timeout = 120  # seconds a kept connection may idle before its thread lets it go

    def do_GET(self) -> None:
        accept = self.headers.get("Accept", "")
        openmetrics = "application/openmetrics-text" in accept
        compressed = "gzip" in self.headers.get("Accept-Encoding", "")
        names = parse_qs(urlparse(self.path).query).get("name[]")
        page = self.server.book.page(openmetrics, compressed, names)
        if page is None:
            self.send_error(503, "no snapshot yet")
            return
        self.send_response(200)
        self.send_header("Content-Type", OPENMETRICS if openmetrics else TEXT)
        if compressed:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape is noise; Prometheus records its scrapes


def serve_pages(sock: socket.socket, host: str, port: int, budget: int, full: bool,
                refresh_seconds: float) -> None:
    """The page process: listen on host:port (the first message back says whether it
    could: `None`, or why not), then ask the worker for snapshots while scraped and
    install them, until the worker goes away (end of file on `sock`)."""
    with contextlib.suppress(OSError):  # not allowed: run at the worker's priority
        os.nice(PAGE_NICENESS)
    book = Book(budget, full)
    try:
        server = _Server((host, port), _Handler)
    except OSError as exc:
        for part in pack_message(cannot_listen(host, port, exc)):
            sock.sendall(part)
        return
    server.book = book
    for part in pack_message(None):
        sock.sendall(part)
    threading.Thread(target=server.serve_forever, name="ragmon-pages", daemon=True).start()
    interval = refresh_seconds
    with sock:
        while True:
            with book.ready:  # wait for demand (a scrape lately), looking up once a second
                book.ready.wait_for(lambda: book.demanded(), timeout=1.0)
            if _closed(sock):
                os._exit(0)  # the worker is gone: so are its pages
            if not book.demanded():
                continue
            try:
                sock.sendall(_WANT)
                message = read_message(sock)
            except OSError:
                message = None
            if message is None:
                os._exit(0)
            started = time.perf_counter()
            book.install(pickle.loads(message))
            interval = max(refresh_seconds, (time.perf_counter() - started) / RENDER_SHARE)
            time.sleep(max(0.0, interval - (time.perf_counter() - started)))


def _closed(sock: socket.socket) -> bool:
    """Whether the worker closed its end (it sends nothing unasked: readable is EOF)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable) and not sock.recv(1, socket.MSG_PEEK)


class Pages:
    """The worker's end of the page process: start it (the port is bound there), then
    `offer` every new snapshot; it is sent only when the page process asked for one."""

    def __init__(self, host: str, port: int, budget: int, full: bool,
                 refresh_seconds: float) -> None:
        self.args = (host, port, budget, full, refresh_seconds)
        self.process: Any = None
        self._socket: socket.socket | None = None
        self._wanted = False
        self._sent: Snapshot | None = None

    def start(self) -> None:
        """Start the page process; PortInUse if it cannot listen."""
        ours, theirs = socket.socketpair()
        context = multiprocessing.get_context("spawn")  # not a fork of Faust's threads
        self.process = context.Process(target=serve_pages, args=(theirs, *self.args),
                                       name="ragmon-pages", daemon=True)
        self.process.start()
        theirs.close()
        first = read_message(ours)
        error = pickle.loads(first) if first is not None else "the page process exited"
        if error is not None:
            ours.close()
            self.process.join(timeout=5)
            raise PortInUse(error)
        ours.setblocking(False)
        self._socket = ours

    @property
    def running(self) -> bool:
        return self._socket is not None

    def offer(self, snapshot: Snapshot) -> None:
        """Send `snapshot` if the page process asked for one since the last it got."""
        if self._socket is None and self.process is not None:
            self._lost()  # started once, then lost: try again
        sock = self._socket
        if sock is None or snapshot is self._sent:
            return
        try:
            while True:  # requests are single bytes; several are one
                if not sock.recv(64):
                    self._lost()
                    return
                self._wanted = True
        except BlockingIOError:
            pass
        except OSError:
            self._lost()
            return
        if not self._wanted:
            return
        sock.setblocking(True)  # the page process reads at once: a few ms at most
        try:
            for part in pack_message(snapshot):
                sock.sendall(part)
        except OSError:
            return
        finally:
            sock.setblocking(False)
        self._wanted, self._sent = False, snapshot

    def _lost(self) -> None:
        """The page process is gone (killed, or it failed): start another (the metrics
        endpoint comes back; if its port is taken meanwhile, say so and retry later)."""
        log.error("the metrics page process (pid %s) exited (code %s): starting another",
                  self.process.pid, self.process.exitcode)
        self.stop()
        try:
            self.start()
        except PortInUse as exc:
            log.error("%s; retrying on the next snapshot", exc)
        self._wanted, self._sent = False, None

    def stop(self, wait_seconds: float = 0.0) -> None:
        """Close the page process's socket (it exits at once); wait for it if asked."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if wait_seconds and self.process is not None:
            self.process.join(timeout=wait_seconds)
