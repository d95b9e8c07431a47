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


def test_the_shipped_calibrations_are_this_sources():
    """Calibrations shipped with the package (monitor/detect/calibrations) are read when
    the cache misses; after a change to thresholds.py or detectors.py they no longer
    match any key. Re-ship: `RAGMON_CALIBRATION_CACHE=/tmp/c python -m pytest -m "not
    integration"`, then `python -m monitor.detect.thresholds /tmp/c`."""
    shipped = sorted(thresholds.SHIPPED.glob("*.npz"))
    assert shipped, "no calibrations shipped"
    stale = [p.name for p in shipped if not thresholds._made_here(p)]
    assert not stale, f"{len(stale)} shipped calibrations are from another source: re-ship"


def test_a_shipped_calibration_is_read_when_the_cache_misses(tmp_path, monkeypatch):
    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    monkeypatch.setenv("RAGMON_CALIBRATION_CACHE", str(cache))
    monkeypatch.setattr(thresholds, "SHIPPED", shipped)
    path = thresholds._cache_path(*KEY)
    assert path is not None
    shipped.mkdir()
    np.savez(shipped / path.name, hs=np.array([1.0]), log_arls=np.array([2.0]),
             sources=thresholds._SOURCES_DIGEST)
    hs, log_arls = thresholds._curve.__wrapped__(*KEY)
    assert (hs.tolist(), log_arls.tolist()) == ([1.0], [2.0])  # not simulated
    with np.load(path) as saved:  # and copied into the cache
        assert saved["hs"].tolist() == [1.0]


def test_ship_copies_this_sources_calibrations_and_drops_stale_ones(tmp_path, monkeypatch):
    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    monkeypatch.setattr(thresholds, "SHIPPED", shipped)
    cache.mkdir()
    shipped.mkdir()
    np.savez(cache / "a.npz", hs=[1.0], log_arls=[1.0], sources=thresholds._SOURCES_DIGEST)
    np.savez(cache / "b.npz", hs=[1.0], log_arls=[1.0], sources="another source")
    np.savez(cache / "c.npz", hs=[1.0], log_arls=[1.0])  # from before sources were saved
    np.savez(shipped / "old.npz", hs=[1.0], log_arls=[1.0], sources="another source")
    assert thresholds.ship(cache) == (1, 1)
    assert sorted(p.name for p in shipped.iterdir()) == ["a.npz"]
