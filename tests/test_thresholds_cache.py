"""Calibrations are kept between processes (monitor/detect/thresholds.py): read back as
written, recomputed when the file is unreadable, keyed so that another key misses."""

from __future__ import annotations

import numpy as np

from monitor.detect import thresholds
from monitor.detect.detectors import GaussMean

KEY = (GaussMean(0.0, 1.0, 1, 5.0), 1.0)


def test_a_calibration_is_read_back_and_rewritten_when_unreadable(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGMON_CALIBRATION_CACHE", str(tmp_path))
    curve = thresholds._curve.__wrapped__(*KEY)
    path = thresholds._cache_path(*KEY)
    assert path is not None and path.parent == tmp_path and path.exists()
    # What is in the file is what a later process gets, without simulating.
    np.savez(path, hs=np.array([1.0, 2.0]), log_arls=np.array([3.0, 4.0]))
    hs, log_arls = thresholds._curve.__wrapped__(*KEY)
    assert hs.tolist() == [1.0, 2.0] and log_arls.tolist() == [3.0, 4.0]
    # A torn or foreign file: simulated again (deterministic, seed 0) and written whole.
    path.write_bytes(b"not an npz")
    again = thresholds._curve.__wrapped__(*KEY)
    assert np.array_equal(again[0], curve[0]) and np.array_equal(again[1], curve[1])
    with np.load(path) as saved:
        assert np.array_equal(saved["hs"], curve[0])


def test_keys_differ_and_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGMON_CALIBRATION_CACHE", str(tmp_path))
    other = (GaussMean(0.0, 1.0, 1, 10.0), 1.0)
    assert thresholds._cache_path(*KEY) != thresholds._cache_path(*other)
    monkeypatch.setenv("RAGMON_CALIBRATION_CACHE", "off")
    assert thresholds._cache_path(*KEY) is None
