"""Making the shipped calibrations (`monitor/detect/calibrations/`), for maintainers.

    python -m monitor.detect.ship ship            # regenerate the whole set
    python -m monitor.detect.ship copy FOLDER     # add a filled cache folder's

`ship` runs, in a checkout, every workload whose streams a fresh install should find
armed, all with one empty calibration cache: the test suite's fast tier, the drift and
growth tests, and a steady `ragmon demo`; then replaces the shipped set with what that
cache holds (~10-15 minutes on 2 cores). Run it after bumping
`thresholds.CALIBRATION_VERSION` and commit the folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from monitor.detect import thresholds

__all__ = ["main", "regenerate"]

ROOT = Path(__file__).resolve().parents[2]
# (what, command): each run with RAGMON_CALIBRATION_CACHE set to the one cache.
WORKLOADS = (
    ("the fast tier of the tests",
     [sys.executable, "-m", "pytest", "-m", "not integration", "-n", "2", "-q",
      "-p", "no:cacheprovider"]),
    ("the drift and growth tests",
     [sys.executable, "-m", "pytest", "tests/detect/test_drift.py",
      "tests/detect/test_growth.py", "-n", "2", "-q", "-p", "no:cacheprovider"]),
    ("a steady demo", [sys.executable, "-m", "monitor.cli", "demo", "--duration", "240",
                       "--scenario", "steady"]),
)


def regenerate(cache: Path) -> tuple[int, int]:
    """Run every workload with `cache`, then make the shipped set exactly its contents
    under this version: (shipped, dropped)."""
    if not (ROOT / "tests").is_dir():
        raise SystemExit(f"ship runs the test suite: {ROOT / 'tests'} is not there "
                         "(run it in a checkout)")
    env = {**os.environ, "RAGMON_CALIBRATION_CACHE": str(cache)}
    for what, command in WORKLOADS:
        print(f"ship: {what}: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        # Failing tests still calibrate; a crash does not. Their output is not shown: run
        # the fast tier yourself after a bump (a test that hard-coded the version once
        # failed here unseen).
        if done.returncode not in (0, 1):
            raise SystemExit(f"ship: {what} exited with {done.returncode}")
    kept = {path.name for path in cache.glob("*.npz")}
    dropped = 0
    for path in thresholds.SHIPPED.glob("*.npz"):
        if path.name not in kept:
            path.unlink()
            dropped += 1
    copied, stale = thresholds.ship(cache)
    return copied, dropped + stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitor.detect.ship",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ship = commands.add_parser("ship", help="regenerate the shipped set (in a checkout)")
    ship.add_argument("--cache", type=Path, help="the cache folder to fill (default: a new "
                      "temporary one; an existing one is reused, which only adds)")
    copy = commands.add_parser("copy", help="add a filled cache folder's calibrations")
    copy.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "copy":
        copied, dropped = thresholds.ship(args.folder)
    else:
        cache = args.cache or Path(tempfile.mkdtemp(prefix="ragmon-calibrations-"))
        copied, dropped = regenerate(cache)
    total = len(list(thresholds.SHIPPED.glob("*.npz")))
    print(f"{copied} calibrations shipped, {dropped} dropped; {total} in {thresholds.SHIPPED} "
          f"(version {thresholds.CALIBRATION_VERSION})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
