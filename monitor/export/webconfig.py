"""The metrics endpoint's web configuration: TLS, client certificates and basic auth, in
the Prometheus exporter-toolkit's file format (`--web.config.file`), so that one file
and one habit serve every exporter an operator runs.

    tls_server_config:
      cert_file: server.crt          # or `cert:` / `key:` inline PEM
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: ca.crt         # or `client_ca:` inline
      client_allowed_sans: [prometheus.monitoring.svc]
      min_version: TLS12             # TLS10 .. TLS13; max_version too
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
      prefer_server_cipher_suites: true
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt: htpasswd -nBC 10 "" | tr -d ':\\n'
    rate_limit: {interval: 100ms, burst: 20}
    health_probes_without_auth: true  # ragmon's own key (below)

What differs from exporter-toolkit, each refused with one line rather than half-honoured:
`client_auth_type` RequestClientCert and RequireAnyClientCert (they accept any
certificate: use RequireAndVerifyClientCert or VerifyClientCertIfGiven) and
`curve_preferences` (Python's ssl module sets no curve list); `http2` is accepted and
ignored (scrapes are HTTP/1.1). `health_probes_without_auth` is ragmon's addition:
exporter-toolkit has no such switch; with it, `/healthz` and `/readyz` answer without
basic auth (a kubelet probe sends no password), with it off (the default) every path
asks for it. A client certificate is a TLS matter and cannot be waived per path: with
RequireAndVerifyClientCert probes must present one too (probe with `exec` or a
`tcpSocket`, or use VerifyClientCertIfGiven with basic auth).

Like exporter-toolkit, the file is looked at again on every connection (a stat; it is
read again only when it or a certificate it names changed), so rotated certificates and
changed users apply at once; a change that does not load keeps the last good
configuration and is logged once.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from monitor.settings_files import yaml_problem

__all__ = ["WebConfig", "WebConfigError", "WebConfigFile", "load"]

log = logging.getLogger("ragmon.worker")

_CLIENT_AUTH: Final = {"NoClientCert": ssl.CERT_NONE,
                       "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                       "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_VERSIONS: Final = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Go's names of the TLS 1.2 suites (crypto/tls.CipherSuites) as OpenSSL names them.
_CIPHERS: Final = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
}
_TLS_KEYS: Final = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
                    "client_ca_file", "client_allowed_sans", "min_version", "max_version",
                    "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"}
_HEADERS: Final = {"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options",
                   "X-XSS-Protection", "Strict-Transport-Security"}
_TOP_KEYS: Final = {"tls_server_config", "http_server_config", "basic_auth_users",
                    "rate_limit", "health_probes_without_auth"}
_BCRYPT: Final = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


class WebConfigError(ValueError):
    """A web configuration that cannot be used; the message is one line naming the file
    and what is wrong (never a password hash or a key)."""


@dataclass(frozen=True)
class WebConfig:
    """One loaded web configuration (the default, `WebConfig()`, is plain HTTP, no auth)."""

    context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    allowed_sans: frozenset[str] = frozenset()
    headers: tuple[tuple[str, str], ...] = ()
    probes_without_auth: bool = False
    rate_interval: float = 0.0  # seconds per token of the request bucket; 0: no limit
    rate_burst: int = 0
    files: tuple[Path, ...] = ()  # the certificate files it was loaded from


def load(path: str | Path) -> WebConfig:
    """Read and check a web configuration file; WebConfigError says what is wrong."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WebConfigError(f"web config {str(path)!r}: cannot read it: "
                             f"{exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {str(path)!r}: not YAML: "
                             f"{yaml_problem(exc)}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"web config {str(path)!r}: not UTF-8 text") from None
    try:
        return _config(data or {}, path.parent)
    except WebConfigError as exc:
        raise WebConfigError(f"web config {str(path)!r}: {exc}") from None


def _config(data: Any, base: Path) -> WebConfig:
    _mapping(data, "the file", _TOP_KEYS)
    tls = data.get("tls_server_config") or {}
    _mapping(tls, "tls_server_config", _TLS_KEYS)
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError("basic_auth_users must map user names to bcrypt hashes")
    hashes = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash "
                                 "(htpasswd -nBC 10 \"\" | tr -d ':\\n' makes one)")
        if ":" in str(user):
            raise WebConfigError(f"basic_auth_users: a user name cannot hold ':' ({user!r})")
        hashes[str(user)] = hashed.encode()
    http = data.get("http_server_config") or {}
    _mapping(http, "http_server_config", {"http2", "headers"})
    headers = http.get("headers") or {}
    _mapping(headers, "http_server_config.headers", _HEADERS)
    probes = data.get("health_probes_without_auth", False)
    if not isinstance(probes, bool):
        raise WebConfigError("health_probes_without_auth must be true or false")
    interval, burst = _rate_limit(data.get("rate_limit") or {})
    sans = tls.get("client_allowed_sans") or []
    if sans and tls.get("client_auth_type") != "RequireAndVerifyClientCert":
        raise WebConfigError("client_allowed_sans needs client_auth_type "
                             "RequireAndVerifyClientCert")
    return WebConfig(context=_context(tls, base) if tls else None, users=hashes,
                     allowed_sans=frozenset(map(str, sans)),
                     headers=tuple((k, str(v)) for k, v in headers.items() if v),
                     probes_without_auth=probes, rate_interval=interval, rate_burst=burst,
                     files=tuple(base / str(tls[k]) for k in ("cert_file", "key_file",
                                                             "client_ca_file") if tls.get(k)))


def _mapping(value: Any, where: str, keys: set[str]) -> None:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where} must be a mapping")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise WebConfigError(f"{where}: unknown field {unknown[0]!r} "
                             f"(known: {', '.join(sorted(keys))})")


def _rate_limit(limit: Any) -> tuple[float, int]:
    _mapping(limit, "rate_limit", {"interval", "burst"})
    if not limit:
        return 0.0, 0
    match = _DURATION.fullmatch(str(limit.get("interval", "0s")).strip())
    burst = limit.get("burst", 0)
    if match is None or not isinstance(burst, int) or burst < 0:
        raise WebConfigError("rate_limit needs interval (a duration: 100ms, 1s) and burst "
                             "(a whole number)")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2)]
    interval = float(match.group(1)) * scale
    return (interval, max(burst, 1)) if interval > 0 else (0.0, 0)


def _context(tls: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    """The server's TLS context from tls_server_config (paths relative to the file's folder)."""
    if tls.get("curve_preferences"):
        raise WebConfigError("tls_server_config.curve_preferences is not supported by "
                             "ragmon (Python's ssl module); leave it out")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        insecure = auth in ("RequestClientCert", "RequireAnyClientCert")
        raise WebConfigError(
            f"client_auth_type {auth!r} " + ("accepts any certificate and is not supported"
                                             if insecure else "is unknown") +
            f": use one of {', '.join(_CLIENT_AUTH)}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(tls, "min_version", "TLS12")
    context.maximum_version = _version(tls, "max_version", "TLS13")
    cert = _pem(tls, "cert", "cert_file", base, required=True)
    key = _pem(tls, "key", "key_file", base, required=True)
    try:
        with _as_file(cert) as cert_path, _as_file(key) as key_path:
            context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"tls_server_config: the certificate and key do not load: "
                             f"{_reason(exc)}") from None
    context.verify_mode = _CLIENT_AUTH[auth]
    if auth != "NoClientCert":
        ca = _pem(tls, "client_ca", "client_ca_file", base, required=True)
        try:
            context.load_verify_locations(cadata=ca.decode())
        except (ssl.SSLError, ValueError) as exc:
            raise WebConfigError(f"tls_server_config: client CA does not load: "
                                 f"{_reason(exc)}") from None
    suites = tls.get("cipher_suites") or []
    if suites:
        unknown = [s for s in suites if s not in _CIPHERS]
        if unknown:
            raise WebConfigError(f"cipher_suites: {unknown[0]!r} is not one ragmon knows "
                                 f"(known: {', '.join(_CIPHERS)})")
        context.set_ciphers(":".join(_CIPHERS[s] for s in suites))
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


def _version(tls: Mapping[str, Any], name: str, default: str) -> ssl.TLSVersion:
    value = tls.get(name, default)
    if value not in _VERSIONS:
        raise WebConfigError(f"{name} {value!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[value]


def _pem(tls: Mapping[str, Any], inline: str, file: str, base: Path,
         required: bool) -> bytes:
    """A PEM value of tls_server_config, inline or from its file (exactly one of them)."""
    if tls.get(inline) and tls.get(file):
        raise WebConfigError(f"tls_server_config: set {inline} or {file}, not both")
    if tls.get(inline):
        return str(tls[inline]).encode()
    if not tls.get(file):
        if required:
            raise WebConfigError(f"tls_server_config needs {file} (or {inline})")
        return b""
    path = base / str(tls[file])
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WebConfigError(f"tls_server_config.{file} {str(path)!r}: cannot read it: "
                             f"{exc.strerror}") from None


class _as_file:
    """PEM bytes as a path OpenSSL can open, kept in memory (memfd): a read-only root
    filesystem needs no temporary file."""

    def __init__(self, data: bytes) -> None:
        self.fd = os.memfd_create("ragmon-pem", os.MFD_CLOEXEC)
        os.write(self.fd, data)

    def __enter__(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    return " ".join((getattr(exc, "strerror", None) or str(exc)).split())


class WebConfigFile:
    """A web configuration file kept current: `current()` looks at the file (and the
    certificates the current configuration names) at most once a second and reloads
    when one changed; a change that does not load leaves the last good configuration in
    place (logged once)."""

    RECHECK_SECONDS: Final = 1.0

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.config = load(self.path)  # WebConfigError at start: refuse to start
        self._seen = self._fingerprint()
        self._checked = time.monotonic()

    def current(self) -> WebConfig:
        now = time.monotonic()
        if now - self._checked < self.RECHECK_SECONDS:
            return self.config
        with self._lock:
            if now - self._checked < self.RECHECK_SECONDS:
                return self.config
            self._checked = now
            seen = self._fingerprint()
            if seen == self._seen:
                return self.config
            self._seen = seen
            try:
                self.config = load(self.path)
                log.info("web config %s reloaded", self.path)
            except WebConfigError as exc:
                log.error("%s; keeping the previous web configuration", exc)
            return self.config

    def _fingerprint(self) -> tuple[tuple[str, int, int, int] | str, ...]:
        """What changes when the file or a file it names changes (stat, not content):
        a new certificate path changes the file itself."""
        marks: list[tuple[str, int, int, int] | str] = []
        for part in (self.path, *self.config.files):
            try:
                st = part.stat()
                marks.append((str(part), st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                marks.append(f"{part}: missing")
        return tuple(marks)
