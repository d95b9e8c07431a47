"""A real Prometheus scraping real workers the way a security review asks for: over TLS
with basic auth, and with a client certificate (mutual TLS). The wrong password, no
certificate and plain HTTP each leave their target down with the reason in Prometheus.
No secret appears in any output."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from brokers import Embedded
from tls import hashed, make_pki
from workers import stop, wait_for

from monitor.broker import free_port

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="Debian prometheus is needed")]

PASSWORD = "prom-scrape-secret-7305"


def _api(port: int, path: str, **query: str) -> object:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())["data"]


def _query(port: int, expr: str) -> list[dict]:
    data = _api(port, "query", query=expr)
    assert isinstance(data, dict)
    return list(data["result"])


def _targets(port: int) -> dict[str, dict]:
    data = _api(port, "targets")
    assert isinstance(data, dict)
    return {t["labels"]["job"]: t for t in data["activeTargets"]}


def test_prometheus_scrapes_over_tls_with_basic_auth_and_with_client_certificates(tmp_path):
    pki = make_pki(tmp_path / "pki")
    (tmp_path / "auth.yml").write_text(
        f"tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n"
        f"basic_auth_users:\n  prometheus: '{hashed(PASSWORD)}'\n"
        "health_probes_without_auth: true\n")
    (tmp_path / "mtls.yml").write_text(
        "tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: pki/ca.pem\n"
        "  client_allowed_sans: [prometheus]\n")
    (tmp_path / "password").write_text(PASSWORD + "\n")
    (tmp_path / "wrong").write_text("not-" + PASSWORD + "\n")
    with Embedded(log=tmp_path / "broker.log") as broker:
        auth, auth_port = _worker(broker, tmp_path, "auth")
        mtls, mtls_port = _worker(broker, tmp_path, "mtls")
        prom_port = free_port()
        tls = {"ca_file": str(pki / "ca.pem")}
        jobs = {
            "basic_auth": (auth_port, {"scheme": "https", "tls_config": tls, "basic_auth": {
                "username": "prometheus", "password_file": str(tmp_path / "password")}}),
            "wrong_password": (auth_port, {"scheme": "https", "tls_config": tls, "basic_auth": {
                "username": "prometheus", "password_file": str(tmp_path / "wrong")}}),
            "plain_http": (auth_port, {"scheme": "http"}),
            "client_certificate": (mtls_port, {"scheme": "https", "tls_config": {
                **tls, "cert_file": str(pki / "client-prometheus.crt"),
                "key_file": str(pki / "client-prometheus.key")}}),
            "no_certificate": (mtls_port, {"scheme": "https", "tls_config": tls}),
        }
        (tmp_path / "prom.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": name, "static_configs": [
                {"targets": [f"127.0.0.1:{port}"]}], **how}
                for name, (port, how) in jobs.items()]}))
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prom.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=open(tmp_path / "prom.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        try:
            def scraped() -> dict[str, dict] | None:
                found = _targets(prom_port)
                done = len(found) == len(jobs) and all(
                    t["lastScrape"] != "0001-01-01T00:00:00Z" and (
                        t["health"] == "up" or t["lastError"]) for t in found.values())
                return found if done else None
            found = wait_for(scraped, timeout=90, what="every job scraped once")
            health = {job: t["health"] for job, t in found.items()}
            assert health == {"basic_auth": "up", "client_certificate": "up",
                              "wrong_password": "down", "plain_http": "down",
                              "no_certificate": "down"}, {j: t["lastError"]
                                                          for j, t in found.items()}
            assert "401" in found["wrong_password"]["lastError"]
            assert "400" in found["plain_http"]["lastError"]
            # What came through is ragmon's page, seen by Prometheus itself.
            result = wait_for(lambda: _query(prom_port, (
                'ragmon_http_requests_total{job="basic_auth",path="/metrics",code="401"}')),
                timeout=30, what="the worker's count of refused scrapes, in Prometheus")
            assert float(result[0]["value"][1]) >= 1
            assert _query(prom_port, 'up{job="client_certificate"}')[0]["value"][1] == "1"
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=20)
            stop(auth)
            stop(mtls)
    outputs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    assert PASSWORD not in outputs


def _worker(broker: Embedded, tmp_path: Path, name: str):  # type: ignore[no-untyped-def]
    """A worker with the web config `<name>.yml`, once it listens."""
    port = free_port()
    env = {"RAGMON_WEB_CONFIG_FILE": str(tmp_path / f"{name}.yml"),
           "RAGMON_METRICS_PORT": str(port), "RAGMON_APP_ID": f"ragmon-{name}"}
    process = _spawn(broker, tmp_path, name, env)
    wait_for(lambda: _listening(port), what=f"{name} listening")
    return process, port


def _spawn(broker: Embedded, tmp_path: Path, name: str,
           env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker"],
                            env={**os.environ, **broker.env(), **env}, cwd=tmp_path,
                            stdout=open(tmp_path / f"{name}.log", "wb"),
                            stderr=subprocess.STDOUT)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0

