"""The de-duplication horizon (`Seen`) on its own: first sightings, the two bounds."""

from __future__ import annotations

from monitor.aggregate.dedupe import Seen


def test_a_trace_id_is_first_once_and_keeps_its_ref():
    seen: Seen[str] = Seen(horizon_seconds=100, max_entries=10)
    assert seen.first("a", 1.0, "ref-a")
    assert not seen.first("a", 2.0, "other")
    assert seen.get("a") == "ref-a" and seen.get("b") is None and len(seen) == 1


def test_entries_behind_the_horizon_expire_and_may_be_seen_again():
    seen: Seen[int] = Seen(horizon_seconds=100, max_entries=10)
    for i, ts in enumerate((10.0, 50.0, 120.0)):
        seen.first(f"t{i}", ts, i)
    assert seen.expire(watermark=149.0) == 1  # cutoff 49: only t0 (ts 10) is behind it
    assert seen.get("t0") is None and seen.get("t1") == 1
    assert seen.first("t0", 150.0, 9)  # outside the horizon a copy counts again
    assert seen.expire(watermark=1000.0) == 3 and len(seen) == 0


def test_expiry_follows_arrival_order():
    """Entries leave in arrival order: an old trace that arrived after a newer one waits
    behind it (kept a little longer, never dropped early)."""
    seen: Seen[int] = Seen(horizon_seconds=10, max_entries=10)
    seen.first("new", 100.0, 0)
    seen.first("old", 5.0, 1)
    assert seen.expire(watermark=50.0) == 0 and len(seen) == 2
    assert seen.expire(watermark=111.0) == 2


def test_the_entry_bound_evicts_the_oldest_and_counts_it():
    seen: Seen[int] = Seen(horizon_seconds=1e9, max_entries=3)
    for i in range(5):
        seen.first(f"t{i}", float(i), i)
    assert len(seen) == 3 and seen.evicted_early == 2
    assert [seen.get(f"t{i}") for i in range(5)] == [None, None, 2, 3, 4]
    assert seen.first("t0", 9.0, 0)  # evicted early: no longer caught
