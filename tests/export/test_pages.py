"""The page process (monitor/export/pages.py): a real process serving real HTTP scrapes
of snapshots the test hands it, as the worker does."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import lines
from prometheus_client import CollectorRegistry, generate_latest

from monitor.aggregate.pipeline import Pipeline
from monitor.broker import free_port
from monitor.export.collector import Collector, PortInUse, snapshot_of
from monitor.export.pages import Pages
from monitor.export.snapshot import Health
from monitor.settings import load
from monitor.simulate import Simulator


def _get(port: int, accept: str = "", encoding: str = "", query: str = "") -> tuple[dict, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics{query}", headers={
        "Accept": accept, "Accept-Encoding": encoding})
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), response.read()


def _offer_until(pages: Pages, snapshot, done) -> None:  # type: ignore[no-untyped-def]
    """Offer `snapshot` once a second, as the worker's refresh does, until `done()`."""
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "the page process never took the snapshot"
        pages.offer(snapshot)
        time.sleep(0.05)


@pytest.fixture
def pages():
    started = Pages("127.0.0.1", free_port(), 20_000, False, 0.1)
    started.start()
    try:
        yield started
    finally:
        started.stop()
        started.process.join(timeout=10)


def test_every_scrape_of_a_snapshot_gets_the_bytes_rendered_once(pages, examples):
    pipeline = Pipeline(load())
    pipeline.feed(lines(examples / "traces.jsonl"))
    snapshot = snapshot_of([pipeline], Health(partitions_owned=1))
    port = pages.args[1]
    _offer_until(pages, snapshot, lambda: pages._sent is snapshot)
    # The same page as the collector renders in process, in both formats.
    registry = CollectorRegistry()
    collector = Collector(20_000)
    registry.register(collector)
    collector.current = snapshot
    headers, text = _get(port)
    assert headers["Content-Type"].startswith("text/plain")
    # ... followed by the endpoint's own families (ragmon_http_*).
    own = text.index(b"# HELP ragmon_http_requests_total")
    assert text[:own] == generate_latest(registry)
    assert b"ragmon_http_connections_open " in text[own:]
    with ThreadPoolExecutor(20) as pool:
        pages_seen = list(pool.map(lambda _: _get(port, encoding="gzip"), range(40)))
    assert all(h["Content-Encoding"] == "gzip" for h, _ in pages_seen)
    assert len({gzip.decompress(body) for _, body in pages_seen}) == 1
    headers, openmetrics = _get(port, accept="application/openmetrics-text; version=1.0.0")
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.endswith(b"# EOF\n")
    _, one = _get(port, query="?name[]=ragmon_gate_leaks_total")
    names = {line.split(b"{")[0].split(b" ")[0] for line in one.splitlines()
             if not line.startswith(b"#")}
    assert names == {b"ragmon_gate_leaks_total"}


def test_a_new_snapshot_replaces_the_page_and_the_process_follows_the_worker(pages):
    pipeline = Pipeline(load())
    traces = list(Simulator(seed=1).traces(400))
    pipeline.feed(traces[:200])
    first = snapshot_of([pipeline], Health(partitions_owned=1))
    port = pages.args[1]
    _offer_until(pages, first, lambda: pages._sent is first)
    before = _get(port)[1]
    pipeline.feed(traces[200:])
    second = snapshot_of([pipeline], Health(partitions_owned=1))
    _offer_until(pages, second, lambda: pages._sent is second)
    deadline = time.monotonic() + 30
    while _get(port)[1] == before:  # installed once rendered
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert b'outcome="read"} 400.0' in _get(port)[1]
    # The endpoint counts its own requests (as of the page's render).
    assert b'ragmon_http_requests_total{code="200",path="/metrics"}' in _get(port)[1]
    pages.stop()  # as when the worker exits, even by kill -9: the socket closes
    pages.process.join(timeout=10)
    assert pages.process.exitcode == 0
    with pytest.raises(OSError):
        _get(port)


def test_a_port_in_use_is_one_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port} \\(metrics_port\\)"):
            Pages("127.0.0.1", port, 20_000, False, 1.0).start()


@pytest.mark.parametrize("paused", [False, True])
def test_a_late_page_is_served_at_once_while_scraped_and_waited_for_after_a_pause(
        examples, paused):
    """While scrapes go on, a page the refresh has not replaced for STALE_SECONDS (a busy
    worker, a slow render on a loaded machine) is served as it is: waiting for the next
    failed 1 s scrapes. After a pause in the scrapes (no page asked for), the page is old
    because nobody asked: the scrape waits for a fresh one."""
    from prometheus_client.core import GaugeMetricFamily

    from monitor.export import pages as module

    pipeline = Pipeline(load())
    pipeline.feed(lines(examples / "traces.jsonl"))
    snapshot = snapshot_of([pipeline], Health(partitions_owned=1))
    book = module.Book(20_000, False)
    installs = iter(range(1, 3))
    book.own = lambda: [GaugeMetricFamily("probe_install", "which install", value=next(installs))]
    book.install(snapshot)
    book.installed -= module.STALE_SECONDS + 1
    if paused:
        book.scraped -= module.DEMAND_SECONDS + 1
    armed = threading.Event()

    def install_when_scraped() -> None:  # the refresh, answering the scrape's demand
        with book.ready:
            before = book.scraped
            armed.set()
            book.ready.wait_for(lambda: book.scraped != before)
        book.install(snapshot)

    threading.Thread(target=install_when_scraped, daemon=True).start()
    armed.wait()
    page = book.page(openmetrics=False, compressed=False, names=None)
    # Served at once, page() holds the lock throughout and the refresh installs after it:
    # the first install's page. Waited for: the second's.
    assert f"probe_install {2.0 if paused else 1.0}".encode() in page
