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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from monitor.detect import thresholds

__all__ = ["copy", "made_here", "main", "regenerate"]

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
    copied, stale = copy(cache)
    return copied, dropped + stale


def copy(folder: Path) -> tuple[int, int]:
    """Copy the calibrations in `folder` (a cache folder) made under this calibration
    version into the shipped set, and drop shipped ones made under another: (copied,
    dropped)."""
    shipped = thresholds.SHIPPED
    shipped.mkdir(exist_ok=True)
    copied = dropped = 0
    for path in sorted(folder.glob("*.npz")):
        if made_here(path) and not (shipped / path.name).exists():
            shutil.copyfile(path, shipped / path.name)
            copied += 1
    for path in sorted(shipped.glob("*.npz")):
        if not made_here(path):
            path.unlink()
            dropped += 1
    return copied, dropped


def made_here(path: Path) -> bool:
    """Whether a saved calibration was made under this calibration version, for the key
    its name says."""
    version, key = thresholds.saved(path)
    return (version == thresholds.CALIBRATION_VERSION and key is not None
            and thresholds.key_name(*key) == path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitor.detect.ship",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    making = commands.add_parser("ship", help="regenerate the shipped set (in a checkout)")
    making.add_argument("--cache", type=Path, help="the cache folder to fill (default: a new "
                      "temporary one; an existing one is reused, which only adds)")
    adding = commands.add_parser("copy", help="add a filled cache folder's calibrations")
    adding.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "copy":
        copied, dropped = copy(args.folder)
    else:
        cache = args.cache or Path(tempfile.mkdtemp(prefix="ragmon-calibrations-"))
        copied, dropped = regenerate(cache)
    total = len(list(thresholds.SHIPPED.glob("*.npz")))
    print(f"{copied} calibrations shipped, {dropped} dropped; {total} in {thresholds.SHIPPED} "
          f"(version {thresholds.CALIBRATION_VERSION})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
