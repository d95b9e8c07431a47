"""The two brokers the integration tests run on: the embedded Tansu and Apache Kafka 3.8.

`ApacheKafka` starts `../shared/kafka/bin/kafka-server` (a single-node KRaft broker, its
defaults untouched but for what a test passes) and, with `secure=True`, adds a SASL_SSL
listener: a CA and a server certificate made here with openssl, SCRAM-SHA-256 users made
by the broker's own storage tool. Both classes share one surface: `bootstrap`, `start()`,
`stop()`, `restart(keep_log)`, and `settings()` / `env()`, the settings a client or a
worker on that broker needs (Tansu admits a group member only after about half the
session timeout, so its workers ask for a short one; Apache Kafka refuses sessions under
6 s, so its workers use ragmon's defaults).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from monitor.broker import EmbeddedBroker

__all__ = ["KAFKA_HOME", "KAFKA_MISSING", "ApacheKafka", "Embedded", "free_ports",
           "kafka_available", "kafka_required"]

# The Apache Kafka the tests run: KAFKA_HOME names it (a folder with `bin/kafka-server`,
# the single-node launcher of ../shared/kafka, and Kafka 3.x's jars in `libs/`: the
# launcher copied into any Kafka 3.x distribution's bin/ works); without it, the
# ../shared/kafka beside this checkout if there is one.
KAFKA_HOME = Path(os.environ.get("KAFKA_HOME") or
                  Path(__file__).resolve().parents[2] / "shared" / "kafka")
KAFKA_MISSING = ("the Apache Kafka tests need KAFKA_HOME naming a Kafka 3.x install with "
                 "bin/kafka-server (../shared/kafka has one; copy its bin/kafka-server into "
                 "a Kafka distribution for another) and Java 17 (apt-get install "
                 "openjdk-17-jre-headless)")
USER, PASSWORD = "ragmon", "ragmon-secret-0017"


def kafka_available() -> bool:
    return (KAFKA_HOME / "bin" / "kafka-server").is_file() and shutil.which("java") is not None


def kafka_required() -> bool:
    """CI sets KAFKA_TESTS_REQUIRED=1: there a missing Kafka fails instead of skipping.
    (Not a RAGMON_* name: ragmon warns about those it does not know, on every command.)"""
    return os.environ.get("KAFKA_TESTS_REQUIRED") == "1"


def free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = int(sock.getsockname()[1])
        if first + count > 65_000:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {count} consecutive free ports")


class PortTaken(RuntimeError):
    """A start that failed for a reason another attempt avoids (a port taken meanwhile,
    an unlucky cluster id)."""


class Embedded(EmbeddedBroker):
    """Tansu, as the demo runs it."""

    name = "embedded"

    def restart(self, keep_log: bool = False) -> None:
        if keep_log:
            raise NotImplementedError("the embedded broker keeps its log in memory only")
        self.stop()
        self.start()


class ApacheKafka:
    """Apache Kafka from ../shared/kafka on 127.0.0.1 (controller on port + 1; with
    `secure`, a SASL_SSL listener on port + 2)."""

    name = "kafka"
    SETTINGS: ClassVar[dict[str, Any]] = {}  # ragmon's defaults are meant for this broker
    # The same surface as the embedded broker, where it does not depend on the broker.
    settings = EmbeddedBroker.settings
    env = EmbeddedBroker.env
    stop = EmbeddedBroker.stop  # SIGTERM (a clean stop in ~3 s), SIGKILL after 5 s

    def __init__(self, workdir: Path, *, secure: bool = False,
                 properties: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.data = workdir / "kafka"
        self.port = free_ports(3)
        self.secure = secure
        self.properties = properties or {}
        self.process: subprocess.Popen[bytes] | None = None
        if secure:
            self.ca_file, self.other_ca_file = self._certificates()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_bootstrap(self) -> str:
        return f"127.0.0.1:{self.port + 2}"

    def secure_env(self, password: str = PASSWORD, ca_file: Path | None = None) -> dict[str, str]:
        """The settings of a client on the SASL_SSL listener."""
        return {"RAGMON_BOOTSTRAP_SERVERS": self.secure_bootstrap,
                "RAGMON_SECURITY_PROTOCOL": "SASL_SSL", "RAGMON_SASL_MECHANISM": "SCRAM-SHA-256",
                "RAGMON_SASL_USERNAME": USER, "RAGMON_SASL_PASSWORD": password,
                "RAGMON_SSL_CAFILE": str(ca_file or self.ca_file)}

    def _arguments(self) -> list[str]:
        props = dict(self.properties)
        if self.secure:
            p = self.port
            props.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{p + 1},"
                             f"SASL_SSL://127.0.0.1:{p + 2}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p},SASL_SSL://127.0.0.1:{p + 2}",
                "listener.security.protocol.map":
                    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.workdir / "tls" / "server.pem"),
            })
        return [f"{key}={value}" for key, value in props.items()]

    def start(self, timeout_seconds: float = 90.0, keep_log: bool = False,
              same_port: bool = False) -> ApacheKafka:
        for attempt in range(3):
            try:
                return self._start(timeout_seconds, keep_log)
            except PortTaken:
                if keep_log or attempt == 2:
                    raise
                if same_port:  # a restart: wait for the port rather than move
                    time.sleep(2.0)
                else:  # another job took a port between probe and bind
                    self.port = free_ports(3)
        raise AssertionError("unreachable")

    def _start(self, timeout_seconds: float, keep_log: bool) -> ApacheKafka:
        env = {**os.environ, "KAFKA_HEAP": os.environ.get("KAFKA_HEAP", "384m")}
        if keep_log:
            env["KAFKA_KEEP"] = "1"
        if self.secure:
            env["KAFKA_FORMAT_ARGS"] = (f"--add-scram SCRAM-SHA-256=[name={USER},"
                                        f"password={PASSWORD}]")
        log = self.data / "server.log"
        if keep_log and log.exists():
            log.rename(self.data / f"server-{time.time():.0f}.log")
        elif log.exists():  # kafka-server deletes it, but not before the first look below:
            log.unlink()    # a restart returned at once on the last start's "started" line
        self.process = subprocess.Popen(
            [str(KAFKA_HOME / "bin" / "kafka-server"), str(self.data), str(self.port),
             *self._arguments()],
            env=env, stdout=open(self.workdir / "kafka.out", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if log.exists() and b"Address already in use" in log.read_bytes():
                    raise PortTaken(self.port)
                # kafka-server draws a random base64url cluster id; one starting with "-"
                # (1 in 64) is read by the storage tool as an option: draw again.
                out = self.workdir / "kafka.out"
                if out.exists() and b"--cluster-id/-t: expected one argument" in out.read_bytes():
                    out.write_bytes(b"")
                    raise PortTaken(self.port)
                raise RuntimeError(f"kafka-server exited with {self.process.returncode}; "
                                   f"see {self.workdir / 'kafka.out'}")
            if log.exists() and b"Kafka Server started" in log.read_bytes():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Apache Kafka not started within {timeout_seconds} s")

    def restart(self, keep_log: bool = False) -> None:
        """Stop and start on the same port; without `keep_log` the log is formatted away
        (a broker that lost its disk)."""
        self.stop()
        self.start(keep_log=keep_log, same_port=True)  # its clients know only this port

    def _certificates(self) -> tuple[Path, Path]:
        """A CA, a server certificate it signed for 127.0.0.1 (key and chain in one PEM
        file, as the broker's PEM keystore reads them), and a second, unrelated CA."""
        tls = self.workdir / "tls"
        tls.mkdir(parents=True, exist_ok=True)

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=tls, check=True, capture_output=True)

        for ca in ("ca", "other-ca"):
            openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN=ragmon test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                "-keyout", "server.key", "-out", "server.csr")
        (tls / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server.p8")
        (tls / "server.pem").write_bytes((tls / "server.p8").read_bytes()
                                         + (tls / "server.crt").read_bytes()
                                         + (tls / "ca.pem").read_bytes())
        return tls / "ca.pem", tls / "other-ca.pem"

    def __enter__(self) -> ApacheKafka:
        return self.start()

    __exit__ = EmbeddedBroker.__exit__
