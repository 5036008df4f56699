#!/usr/bin/env bash
# Ingest goes on while the collector diagnoses a long job: the acks simulated
# agents get, with and without `mkscope diagnose` requests running all along.
#
# A store holding a long job (diag_bench's: RANKS ranks of STEPS steps, kept
# in /tmp between runs) is copied and a collector started on it; then
# mkscope-load replays a recording as AGENTS agents at RATE epochs a second
# for SECONDS twice: once alone, once while a loop sends one diagnose of the
# long job after another (each on the CLI server's threads, with the work
# limit raised so that a diagnosis runs to its end).  Printed side by side:
# summaries acked per second and the due-to-ack latency (from the end of the
# epoch to its ack: queueing in the agent included) p50 / p99 / max, and the
# diagnoses that ran in the second phase with their mean time.
# docs/PERF.md has the figures.
#
# --store FILE takes that store (its job named by --job) instead of
# diag_bench's; --diagnose "ARGS" adds arguments to each diagnose
# (e.g. "--last 1000").
#
#   bench/ingest_during_diagnose.sh [--bin BUILD_DIR] [--ranks 4] [--steps 60000]
#                                   [--agents 64] [--rate 10] [--seconds 20]
#                                   [--store FILE --job JOB] [--diagnose ARGS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build ranks=4 steps=60000 agents=64 rate=10 seconds=20 store="" job=bench dargs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --store) store=$2 ;;
    --job) job=$2 ;;
    --diagnose) dargs=$2 ;;
    --bin) bin=$2 ;;
    --ranks) ranks=$2 ;;
    --steps) steps=$2 ;;
    --agents) agents=$2 ;;
    --rate) rate=$2 ;;
    --seconds) seconds=$2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "ingest_during_diagnose.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
command -v jq >/dev/null || { echo "ingest_during_diagnose.sh: needs jq" >&2; exit 1; }
work=$(mktemp -d /tmp/mks-ingdiag.XXXXXX)
cpid=""
cleanup() {
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null && wait "$cpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The long job (made once: filling takes minutes).
if [ -z "$store" ]; then
  "$bin/collector/diag_bench" "$ranks" "$steps" /tmp >"$work/diag_bench.txt"
  store=/tmp/mks-diag-bench-${ranks}x${steps}.db
else
  : >"$work/diag_bench.txt"
  steps=$(sqlite3 "$store" "SELECT MAX(s.step) + 1 FROM steps s JOIN epochs e ON e.id = s.epoch_id
                            WHERE e.job = '$job'")
  ranks=$(sqlite3 "$store" "SELECT COUNT(DISTINCT rank) FROM epochs WHERE job = '$job'")
fi
cp "$store" "$work/store.db"
# (diag_bench's epochs carry made-up receive times: no age or size bound)
"$bin/collector/mkscope-collector" --ingest "ipc://$work/ingest" --cli "ipc://$work/cli" \
  --survey "ipc://$work/survey" --metrics off --ucx-port off --db "$work/store.db" \
  --max-age 100000d --detail-age 0 --max-bytes 0 --request-timeout 600000 2>"$work/collector.log" &
cpid=$!
for _ in $(seq 100); do [ -S "$work/cli" ] && break; sleep 0.1; done
cli() { "$bin/collector/cli/mkscope" --collector "ipc://$work/cli" --timeout 600000 "$@"; }

load() {
  "$bin/collector/mkscope-load" run --collector "ipc://$work/ingest" \
    --recording "$root/collector/bench/rec/b50k.mksrec" --ranks "$agents" --rate "$rate" \
    --seconds "$seconds" --drain-ms 5000 --job live --pid "$cpid" -f json -o "$1" >/dev/null
}

load "$work/alone.json"
# Diagnoses back to back during the second phase.
(
  n=0 t0=$(date +%s%N)
  while [ ! -e "$work/stop" ]; do
    # shellcheck disable=SC2086 # ARGS are words
    cli --job "$job" -f json diagnose $dargs >"$work/diag.json" ||
      { echo "diagnose failed" >&2; break; }
    grep -q '"cause":"none"' "$work/diag.json" && { echo "diagnose found nothing" >&2; break; }
    n=$((n + 1))
  done
  echo "$n $(( ($(date +%s%N) - t0) / 1000000 ))" >"$work/diagnoses"
) &
dpid=$!
load "$work/busy.json"
touch "$work/stop"
wait "$dpid"
read -r n_diag diag_ms <"$work/diagnoses"

row() {
  jq -r --arg what "$2" '.phases[0] | [$what, (.acked_per_s | floor),
    (.due_to_ack_ms.p50 * 10 | round / 10), (.due_to_ack_ms.p99 * 10 | round / 10),
    (.due_to_ack_ms.max * 10 | round / 10), .timeouts, .lost] | @tsv' "$1"
}
echo "store: $ranks ranks x $steps steps ($(du -h "$store" | cut -f1)); load: $agents agents at $rate epochs/s;" \
  "diagnose ${dargs:-(every step)}"
grep -i "diagnose (every step)" "$work/diag_bench.txt" || true
printf '%-28s %10s %10s %10s %10s %9s %5s\n' phase "acked/s" "p50 ms" "p99 ms" "max ms" timeouts lost
{ row "$work/alone.json" "ingest alone"; row "$work/busy.json" "ingest + diagnose loop"; } |
  while IFS=$'\t' read -r a b c d e f g; do
    printf '%-28s %10s %10s %10s %10s %9s %5s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g"
  done
echo "diagnoses during the second phase: $n_diag, $((diag_ms / (n_diag > 0 ? n_diag : 1))) ms each"
