"""`memory.trim` gives a fragmented heap's free pages back (glibc; skipped elsewhere)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monitor import memory

_FRAGMENT = """
from pathlib import Path
from monitor import memory

def rss_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

blocks = [bytes(2000) for _ in range(50_000)]   # ~100 MiB of malloc'd blocks
kept = blocks[::10]                               # every tenth pins its part of the heap
del blocks
before = rss_mib()
memory.trim()
print(before, rss_mib(), len(kept))
"""


@pytest.mark.skipif(not memory.available(), reason="no glibc malloc")
def test_trim_returns_the_free_pages_of_a_fragmented_heap():
    out = subprocess.run([sys.executable, "-c", _FRAGMENT], capture_output=True, text=True,
                         check=True).stdout.split()
    before, after = float(out[0]), float(out[1])
    assert before - after > 50, (before, after)  # ~90 MiB are free between the kept tenth
