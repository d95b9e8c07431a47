"""Drift detection in the streaming worker, on the real embedded broker, and the
`ragmon reference` commands against the same broker."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import urllib.request

import pytest
from workers import scrape, start_worker, stop, wait_for

from monitor.cli import main
from monitor.client import produce
from monitor.simulate import Simulator

pytestmark = pytest.mark.integration

RELEASE = "2026.11.3"
TOTAL = (("dimension", "all"), ("direction", "up"), ("release", RELEASE),
         ("signal", "critical_claim_unsupported_rate"), ("value", "all"))


def test_worker_alarms_on_index_change_and_obeys_reference_commands(broker, tmp_path,
                                                                      capsys, monkeypatch):
    for name, value in broker.env().items():  # the in-process `ragmon reference` commands
        monkeypatch.setenv(name, value)
    # Two slice dimensions keep the number of streams (and threshold simulations) small.
    process, port = start_worker(broker, tmp_path,
                                 env={"RAGMON_ALLOWED_LATENESS_SECONDS": "30",
                                      "RAGMON_SLICE_DIMENSIONS": "language,risk"})
    try:
        settings = broker.settings()
        sim = Simulator(seed=5, scenario="index_change", change_at=12_000)
        produce(settings, settings.topic_decisions, list(sim.traces(12_000)))
        # The reference freezes from the first windows; thresholds are simulated in the
        # background meanwhile (insufficient data, threshold +Inf).
        wait_for(lambda: math.isfinite(scrape(port).get(("ragmon_drift_threshold", TOTAL),
                                                        math.inf)),
                 timeout=240, what="calibrated thresholds")
        steady = scrape(port)
        assert steady[("ragmon_recalibration_required", (("release", RELEASE),))] == 0.0
        assert not any(v for (name, _), v in steady.items() if name == "ragmon_drift_alarm")
        produce(settings, settings.topic_decisions, list(sim.traces(12_000)))
        wait_for(lambda: scrape(port).get(("ragmon_drift_alarm", TOTAL)) == 1.0,
                 timeout=180, what="critical_claim_unsupported alarm")
        if shutil.which("promtool"):  # the live exposition, drift state and all, is clean
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read()
            checked = subprocess.run(["promtool", "check", "metrics"], input=text,
                                     capture_output=True, check=False)
            assert checked.returncode == 0, checked.stdout + checked.stderr

        capsys.readouterr()
        assert main(["reference", "list", "--json", "--bootstrap", broker.bootstrap]) == 0
        listed = {r["release"]: r for r in json.loads(capsys.readouterr().out)}
        assert set(listed) == {"2026.11.3", "2026.12.1"}
        assert listed[RELEASE]["traces"] >= settings.reference_traces
        out = tmp_path / "ref.bin"
        assert main(["reference", "export", "--release", RELEASE, "--out", str(out),
                     "--bootstrap", broker.bootstrap]) == 0
        assert main(["reference", "import", str(out), "--bootstrap", broker.bootstrap]) == 0
        # On demand: drop the reference; the release needs recalibration until new
        # traffic freezes a new one.
        assert main(["reference", "freeze", "--release", RELEASE,
                     "--bootstrap", broker.bootstrap]) == 0
        key = ("ragmon_recalibration_required", (("release", RELEASE),))
        wait_for(lambda: scrape(port).get(key) == 1.0, timeout=60, what="re-freeze request")
        assert main(["reference", "export", "--release", "nope", "--out", str(out),
                     "--bootstrap", broker.bootstrap]) == 2
    finally:
        stop(process)
