"""The metrics endpoint's HTTP server: one asyncio loop, bounded, with TLS and basic auth
from the web configuration (monitor/export/webconfig.py).

A thread per connection (http.server) let a few hundred slow clients hold a few hundred
threads, and a client that sent its headers a byte a second held one for as long as it
liked. Here a connection costs a coroutine, and:

- at most `max_connections` are open; a new one past the limit closes the connection
  that has waited longest for a request (idle between scrapes, sending its headers
  slowly, or in its TLS handshake), never one being answered. A scraper sends its request
  within milliseconds of connecting, so a crowd of slow clients cannot keep it out;
- a request's headers (and a TLS handshake) must arrive within `header_seconds` of its
  first byte (of the connection, for the first request), at most `head_bytes` of them;
  a kept-alive connection may idle `idle_seconds` between requests;
- a response must be taken within `write_seconds`; a client that goes away mid-response
  (Prometheus abandoning a scrape at its timeout) is counted, not logged.

Plain HTTP sent to a TLS endpoint gets a 400 saying so, as Go's servers answer. Each
outcome is counted in `counts` (exported as ragmon_http_*, monitor/export/pages.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final
from urllib.parse import parse_qs, urlsplit

from monitor.export.auth import BasicAuth, credentials
from monitor.export.webconfig import WebConfig, WebConfigFile

__all__ = ["CLOSE_REASONS", "PROBES", "Limits", "Request", "Response", "Server"]

PROBES: Final = frozenset({"/healthz", "/readyz"})
# Why the server closed a connection (ragmon_http_connections_closed_total{reason}).
CLOSE_REASONS: Final = ("limit", "header_timeout", "idle", "too_large", "bad_request",
                        "tls_handshake", "plain_http", "client_certificate", "abandoned")
log = logging.getLogger("ragmon.worker")

_TLS_HANDSHAKE: Final = 0x16  # the first byte of every TLS connection
_PLAIN_TO_TLS: Final = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n"
                        b"Connection: close\r\n\r\n"
                        b"Client sent an HTTP request to an HTTPS server.\n")


@dataclass(frozen=True)
class Limits:
    max_connections: int = 128
    header_seconds: float = 10.0
    idle_seconds: float = 120.0
    write_seconds: float = 60.0
    head_bytes: int = 16 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # names in lower case


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/plain; charset=utf-8"),)


def text(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode())


@dataclass(eq=False)  # by identity: a set member
class _Connection:
    since: float                      # when it began waiting (for a request, or at all)
    waiting: bool = True              # waiting for a request: may be closed for a newcomer
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Server:
    """Serve `route` on a bound, listening socket until the loop stops."""

    def __init__(self, sock: socket.socket, route: Callable[[Request], Awaitable[Response]],
                 web: WebConfigFile | None = None, limits: Limits | None = None) -> None:
        self.sock = sock
        self.route = route
        self.web = web
        self.limits = limits or Limits()
        self.counts: Counter[str] = Counter()  # "closed:<reason>", "requests:<path>:<code>"
        self.open: set[_Connection] = set()
        self.auth = BasicAuth()
        self._bcrypt = ThreadPoolExecutor(2, thread_name_prefix="ragmon-auth")
        self._checking: dict[bytes, asyncio.Future[bool]] = {}
        self._tokens = 0.0
        self._filled = time.monotonic()

    @property
    def config(self) -> WebConfig:
        return self.web.current() if self.web is not None else _PLAIN

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        while True:
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError:  # EMFILE and the like: let connections close, then go on
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            # Not set by asyncio for these sockets (their proto is 0, not IPPROTO_TCP):
            # without it a TLS response waited ~40 ms for the client's delayed ACK.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self.open) >= self.limits.max_connections and not self._make_room():
                self.counts["closed:limit"] += 1
                conn.close()
                continue
            entry = _Connection(since=loop.time())
            self.open.add(entry)
            entry.task = asyncio.create_task(self._connection(conn, entry))

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for a request; False if every
        open connection is being answered."""
        waiting = [c for c in self.open if c.waiting and c.task is not None]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.since)
        self.open.discard(oldest)
        assert oldest.task is not None
        oldest.task.cancel()
        self.counts["closed:limit"] += 1
        return True

    async def _connection(self, conn: socket.socket, entry: _Connection) -> None:
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            config = self.config
            deadline = loop.time() + self.limits.header_seconds
            if config.context is not None:
                try:
                    async with asyncio.timeout_at(deadline):
                        first = await _peek(conn)
                except TimeoutError:  # connected, and never a byte
                    self.counts["closed:header_timeout"] += 1
                    return
                if not first:
                    return
                if first[0] != _TLS_HANDSHAKE:
                    self.counts["closed:plain_http"] += 1
                    await _refuse(conn, _PLAIN_TO_TLS)
                    return
            try:
                reader, writer = await _streams(conn, config.context, self.limits,
                                                max(deadline - loop.time(), 0.1))
            except (OSError, ssl.SSLError, TimeoutError):
                self.counts["closed:tls_handshake"] += 1
                return
            if config.allowed_sans and not _san_allowed(writer, config.allowed_sans):
                self.counts["closed:client_certificate"] += 1
                return
            await self._requests(reader, writer, entry)
        except asyncio.CancelledError:
            pass  # closed for a newcomer (counted there), or the server stops
        except Exception:  # a bug here must not end the server, nor pass unseen
            log.exception("metrics endpoint: a connection failed")
        finally:
            self.open.discard(entry)
            if writer is not None:
                writer.transport.abort()
            conn.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        entry: _Connection) -> None:
        loop = asyncio.get_running_loop()
        first_request = True
        while True:
            entry.waiting, entry.since = True, loop.time()
            head = await self._head(reader, first_request)
            if head is None:
                return
            entry.waiting = False
            request = _parse(head)
            if request is None:
                self.counts["closed:bad_request"] += 1
                await self._send(writer, None, text(400, "bad request"), close=True)
                return
            close = _closes(request)
            response = await self._answer(request)
            if not await self._send(writer, request, response, close):
                return
            if close:
                return
            first_request = False

    async def _head(self, reader: asyncio.StreamReader, first_request: bool) -> bytes | None:
        """A request's head (line and headers), or None: the client closed, was too slow,
        or sent too much (counted)."""
        loop = asyncio.get_running_loop()
        limits = self.limits
        try:
            wait = limits.header_seconds if first_request else limits.idle_seconds
            async with asyncio.timeout(wait):
                first = await reader.readexactly(1)
        except TimeoutError:
            self.counts["closed:header_timeout" if first_request else "closed:idle"] += 1
            return None
        except ConnectionResetError:
            # A peer that closes with our response unread resets the connection (a
            # client that read it all closes with a FIN): a response the kernel had
            # taken whole, abandoned all the same.
            if not first_request:
                self.counts["closed:abandoned"] += 1
            return None
        except (asyncio.IncompleteReadError, OSError):
            return None
        try:
            async with asyncio.timeout_at(loop.time() + limits.header_seconds):
                return first + await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            self.counts["closed:header_timeout"] += 1
        except asyncio.LimitOverrunError:
            self.counts["closed:too_large"] += 1
        except (asyncio.IncompleteReadError, OSError):
            pass
        return None

    async def _answer(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"only GET and HEAD\n", (
                ("Content-Type", "text/plain; charset=utf-8"), ("Allow", "GET, HEAD")))
        config = self.config
        if not self._take_token(config):
            return text(429, "too many requests")
        if config.users and not (config.probes_without_auth and request.path in PROBES):
            given = credentials(request.headers.get("authorization"))
            if given is None or not await self._verify(config.users, *given):
                return Response(401, b"Unauthorized\n", (
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("WWW-Authenticate", 'Basic realm="ragmon"')))
        return await self.route(request)

    async def _verify(self, users: Mapping[str, bytes], user: str, password: bytes) -> bool:
        """Basic auth: cached, or one bcrypt off the loop, shared by every request that
        brings the same credentials meanwhile (20 scrapers starting at once pay one)."""
        if self.auth.cached(users, user, password):
            return True
        key = self.auth.key(users, user, password)
        checking = self._checking.get(key)
        if checking is None:
            checking = asyncio.get_running_loop().run_in_executor(
                self._bcrypt, self.auth.check, users, user, password)
            self._checking[key] = checking
            checking.add_done_callback(lambda _: self._checking.pop(key, None))
        return bool(await asyncio.shield(checking))

    def _take_token(self, config: WebConfig) -> bool:
        """The web config's rate limit: a token bucket over every request."""
        if not config.rate_interval:
            return True
        now = time.monotonic()
        self._tokens = min(float(config.rate_burst),
                           self._tokens + (now - self._filled) / config.rate_interval)
        self._filled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def _send(self, writer: asyncio.StreamWriter, request: Request | None,
                    response: Response, close: bool) -> bool:
        """Write `response`; False if the client went away or would not take it (counted)."""
        path = request.path if request is not None and request.path in (
            "/metrics", *PROBES) else "other"
        self.counts[f"requests:{path}:{response.status}"] += 1
        reason = HTTPStatus(response.status).phrase
        lines = [f"HTTP/1.1 {response.status} {reason}",
                 *(f"{k}: {v}" for k, v in (*response.headers, *self.config.headers)),
                 f"Content-Length: {len(response.body)}"]
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        with_body = request is None or request.method != "HEAD"
        writer.writelines([head, response.body] if with_body else [head])
        try:
            async with asyncio.timeout(self.limits.write_seconds):
                await writer.drain()
        except (OSError, TimeoutError):
            self.counts["closed:abandoned"] += 1
            return False
        return True


_PLAIN = WebConfig()


async def _peek(conn: socket.socket) -> bytes:
    """The connection's first byte, left in the socket (empty: it closed)."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""


async def _streams(conn: socket.socket, context: ssl.SSLContext | None, limits: Limits,
                   handshake_seconds: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Reader and writer of an accepted socket, after its TLS handshake if `context`."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limits.head_bytes, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    async with asyncio.timeout(handshake_seconds + 1.0):
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, conn, ssl=context,
            ssl_handshake_timeout=handshake_seconds if context else None)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _refuse(conn: socket.socket, answer: bytes) -> None:
    """Send `answer` and close gently: what the client sent is read (for a second at
    most) after our end is shut, or the close would reset the connection and lose the
    answer before the client reads it."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, TimeoutError):
        await loop.sock_sendall(conn, answer)
        conn.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(1.0):
            while await loop.sock_recv(conn, 65536):
                pass


def _san_allowed(writer: asyncio.StreamWriter, allowed: frozenset[str]) -> bool:
    """Whether the client certificate names one of `allowed` (DNS, IP, email or URI)."""
    cert = writer.get_extra_info("peercert") or {}
    return any(value in allowed for _, value in cert.get("subjectAltName", ()))


def _parse(head: bytes) -> Request | None:
    """A request line and headers (None: not HTTP/1.x, or a request with a body)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1]:
        return None
    method, target, version = parts
    headers = {"_version": version}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        return None  # nothing here takes a body; reading one would only hold the connection
    split = urlsplit(target)
    return Request(method, split.path, parse_qs(split.query), headers)


def _closes(request: Request) -> bool:
    """Whether the connection closes after this request (HTTP/1.0 unless keep-alive)."""
    connection = request.headers.get("connection", "").lower()
    if request.headers.get("_version") == "HTTP/1.0":
        return connection != "keep-alive"
    return connection == "close"
