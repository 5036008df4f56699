#!/usr/bin/env bash
# What the collector's store costs per rank and hour, at each detail tier the
# agents' budget picks, on the CPU backend: for each configuration one job of
# RANKS ranks for SECONDS seconds, then the store's pages in use per table
# (SQLite's dbstat), scaled to bytes per rank per hour; then a collector on a
# copy of the store with --detail-age 1s rolls every epoch up (one per rank
# and minute, as past the detail window) and the rolled-up rows' bytes per
# rank-minute, times 60, are what an hour costs once rolled up (an
# extrapolation: a rolled-up minute holds a row per class, hook, worker and
# waited-on peer whatever the minute's traffic; the histograms of a full
# minute fill a few more buckets than a short run's).  docs/collector.md,
# Retention, has the figures.
#
#   bench/storage.sh [--bin BUILD_DIR] [--ranks N] [--seconds S]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build ranks=4 seconds=10
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2 ;;
    --ranks) ranks=$2 ;;
    --seconds) seconds=$2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "storage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
command -v sqlite3 >/dev/null || { echo "storage.sh: needs the sqlite3 shell" >&2; exit 1; }
work=$(mktemp -d /tmp/mks-storage.XXXXXX)
trap 'rm -rf "$work"' EXIT

# name | budget (bytes/s, 0 none) | step pacing (us, 0 none)
configs=(
  "full, steps as fast as they go|0|0"
  "full, a step every 20 ms|0|20000"
  "budget 50 KB/s, steps as fast as they go|50000|0"
  "budget 5 KB/s, steps as fast as they go|5000|0"
)
printf '%-44s %8s %8s %10s %12s %8s\n' configuration steps/s tier "MB/rank/h" "rolled KB/h" "B/step"
for c in "${configs[@]}"; do
  IFS='|' read -r name budget pace <<<"$c"
  d=$work/$(echo "$name" | tr -c 'a-z0-9' _)
  mkdir -p "$d"
  # Enough steps for the time asked, whatever the pace; the run is stopped
  # by the step count (a paced run's is exact, an unpaced one's measured).
  if [ "$pace" -gt 0 ]; then steps=$((seconds * 1000000 / pace)); else steps=$((seconds * 800)); fi
  MKS_BIN_DIR=$bin "$root/deploy/local/mkscope-launch" --ranks "$ranks" --job st --dir "$d" \
    --steps "$steps" --budget "$budget" -q -- --step-interval-us "$pace" >/dev/null
  db=$d/store.db
  sqlite3 "$db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
  secs=$(sqlite3 "$db" "SELECT (MAX(t_end_host) - MIN(t_begin_host)) / 1e9 FROM epochs")
  tier=$(sqlite3 "$db" "SELECT detail_tier FROM epochs GROUP BY detail_tier ORDER BY COUNT(*) DESC
                        LIMIT 1")
  total=$(sqlite3 "$db" "SELECT SUM(pgsize) FROM dbstat")
  nsteps=$(sqlite3 "$db" "SELECT COUNT(*) FROM steps WHERE complete")
  # The roll-up, by a collector of its own on a copy (no agent sends to it:
  # its idle loop applies the detail window).
  cp "$db" "$d/rolled.db"
  "$bin/collector/mkscope-collector" --db "$d/rolled.db" --ingest "ipc://$d/ri" \
    --cli "ipc://$d/rc" --survey "ipc://$d/rs" --metrics off --ucx-port off --detail-age 1s \
    >"$d/roll.log" 2>&1 &
  rpid=$!
  for _ in $(seq 120); do
    sleep 0.5
    left=$(sqlite3 "$d/rolled.db" "SELECT COUNT(*) FROM epochs WHERE compacted < 2" 2>/dev/null ||
           echo 1)
    [ "$left" = 0 ] && break
  done
  kill "$rpid"; wait "$rpid" || true
  [ "$left" = 0 ] || { echo "storage.sh: the roll-up did not finish (see $d/roll.log)" >&2; exit 1; }
  sqlite3 "$d/rolled.db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
  # Bytes in use in the rolled-up tables' pages, over the 95% a large
  # store's pages are filled to (this run's detail tables: 95%), so that a
  # short run's few half-empty pages do not count as if a day had them.
  rolled=$(sqlite3 "$d/rolled.db" "SELECT COALESCE(SUM(pgsize - unused), 0) / 0.95 FROM dbstat
          WHERE name IN
          ('epochs', 'task_stats', 'coverage', 'workers', 'local_waits', 'rollups', 'epochs_rank',
           'epochs_job', 'epochs_received', 'epochs_rolled', 'task_stats_e', 'coverage_e',
           'workers_e', 'local_waits_e', 'rollups_e', 'sqlite_autoindex_epochs_1')")
  minutes=$(sqlite3 "$d/rolled.db" "SELECT COUNT(*) FROM (SELECT DISTINCT rank,
           received_ns / 60000000000 FROM epochs)")
  awk -v n="$name" -v t="$total" -v ro="$rolled" -v rm="$minutes" -v s="$secs" -v r="$ranks" \
      -v k="$nsteps" -v tier="$tier" 'BEGIN {
    per = 3600 / (s * r) / 1e6
    printf "%-44s %8.0f %8s %10.0f %12.0f %8.0f\n", n, k / (s * r), tier, t * per,
           rm ? ro / rm * 60 / 1e3 : 0, k ? t / k : 0 }'
done
