"""Self-tracing: off by default; with OTEL_TRACES_EXPORTER=otlp the worker sends its batch
spans to an OTLP/HTTP endpoint (a receiver in this test)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
from opentelemetry import trace
from workers import start_worker, stop, wait_for

from monitor.broker import free_port
from monitor.client import produce
from monitor.settings import load
from monitor.simulate import Simulator
from monitor.worker import telemetry


def test_tracing_is_off_by_default():
    assert isinstance(telemetry.tracer(load()), trace.NoOpTracer)


class _Receiver(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        type(self).bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration
def test_worker_exports_batch_spans_over_otlp(broker, tmp_path):
    receiver = HTTPServer(("127.0.0.1", free_port()), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    _Receiver.bodies = []
    process, _ = start_worker(broker, tmp_path, env={
        "OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
            f"http://127.0.0.1:{receiver.server_port}/v1/traces"})
    try:
        settings = broker.settings()
        produce(settings, settings.topic_decisions, list(Simulator(seed=1).traces(500)))
        for name in (b"ragmon.batch", b"ragmon.fold", b"ragmon.detect", b"ragmon.export"):
            wait_for(lambda name=name: any(name in body for body in _Receiver.bodies),
                     timeout=60, what=f"span {name.decode()} at the OTLP receiver")
        assert any(b"ragmon-worker" in body for body in _Receiver.bodies)  # service.name
    finally:
        stop(process)
        receiver.shutdown()
