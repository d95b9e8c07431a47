"""The metrics endpoint in a process of its own: each snapshot rendered once, every
scrape served bytes.

Rendering a page took 0.2-1 s of CPU at the demo's size, and the Faust process paid it
for every scrape while it held the interpreter lock: 20 concurrent scrapers cut the
worker to 0.08x of its rate (issue #24). So the worker hands snapshots to a page process
(`Pages` is the worker's end, `serve_pages` the process), which renders each one once,
in the text format and in OpenMetrics, plain and gzipped, and serves those bytes to
every scrape until the next; a scrape never waits for a render after the first page.

The page process serves HTTP with monitor/export/http.py (bounded connections, TLS and
basic auth from the web configuration): /metrics, /healthz, and /readyz from the
readiness the worker sends with every refresh.

The page process asks for a snapshot (one byte) only while it is scraped (a scrape in
the last DEMAND_SECONDS) and then at most once per `metrics_refresh_seconds`, or per
1 / RENDER_SHARE of its last render if that is longer: rendering takes at most that
share of a core, and none of the worker's; it runs at a lower priority (nice
PAGE_NICENESS), so on a busy machine the fold goes first. The worker's whole cost is
the pickle of a snapshot it asked for. A scrape after a pause (none for DEMAND_SECONDS,
so no snapshot was asked for) waits up to STALE_SECONDS for a fresh page. While scrapes
go on, a late page (a busy worker, a slow render on a loaded machine) is served as it
is: waiting for the next one failed 1 s scrapes on a loaded CI machine (3 of 104). The
page process exits when the worker does, scraped or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import multiprocessing
import os
import pickle
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest as generate_text
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from monitor.export import catalog as c
from monitor.export.collector import PortInUse, cannot_listen, families
from monitor.export.http import CLOSE_REASONS, Limits, Request, Response, Server, text
from monitor.export.snapshot import Snapshot
from monitor.export.webconfig import WebConfigError, WebConfigFile
from monitor.frames import pack_frame, read_frame

__all__ = ["DEMAND_SECONDS", "RENDER_SHARE", "Book", "Endpoint", "Pages", "serve_pages"]

DEMAND_SECONDS: Final = 300.0  # snapshots are asked for while a scrape came this recently
RENDER_SHARE: Final = 0.1      # of one core, at most, spent rendering pages
STALE_SECONDS: Final = 10.0    # a scrape after a pause waits at most this long for a fresh page
PAGE_NICENESS: Final = 10
PAGE_THREADS: Final = 4        # scrapes waiting for a page (or rendering a name[] one) at once
BACKLOG: Final = 128           # 5 made a burst of 20 scrapers wait 1 s (SYN retry)
ANSWER_SECONDS: Final = 60.0   # a snapshot asked for and not sent by then: ask again
# /readyz fails when the worker has said nothing for this long (it says so every second).
READY_SILENCE_SECONDS: Final = 30.0
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
        self.own: Callable[[], list[Metric]] = list  # the page process's own families

    def demanded(self) -> bool:
        """Whether a scrape came within DEMAND_SECONDS."""
        return time.monotonic() - self.scraped < DEMAND_SECONDS

    def install(self, snapshot: Snapshot) -> None:
        """Render `snapshot`'s pages (the formats asked for lately) and make them current."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Rendered([*families(snapshot, self.budget, self.full),
                                     *self.own()]))
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
        scrapes (none within DEMAND_SECONDS, so the page is as old as the pause) this
        waits for a fresh page, up to STALE_SECONDS, rather than serve the old one."""
        with self.ready:
            paused = not self.demanded()  # no page was asked for lately: the last is old
            now = self.scraped = time.monotonic()
            if openmetrics:
                self.asked_openmetrics = now
            self.ready.notify_all()  # the asking loop may be waiting for demand
            if paused and now - self.installed > STALE_SECONDS:
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


class Endpoint:
    """The page process's answers: /metrics from the book, /healthz (this process serves),
    /readyz (the worker's last word on its readiness, if recent), 404 for the rest."""

    def __init__(self, book: Book) -> None:
        self.book = book
        self.pool = ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="ragmon-page")
        self.readiness: tuple[bool, str] | None = None
        self.heard = time.monotonic()  # when the worker last said how ready it is

    def hear(self, readiness: tuple[bool, str]) -> None:
        self.readiness, self.heard = readiness, time.monotonic()

    def ready(self) -> tuple[bool, str]:
        silent = time.monotonic() - self.heard
        if self.readiness is None:
            return False, "starting: no word from the worker yet"
        if silent > READY_SILENCE_SECONDS:
            return False, (f"no word from the worker for {silent:.0f} s (its loop is "
                           "blocked, or it cannot reach the broker)")
        return self.readiness

    async def route(self, request: Request) -> Response:
        if request.path == "/metrics":
            return await self._metrics(request)
        if request.path == "/healthz":
            return text(200, "ok")
        if request.path == "/readyz":
            ready, reason = self.ready()
            return text(200, "ready") if ready else text(503, f"not ready: {reason}")
        return text(404, "not found: ragmon serves /metrics, /healthz and /readyz")

    async def _metrics(self, request: Request) -> Response:
        accept = request.headers.get("accept", "")
        openmetrics = "application/openmetrics-text" in accept
        compressed = "gzip" in request.headers.get("accept-encoding", "")
        names = request.query.get("name[]")
        page = await asyncio.get_running_loop().run_in_executor(
            self.pool, self.book.page, openmetrics, compressed, names)
        if page is None:
            return text(503, "no snapshot yet")
        headers = [("Content-Type", OPENMETRICS if openmetrics else TEXT)]
        if compressed:
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, page, tuple(headers))


def http_families(server: Server) -> list[Metric]:
    """The endpoint's own counters (of this page process, since it started)."""
    counts = dict(server.counts)  # one C-level copy: the server's thread keeps counting
    requests = sorted((tuple(k.split(":")[1:]), v) for k, v in counts.items()
                      if k.startswith("requests:"))
    return [c.HTTP_REQUESTS.of(requests),
            c.HTTP_CLOSED.of(((reason,), counts.get(f"closed:{reason}", 0))
                             for reason in CLOSE_REASONS),
            c.HTTP_OPEN.of([((), len(server.open))])]


def serve_pages(sock: socket.socket, host: str, port: int, budget: int, full: bool,
                refresh_seconds: float, web_config_file: str | None = None,
                limits: Limits | None = None) -> None:
    """The page process: listen on host:port with the web configuration (the first
    message back says whether it could: `None`, or why not), then hear the worker's
    readiness and ask it for snapshots while scraped, until the worker goes away (end of
    file on `sock`)."""
    with contextlib.suppress(OSError):  # not allowed: run at the worker's priority
        os.nice(PAGE_NICENESS)
    book = Book(budget, full)
    try:
        web = WebConfigFile(web_config_file) if web_config_file else None
        listener = socket.create_server((host, port), backlog=BACKLOG)
    except WebConfigError as exc:
        error: str | None = str(exc)
    except OSError as exc:
        error = cannot_listen(host, port, exc)
    else:
        error = None
    for part in pack_frame(error):
        sock.sendall(part)
    if error is not None:
        return
    endpoint = Endpoint(book)
    server = Server(listener, endpoint.route, web, limits)
    book.own = partial(http_families, server)
    threading.Thread(target=asyncio.run, args=(server.serve(),), name="ragmon-pages",
                     daemon=True).start()
    arrived: queue.SimpleQueue[Snapshot] = queue.SimpleQueue()
    threading.Thread(target=_hear, args=(sock, endpoint, arrived), name="ragmon-worker-link",
                     daemon=True).start()
    interval = refresh_seconds
    while True:
        with book.ready:  # wait for demand (a scrape lately), looking up once a second
            book.ready.wait_for(lambda: book.demanded(), timeout=1.0)
        if not book.demanded():
            continue
        try:
            sock.sendall(_WANT)
        except OSError:
            os._exit(0)
        try:
            snapshot = arrived.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            continue  # the worker is busy: ask again
        started = time.perf_counter()
        book.install(snapshot)
        interval = max(refresh_seconds, (time.perf_counter() - started) / RENDER_SHARE)
        time.sleep(max(0.0, interval - (time.perf_counter() - started)))


def _hear(sock: socket.socket, endpoint: Endpoint, arrived: queue.SimpleQueue[Any]) -> None:
    """Read the worker's messages: its readiness (unasked, with every refresh) and the
    snapshots asked for; exit the process when the worker is gone."""
    while True:
        try:
            message = read_frame(sock)
        except OSError:
            message = None
        if message is None:
            os._exit(0)  # the worker is gone: so are its pages
        kind, value = pickle.loads(message)
        if kind == "ready":
            endpoint.hear(value)
        else:
            arrived.put(value)


class Pages:
    """The worker's end of the page process: start it (the port is bound there), then
    `offer` every new snapshot with the worker's readiness: the readiness is always sent
    (a few bytes), the snapshot only when the page process asked for one."""

    def __init__(self, host: str, port: int, budget: int, full: bool,
                 refresh_seconds: float, web_config_file: str | None = None,
                 limits: Limits | None = None) -> None:
        self.args = (host, port, budget, full, refresh_seconds, web_config_file, limits)
        self.process: Any = None
        self._socket: socket.socket | None = None
        self._wanted = False
        self._sent: Snapshot | None = None
        self._stopped = False

    def start(self) -> None:
        """Start the page process; PortInUse if it cannot listen (or its web
        configuration does not load)."""
        ours, theirs = socket.socketpair()
        context = multiprocessing.get_context("spawn")  # not a fork of Faust's threads
        self.process = context.Process(target=serve_pages, args=(theirs, *self.args),
                                       name="ragmon-pages", daemon=True)
        self.process.start()
        theirs.close()
        first = read_frame(ours)
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

    def offer(self, snapshot: Snapshot, readiness: tuple[bool, str] = (True, "ready")) -> None:
        """Tell the page process `readiness`; send `snapshot` if it asked for one since
        the last it got."""
        if self._stopped:
            return
        if self._socket is None and self.process is not None:
            self._lost()  # started once, then lost: try again
        sock = self._socket
        if sock is None:
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
        send: list[tuple[str, Any]] = [("ready", readiness)]
        if self._wanted and snapshot is not self._sent:
            send.append(("snapshot", snapshot))
        sock.setblocking(True)  # the page process reads at once: a few ms at most
        try:
            for message in send:
                for part in pack_frame(message):
                    sock.sendall(part)
        except OSError:
            return
        finally:
            sock.setblocking(False)
        if len(send) > 1:
            self._wanted, self._sent = False, snapshot

    def _lost(self) -> None:
        """The page process is gone (killed, or it failed): start another (the metrics
        endpoint comes back; if its port is taken meanwhile, say so and retry later)."""
        log.error("the metrics page process (pid %s) exited (code %s): starting another",
                  self.process.pid, self.process.exitcode)
        self.stop()
        self._stopped = False
        try:
            self.start()
        except PortInUse as exc:
            log.error("%s; retrying on the next snapshot", exc)
        self._wanted, self._sent = False, None

    def stop(self, wait_seconds: float = 0.0) -> None:
        """Close the page process's socket (it exits at once); wait for it if asked."""
        self._stopped = True
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if wait_seconds and self.process is not None:
            self.process.join(timeout=wait_seconds)
