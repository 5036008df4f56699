#!/usr/bin/env bash
# Step time of the CPU backend's build variants side by side (hooks compiled
# out, compiled in and detached, native profiler), interleaved over several
# rounds so machine noise hits them alike.  Prints median step times in
# microseconds.  The time each fault type adds: bench/faults_alike.sh.
#
#   bench/cpu_variants.sh BUILD_DIR [--ranks N] [--steps N] [--rounds N]
set -euo pipefail
bin=${1:?usage: $0 BUILD_DIR [--ranks N] [--steps N] [--rounds N]}/bench
shift
ranks=4 steps=200 rounds=5
while [ $# -gt 0 ]; do
    case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { # median of step times (all ranks) over steps [lo, hi) of JSON files
    python3 - "$@" <<'PY'
import json, statistics, sys
lo, hi, files = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
v = []
for f in files:
    for r in json.load(open(f))["ranks"]:
        v += r["step_ns"][lo:hi]
print("%.1f" % (statistics.median(v) / 1e3))
PY
}

echo "== variants: $ranks ranks, $steps steps, $rounds rounds (median step, us)"
for i in $(seq "$rounds"); do
    for v in nohooks hooks prof; do
        exe=mkscope-bench
        [ $v = nohooks ] && exe=mkscope-bench-nohooks
        [ $v = prof ] && exe=mkscope-bench-prof
        "$bin/$exe" run --ranks "$ranks" --steps "$steps" --job "cv$$" -q --json "$tmp/$v.$i.json"
    done
done
for v in nohooks hooks prof; do
    printf "  %-8s %s\n" "$v" "$(median 5 "$steps" "$tmp"/$v.*.json)"
done
