#!/usr/bin/env bash
# A store the size of an hour of a 4-rank CPU job, for timing the diagnosis
# of the job's last steps (docs/PERF.md, "A one-hour job"): diag_bench's
# 4 x 12,000-step store (made first if missing) with its steps, times and
# epochs moved to the end of the hour, and the hour's earlier steps (1.6 ms
# each, as diag_bench's: 2,250,000 a rank in all) as epochs and step rows
# only; their task, wait and release rows are left out, which a diagnosis of
# the last steps never reads (one of every step reads their step times).
#
#   bench/hour_store.sh [--bin BUILD_DIR] OUT.db
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build
[ "${1:-}" = --bin ] && { bin=$2; shift 2; }
[ $# = 1 ] || { sed -n '2,11p' "$0"; exit 2; }
command -v sqlite3 >/dev/null || { echo "hour_store.sh: needs the sqlite3 shell" >&2; exit 1; }
"$bin/collector/diag_bench" 4 12000 /tmp >/dev/null
cp /tmp/mks-diag-bench-4x12000.db "$1"
k=2238000 dt=$((2238000 * 1600000)) half=$((2238000 / 2))
sqlite3 "$1" <<SQL
PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
BEGIN;
UPDATE steps SET step = step + $k, t_begin_dev = t_begin_dev + $dt, t_end_dev = t_end_dev + $dt;
UPDATE task_stats SET step = step + $k WHERE step IS NOT NULL;
UPDATE waits SET step = step + $k, t_begin_dev = t_begin_dev + $dt, t_end_dev = t_end_dev + $dt;
UPDATE releases SET step = step + $k,
  t_ready = CASE WHEN t_ready > 0 THEN t_ready + $dt ELSE t_ready END,
  t_start = CASE WHEN t_start > 0 THEN t_start + $dt ELSE t_start END,
  t_end = CASE WHEN t_end > 0 THEN t_end + $dt ELSE t_end END,
  t_comm_begin = CASE WHEN t_comm_begin > 0 THEN t_comm_begin + $dt ELSE t_comm_begin END,
  t_comm_end = CASE WHEN t_comm_end > 0 THEN t_comm_end + $dt ELSE t_comm_end END,
  t_release = CASE WHEN t_release > 0 THEN t_release + $dt ELSE t_release END;
UPDATE workers SET step = step + $k WHERE step IS NOT NULL;
UPDATE local_waits SET step = step + $k WHERE step IS NOT NULL;
UPDATE epochs SET epoch = epoch + $half, seq = seq + $half, t_begin_host = t_begin_host + $dt,
  t_end_host = t_end_host + $dt, t_begin_dev = t_begin_dev + $dt, t_end_dev = t_end_dev + $dt,
  step_lo = step_lo + $k, step_hi = step_hi + $k;
WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < $half - 1),
  r(k) AS (VALUES(0), (1), (2), (3))
INSERT INTO epochs(job, rank, incarnation, seq, epoch, t_begin_host, t_end_host, t_begin_dev,
                   t_end_dev, detail_tier, sample_shift, lost_summaries, waits_dropped, received_ns,
                   step_lo, step_hi)
  SELECT 'bench', k, 0, x + 1, x, 1000000000 + x * 3200000, 1000000000 + x * 3200000 + 3200000,
         1000000000 + x * 3200000, 1000000000 + x * 3200000 + 3200000, 2, 0, 0, 0, 2,
         2 * x, 2 * x + 1 FROM r, j;
INSERT INTO steps(epoch_id, step, t_begin_dev, t_end_dev, tasks, complete, queued_while_idle_ns)
  SELECT e.id, e.epoch * 2 + h.v, e.t_begin_dev + h.v * 1600000,
         e.t_begin_dev + h.v * 1600000 + 1500000 + ((e.epoch * 2 + h.v) * 7919 + e.rank * 104729) % 60000,
         0, 0, 0
  FROM epochs e, (SELECT 0 AS v UNION ALL SELECT 1) h WHERE e.epoch < $half;
-- the per-step aggregates and the clock's anchors ingest kept hold the
-- steps and epochs before the move: left to be filled, as in a store of an
-- older collector
DELETE FROM step_cells; DELETE FROM step_aggs;
UPDATE step_agg_jobs SET cut = 9223372036854775807;
DELETE FROM clock_hulls; DELETE FROM clock_stale; DELETE FROM clock_jobs;
COMMIT;
CREATE INDEX IF NOT EXISTS steps_step ON steps(step);
SQL
echo "$1: $(sqlite3 "$1" 'SELECT COUNT(*) FROM steps') step rows, $(du -h "$1" | cut -f1)"
