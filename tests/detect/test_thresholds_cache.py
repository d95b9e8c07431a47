"""Calibrations are kept between processes (monitor/detect/thresholds.py): read back as
written, recomputed when the file is unreadable, keyed so that another key misses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.detect import ship, thresholds
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


def test_the_shipped_calibrations_are_this_versions():
    """Calibrations shipped with the package (monitor/detect/calibrations) are read when
    the cache misses; each says its version and key. After a bump of
    CALIBRATION_VERSION they no longer match: `python -m monitor.detect.ship ship`."""
    shipped = sorted(thresholds.SHIPPED.glob("*.npz"))
    assert shipped, "no calibrations shipped"
    stale = [p.name for p in shipped if not ship.made_here(p)]
    assert not stale, f"{len(stale)} shipped calibrations are from another version: re-ship"


def _sample() -> list:
    """A fixed sample of shipped keys, one of each kind of null model, the cheapest of
    each kind (by window size) so that re-simulating them takes seconds."""
    found: dict[str, tuple] = {}
    for path in sorted(thresholds.SHIPPED.glob("*.npz")):
        key = thresholds.saved(path)[1]
        assert key is not None, path.name
        kind = type(key[0]).__name__ + ("-shape" if getattr(key[0], "atoms", None) else "")
        if kind not in found or key[1] < found[kind][1][1]:
            found[kind] = (path, key)
    return [found[kind] for kind in sorted(found)]


SAMPLE = _sample()


def test_the_sample_holds_every_kind():
    assert len(SAMPLE) >= 4, [p.name for p, _ in SAMPLE]


@pytest.mark.parametrize("path,key", SAMPLE, ids=[p.name[:12] for p, _ in SAMPLE])
def test_shipped_curves_are_what_this_version_simulates(path, key):
    """The simulation's output may only change with CALIBRATION_VERSION: a change to a
    detector, a null model or the simulation that moves a curve, without a bump, would
    leave every cache and the shipped set holding thresholds for another statistic."""
    model, window_n = key
    hs, log_arls = thresholds._simulate(model, window_n)
    with np.load(path) as saved:
        same = (saved["hs"].shape == hs.shape and np.allclose(saved["hs"], hs)
                and np.allclose(saved["log_arls"], log_arls))
    assert same, (f"{type(model).__name__} key {path.name}: the simulation's output "
                  "changed; bump thresholds.CALIBRATION_VERSION and run "
                  "`python -m monitor.detect.ship ship`")


def test_a_shipped_calibration_is_read_when_the_cache_misses(tmp_path, monkeypatch):
    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    monkeypatch.setenv("RAGMON_CALIBRATION_CACHE", str(cache))
    monkeypatch.setattr(thresholds, "SHIPPED", shipped)
    path = thresholds._cache_path(*KEY)
    assert path is not None
    shipped.mkdir()
    thresholds._save(shipped / path.name, (np.array([1.0]), np.array([2.0])), KEY)
    hs, log_arls = thresholds._curve.__wrapped__(*KEY)
    assert (hs.tolist(), log_arls.tolist()) == ([1.0], [2.0])  # not simulated
    with np.load(path) as saved:  # and copied into the cache
        assert saved["hs"].tolist() == [1.0]


def test_ship_copies_this_versions_calibrations_and_drops_stale_ones(tmp_path, monkeypatch):
    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    monkeypatch.setattr(thresholds, "SHIPPED", shipped)
    cache.mkdir()
    shipped.mkdir()
    other = (GaussMean(0.0, 1.0, 1, 10.0), 1.0)
    curve = (np.array([1.0]), np.array([1.0]))
    thresholds._save(cache / thresholds.key_name(*KEY), curve, KEY)
    thresholds._save(cache / "renamed.npz", curve, other)  # its name is not its key's
    np.savez(cache / "c.npz", hs=[1.0], log_arls=[1.0])  # from before versions were saved
    current = thresholds.CALIBRATION_VERSION
    monkeypatch.setattr(thresholds, "CALIBRATION_VERSION", current - 1)
    thresholds._save(shipped / thresholds.key_name(*other), curve, other)  # older version
    monkeypatch.setattr(thresholds, "CALIBRATION_VERSION", current)
    assert ship.copy(cache) == (1, 1)
    assert sorted(p.name for p in shipped.iterdir()) == [thresholds.key_name(*KEY)]


def test_a_comment_leaves_the_keys_alone():
    """Keys name the version and the key only: not the source text (a docstring fixed
    in thresholds.py once invalidated all 717 shipped calibrations)."""
    name = thresholds.key_name(*KEY)
    assert name == thresholds.key_name(GaussMean(0.0, 1.0, 1, 5.0), 1.0)
    source = Path(thresholds.__file__).read_text()
    assert "_SOURCES" not in source and "read_bytes" not in source
