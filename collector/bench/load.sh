#!/usr/bin/env bash
# One collector under mkscope-load on this machine (docs/PERF.md, "load"):
# the collector pinned to CPU 0, the simulated agents to CPU 1, each in a
# session of its own; with --boost N the two sessions' scheduling group gets
# nice -N (autogroup), so that on a machine shared with other work the
# collector gets most of its CPU.  Writes the generator's report (text and
# JSON) and the machine's load before and after to OUT.
#
# usage: collector/bench/load.sh [--build DIR] [--out DIR] [--db-dir DIR] [--boost N]
#                                [--collectors K] -- MKSCOPE-LOAD-RUN-ARGS...
#   --collectors K  K collectors side by side (ports 17400, 17410, ...), each
#                   with its own generator taking the same arguments; CPUs are
#                   shared round robin
# examples:
#   collector/bench/load.sh -- --ranks 1024 --rate 10 --seconds 60
#   collector/bench/load.sh --boost 10 -- --ranks 1024 --rates 2,4,6,8,10 --seconds 20
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build out="" dbdir=/tmp boost=0 ncoll=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --db-dir) dbdir=$2; shift 2 ;;
    --boost) boost=$2; shift 2 ;;
    --collectors) ncoll=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "load.sh: unknown option $1 (options, then -- and mkscope-load run's)" >&2; exit 2 ;;
  esac
done
case "$boost$ncoll" in *[!0-9]*) echo "load.sh: --boost and --collectors want numbers" >&2; exit 2 ;; esac
coll=$build/collector/mkscope-collector load=$build/collector/mkscope-load
[ -x "$coll" ] && [ -x "$load" ] || { echo "load.sh: build $build first" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d /tmp/mks-load.XXXXXX)
mkdir -p "$out"
work=$(mktemp -d "$dbdir/mks-load-db.XXXXXX")
ncpu=$(nproc)
cleanup() {
  local p
  # setsid forks: the collectors are found by their store's path, unique
  # to this run, and stopped by their ids
  for p in $(pgrep -f "$work/" || true); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# in_session CPU CMD...: run CMD pinned to CPU in a session of its own, its
# autogroup at nice -boost
in_session() {
  local cpu=$1
  shift
  setsid bash -c 'echo "-$0" >/proc/$$/autogroup 2>/dev/null || true; exec taskset -c "$1" "${@:2}"' \
    "$boost" "$cpu" "$@"
}

{
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "kernel: $(uname -r); disk of the store: $(df -h "$work" | awk 'NR == 2 { print $1 " (" $6 ")" }')"
  echo "before: load average $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure $(awk '/some/ { print $2 }' /proc/pressure/cpu)"
  echo "collectors $ncoll, boost $boost, args: $*"
} >"$out/machine.txt"

gen_pids=()
for ((k = 0; k < ncoll; k++)); do
  port=$((17400 + 10 * k))
  in_session $(((2 * k) % ncpu)) "$coll" --ingest "tcp://127.0.0.1:$port" \
    --cli "ipc://$work/cli$k" --survey "ipc://$work/survey$k" --metrics off --ucx-port off \
    --db "$work/store$k.db" >"$out/collector$k.log" 2>&1 &
done
sleep 1
for ((k = 0; k < ncoll; k++)); do
  port=$((17400 + 10 * k))
  cpid=$(pgrep -f "mkscope-collector --ingest tcp://127.0.0.1:$port .*$work/" | head -n 1)
  [ -n "$cpid" ] || { cat "$out/collector$k.log" >&2; echo "load.sh: collector $k did not start" >&2; exit 1; }
  in_session $(((2 * k + 1) % ncpu)) "$load" run --collector "tcp://127.0.0.1:$port" \
    --pid "$cpid" --db "$work/store$k.db" --job "load$k" -f json -o "$out/report$k.json" \
    --recording "$root/collector/bench/rec/b50k.mksrec" "$@" >"$out/run$k.log" 2>&1 &
  gen_pids+=($!)
done
rc=0
for p in "${gen_pids[@]}"; do wait "$p" || rc=1; done
echo "after: load average $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure $(awk '/some/ { print $2 }' /proc/pressure/cpu)" \
  >>"$out/machine.txt"
cat "$out/machine.txt"
for ((k = 0; k < ncoll; k++)); do
  jq -r '.phases[] | "collector \(input_line_number - 1): rate \(.rate): offered \(.offered_per_s | floor)/s, acked \(.acked_per_s | floor)/s, send->ack p50 \(.send_to_ack_ms.p50) p99 \(.send_to_ack_ms.p99) ms, due->ack p99 \(.due_to_ack_ms.p99) ms, lost \(.lost), coarsened \(.coarsened), collector cpu \(.collector_cpu * 100 | floor)%, rss \(.collector_rss_kb / 1024 | floor) MB, kept up \(.kept_up)"' \
    "$out/report$k.json" 2>/dev/null | sed "s/^collector [0-9]*:/collector $k:/" || cat "$out/run$k.log"
  jq -r '"collector \(.job): knee \(.knee | tostring); store \(.store.db_bytes / 1e6 | floor) MB + \(.store.wal_bytes / 1e6 | floor) MB WAL, \(.store.summaries) summaries"' \
    "$out/report$k.json" 2>/dev/null || true
done
echo "reports in $out"
exit $rc
