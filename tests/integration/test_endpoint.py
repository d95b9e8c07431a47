"""The metrics endpoint as an SRE exposes it (monitor/export/http.py, webconfig.py): real
page processes on real sockets, with TLS, basic auth and client certificates from a web
configuration file, health probes, 404s, and clients that are slow, many or rude."""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import EXAMPLES, lines
from tls import hashed, make_pki

from monitor.aggregate.pipeline import Pipeline
from monitor.broker import free_port
from monitor.export.collector import PortInUse, snapshot_of
from monitor.export.http import Limits
from monitor.export.pages import Pages
from monitor.export.snapshot import Health
from monitor.export.webconfig import WebConfigError, load
from monitor.settings import load as load_settings

# Real page processes on real sockets, with seconds of real time for slow clients and
# file watchers: the full suite runs them, the everyday tier does not.
pytestmark = pytest.mark.integration

PASSWORD = "scrape-secret-8841"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("prometheus", "someone-else"))


@pytest.fixture(scope="module")
def snapshot():  # type: ignore[no-untyped-def]
    pipeline = Pipeline(load_settings())
    pipeline.feed(lines(EXAMPLES / "traces.jsonl"))
    return snapshot_of([pipeline], Health(partitions_owned=1))


def start(snapshot, web: Path | None = None, limits: Limits | None = None,  # type: ignore[no-untyped-def]
          ready: tuple[bool, str] = (True, "ready"), budget: int = 20_000,
          full: bool = False) -> Pages:
    pages = Pages("127.0.0.1", free_port(), budget, full, 0.1,
                  str(web) if web else None, limits)
    pages.start()
    pages.ready = ready  # type: ignore[attr-defined]
    threading.Thread(target=_refresh, args=(pages, snapshot), daemon=True).start()
    return pages


def _refresh(pages: Pages, snapshot) -> None:  # type: ignore[no-untyped-def]
    """Offer the snapshot and readiness ten times a second, as the worker's refresh does
    once a second, until the pages are stopped."""
    while pages.running:
        # A new snapshot object each time, as the worker makes (the same one is sent once).
        pages.offer(copy.copy(snapshot), pages.ready)  # type: ignore[attr-defined]
        time.sleep(0.1)


@pytest.fixture
def served(snapshot) -> Iterator[Pages]:  # type: ignore[no-untyped-def]
    pages = start(snapshot)
    try:
        yield pages
    finally:
        pages.stop(wait_seconds=10)


def request(port: int, path: str = "/metrics", *, method: str = "GET",
            context: ssl.SSLContext | None = None, user: str | None = None,
            password: str = PASSWORD, timeout: float = 10.0) -> tuple[int, bytes, dict]:
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
        if context else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout))
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(), dict(response.headers)
    finally:
        conn.close()


def client_context(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        context.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return context


def metrics_page(pages: Pages, **kwargs) -> bytes:  # type: ignore[no-untyped-def]
    """A /metrics page (the first waits for the page process to render one)."""
    status, body, _ = request(pages.args[1], timeout=60, **kwargs)
    assert status == 200, (status, body)
    return body


# --- paths and probes -------------------------------------------------------------------

def test_metrics_health_and_readiness_paths_and_404_for_the_rest(served, snapshot):
    port = served.args[1]
    assert b"ragmon_traces_total" in metrics_page(served)
    assert request(port, "/healthz")[:2] == (200, b"ok\n")
    assert request(port, "/readyz")[:2] == (200, b"ready\n")
    for path in ("/", "/metricsx", "/favicon.ico", "/healthz/x", "/../etc/passwd"):
        assert request(port, path)[0] == 404, path
    status, _, headers = request(port, "/metrics", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, body, headers = request(port, "/metrics", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000
    served.ready = (False, "references not loaded yet")
    time.sleep(0.5)
    assert request(port, "/readyz")[:2] == (503, b"not ready: references not loaded yet\n")
    assert request(port, "/healthz")[0] == 200  # alive all the same


def test_readiness_before_the_worker_has_said_anything():
    pages = Pages("127.0.0.1", free_port(), 20_000, False, 0.1)
    pages.start()
    try:
        status, body, _ = request(pages.args[1], "/readyz")
        assert status == 503 and b"no word from the worker yet" in body
        assert request(pages.args[1], "/healthz")[0] == 200
    finally:
        pages.stop(wait_seconds=10)


def test_readiness_goes_stale_when_the_worker_falls_silent(monkeypatch):
    from monitor.export import pages as module

    endpoint = module.Endpoint(module.Book(20_000, False))
    endpoint.hear((True, "ready"))
    assert endpoint.ready() == (True, "ready")
    endpoint.heard -= module.READY_SILENCE_SECONDS + 1
    ready, reason = endpoint.ready()
    assert not ready and reason.startswith("no word from the worker for 31 s")


def test_basic_auth_caches_successes_only():
    from monitor.export.auth import BasicAuth, credentials

    users = {"prometheus": hashed(PASSWORD, cost=4).encode()}
    auth = BasicAuth()
    assert not auth.cached(users, "prometheus", PASSWORD.encode())
    assert not auth.check(users, "prometheus", b"wrong")
    assert not auth.cached(users, "prometheus", b"wrong")
    assert not auth.check(users, "nobody", PASSWORD.encode())
    assert not auth.check(users, "prometheus", b"x" * 100)  # past bcrypt's 72 bytes
    assert auth.check(users, "prometheus", PASSWORD.encode())
    assert auth.cached(users, "prometheus", PASSWORD.encode())
    rotated = {"prometheus": hashed("other", cost=4).encode()}
    assert not auth.cached(rotated, "prometheus", PASSWORD.encode())  # a new hash: afresh
    header = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    assert credentials(header) == ("prometheus", PASSWORD.encode())
    assert credentials("Bearer x") is None and credentials("Basic !!!") is None
    assert credentials("Basic " + base64.b64encode(b"no-colon").decode()) is None


# --- web configuration: loading ------------------------------------------------------------

def write(folder: Path, text: str, name: str = "web.yml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
     "cert_file"),
    ("tls_server_config:\n  cert_file: server.crt\n", "needs key_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: ca.key\n", "do not load"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.pem\n",
     "accepts any certificate"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  min_version: TLS14\n", "min_version"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "cipher_suites"),
    ("basic_auth_users:\n  prometheus: " + PASSWORD + "\n", "not a bcrypt hash"),
    ("basic_auth_user:\n  prometheus: x\n", "unknown field 'basic_auth_user'"),
    ("tls_server_config: [1, 2]\n", "must be a mapping"),
    ("rate_limit: {interval: soon, burst: 2}\n", "rate_limit"),
    ("basic_auth_users: {a: 1\n", "not YAML"),
    ("basic_auth_users:\n  prometheus: " + PASSWORD + ": x\n", "line 2, column"),
])
def test_a_web_config_that_cannot_work_is_one_line(pki, tmp_path, text, expected):
    path = write(pki, text, name=f"bad-{abs(hash(text))}.yml")
    with pytest.raises(WebConfigError) as error:
        load(path)
    message = str(error.value)
    assert expected in message and "\n" not in message, message
    assert str(path) in message
    assert PASSWORD not in message  # a password written where a hash belongs stays unsaid


def test_the_worker_refuses_to_start_with_a_bad_web_config(pki, tmp_path):
    path = write(tmp_path, "tls_server_config:\n  cert_file: /nonexistent/server.crt\n"
                           "  key_file: /nonexistent/server.key\n")
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "worker",
                             "--web-config-file", str(path), "--bootstrap", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "ragmon: web config" in result.stderr and "cannot read it" in result.stderr
    with pytest.raises(PortInUse, match="cannot read it"):  # the page process says it too
        Pages("127.0.0.1", free_port(), 20_000, False, 0.1, str(path)).start()


# --- TLS, basic auth, client certificates -----------------------------------------------------

TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def test_tls_with_basic_auth(pki, snapshot, capfd):
    config = write(pki, TLS + f"basic_auth_users:\n  prometheus: '{hashed(PASSWORD)}'\n"
                   "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
                   "tls-auth.yml")
    pages = start(snapshot, config)
    try:
        port, tls = pages.args[1], client_context(pki)
        body = metrics_page(pages, context=tls, user="prometheus")
        assert b"ragmon_traces_total" in body
        status, _, headers = request(port, context=tls)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert request(port, context=tls, user="prometheus", password="wrong")[0] == 401
        assert request(port, context=tls, user="nobody")[0] == 401
        assert request(port, "/healthz", context=tls)[0] == 401  # probes too, by default
        _, _, headers = request(port, context=tls, user="prometheus")
        assert headers["X-Content-Type-Options"] == "nosniff"
        # Plain HTTP to the TLS port: refused with a line that says why.
        status, body, _ = request(port)
        assert status == 400 and b"HTTP request to an HTTPS server" in body
        # A client that does not trust the certificate gets no further than the handshake.
        with pytest.raises(ssl.SSLError):
            request(port, context=ssl.create_default_context(cafile=str(pki / "other-ca.pem")))
    finally:
        pages.stop(wait_seconds=10)
    captured = capfd.readouterr()
    assert PASSWORD not in captured.out + captured.err


def test_probes_without_auth_when_the_web_config_says_so(pki, snapshot):
    config = write(pki, TLS + f"basic_auth_users:\n  prometheus: '{hashed(PASSWORD)}'\n"
                   "health_probes_without_auth: true\n", "probes.yml")
    pages = start(snapshot, config)
    try:
        port, tls = pages.args[1], client_context(pki)
        assert request(port, "/healthz", context=tls)[:2] == (200, b"ok\n")
        # The page process hears from the (test's) worker a moment after it starts.
        deadline = time.monotonic() + 30
        while b"no word from the worker yet" in (ready := request(port, "/readyz",
                                                                   context=tls))[1]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert ready[0] == 200
        assert request(port, "/metrics", context=tls)[0] == 401
        assert request(port, "/nothing", context=tls)[0] == 401  # no hint without auth
    finally:
        pages.stop(wait_seconds=10)


def test_client_certificates(pki, snapshot):
    config = write(pki, TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
                   "  client_ca_file: ca.pem\n  client_allowed_sans: [prometheus]\n", "mtls.yml")
    pages = start(snapshot, config)
    try:
        port = pages.args[1]
        assert b"ragmon_traces_total" in metrics_page(
            pages, context=client_context(pki, "client-prometheus"))
        for refused in (None, "stranger", "client-someone-else"):
            with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
                request(port, context=client_context(pki, refused))
    finally:
        pages.stop(wait_seconds=10)


def test_a_changed_web_config_applies_without_a_restart(pki, snapshot, tmp_path):
    config = write(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed(PASSWORD)}'\n")
    pages = start(snapshot, config)
    try:
        port = pages.args[1]
        metrics_page(pages, user="prometheus")
        config.write_text(f"basic_auth_users:\n  prometheus: '{hashed('rotated-1')}'\n")
        deadline = time.monotonic() + 15
        while request(port, user="prometheus", password="rotated-1")[0] != 200:
            assert time.monotonic() < deadline, "the new password never applied"
            time.sleep(0.3)
        assert request(port, user="prometheus")[0] == 401
        config.write_text("basic_auth_users: [broken\n")  # kept: the last good one
        time.sleep(2.5)
        assert request(port, user="prometheus", password="rotated-1")[0] == 200
    finally:
        pages.stop(wait_seconds=10)


# --- slow, many and rude clients ----------------------------------------------------------------

def test_slow_and_idle_clients_cannot_starve_a_scrape(snapshot):
    """300 slowloris clients (a header byte a second) and 100 idle ones against a limit of
    128 connections (headers due within 3 s here, 10 by default): every scrape meanwhile is
    answered within Prometheus's 10 s timeout."""
    served = start(snapshot, limits=Limits(header_seconds=3.0))
    port = served.args[1]
    metrics_page(served)
    crowd: list[socket.socket] = []
    try:
        for i in range(400):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 4:
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # and then a byte a second
            crowd.append(sock)
        answered = []
        for _second in range(6):
            for sock in crowd:
                with contextlib.suppress(OSError):  # closed by the server: as it should be
                    sock.send(b"X")
            started = time.monotonic()
            status, _body, _ = request(port, timeout=10)
            answered.append((status, time.monotonic() - started))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        assert all(status == 200 for status, _ in answered), answered
        text = metrics_page(served).decode()
        closed = {line.split('"')[1]: float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("ragmon_http_connections_closed_total{")}
        assert closed["limit"] >= 400 - 128, closed
        assert closed["header_timeout"] >= 1, closed
        open_now = float(next(line.split()[-1] for line in text.splitlines()
                              if line.startswith("ragmon_http_connections_open ")))
        assert open_now <= 128
    finally:
        served.stop(wait_seconds=10)
        for sock in crowd:
            sock.close()


def test_a_client_leaving_mid_response_is_counted_not_a_traceback(capfd):
    """Prometheus abandoning a scrape at its timeout: the client resets the connection
    while a large page (~0.7 MB, more than a 4 KiB receive window lets through) is
    still being written."""
    pipeline = Pipeline(load_settings(slice_values_max=200))
    from monitor.simulate import Simulator
    pipeline.feed(list(Simulator(seed=2).traces(20_000)))
    big = snapshot_of([pipeline], Health(partitions_owned=1))
    pages = start(big, budget=1_000_000, full=True)
    try:
        port = pages.args[1]
        metrics_page(pages)
        for _ in range(5):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(1024)  # the response has begun
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset, as a client giving up at its timeout
        deadline = time.monotonic() + 60
        while b'ragmon_http_connections_closed_total{reason="abandoned"} 5.0' not in \
                request(port, timeout=60)[1]:
            assert time.monotonic() < deadline, "abandoned responses not counted"
            time.sleep(0.3)
    finally:
        pages.stop(wait_seconds=10)
    err = capfd.readouterr().err  # the page process writes to the test's stderr
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]


def test_many_concurrent_scrapes_over_tls_with_auth(pki, snapshot):
    config = write(pki, TLS + f"basic_auth_users:\n  prometheus: '{hashed(PASSWORD)}'\n",
                   "many.yml")
    pages = start(snapshot, config)
    try:
        tls = client_context(pki)
        metrics_page(pages, context=tls, user="prometheus")
        with ThreadPoolExecutor(20) as pool:
            statuses = list(pool.map(lambda _: request(pages.args[1], context=tls,
                                                       user="prometheus")[0], range(100)))
        assert statuses == [200] * 100
    finally:
        pages.stop(wait_seconds=10)
