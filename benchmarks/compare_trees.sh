#!/usr/bin/env bash
# One benchmark command run in two checkouts, alternating round by round, so that their
# figures compare as ratios on a shared, noisy machine (e.g. before and after a move).
#
#   benchmarks/compare_trees.sh OTHER_TREE ROUNDS python benchmarks/replay_throughput.py ...
#
# OTHER_TREE is a `git worktree` with its compiled modules built in place
# (`python setup.py build_ext --inplace`); this tree is the one the script lives in.
set -euo pipefail
other=$(realpath "$1"); rounds=$2; shift 2
this=$(realpath "$(dirname "$0")/..")
for round in $(seq "$rounds"); do
    for tree in "$other" "$this"; do
        echo "=== round $round: $tree ($(git -C "$tree" rev-parse --short HEAD))"
        (cd "$tree" && PYTHONPATH="$tree" "$@")
    done
done
