#!/usr/bin/env bash
# What the collector's store costs per rank and hour, at each detail tier the
# agents' budget picks, on the CPU backend: for each configuration one job of
# RANKS ranks for SECONDS seconds, then the store's pages in use per table
# (SQLite's dbstat), scaled to bytes per rank per hour, with and without the
# detail the collector compacts after --detail-age (wait, release and worker
# rows with their indexes).  docs/collector.md, Retention, has the figures.
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
printf '%-44s %8s %8s %10s %10s %8s\n' configuration steps/s tier "MB/rank/h" "compacted" "B/step"
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
  detail=$(sqlite3 "$db" "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN ('waits',
          'releases', 'workers', 'waits_e', 'waits_gen', 'releases_e', 'releases_gen', 'workers_e')")
  nsteps=$(sqlite3 "$db" "SELECT COUNT(*) FROM steps WHERE complete")
  awk -v n="$name" -v t="$total" -v dt="$detail" -v s="$secs" -v r="$ranks" -v k="$nsteps" \
      -v tier="$tier" 'BEGIN {
    per = 3600 / (s * r) / 1e6
    printf "%-44s %8.0f %8s %10.0f %10.0f %8.0f\n", n, k / (s * r), tier, t * per, (t - dt) * per,
           k ? t / k : 0 }'
done
