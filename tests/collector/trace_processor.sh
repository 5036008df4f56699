#!/usr/bin/env bash
# Loads the collector's Perfetto trace (the two-rank fixture of
# test_trace_formats) into Perfetto's own trace processor, where one is
# installed, and checks what it imported: the slices of both ranks, the
# worker threads under their processes and the flow from rank 0's release to
# rank 1's wait.  Looks for trace_processor_shell (or trace_processor) on
# PATH or in $MKS_TRACE_PROCESSOR, else Python's perfetto.trace_processor;
# without either it skips (exit 77) and says so.
set -euo pipefail
fixture=${1:?usage: trace_processor.sh TEST_TRACE_FORMATS_BINARY}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$fixture" --write "$dir/t.pftrace"

tp=${MKS_TRACE_PROCESSOR:-}
[ -n "$tp" ] || tp=$(command -v trace_processor_shell || command -v trace_processor || true)
queries="SELECT COUNT(*) AS n FROM slice WHERE name IN ('gemm', 'transfer', 'wait');
SELECT COUNT(*) AS n FROM flow;
SELECT COUNT(DISTINCT upid) AS n FROM thread_track JOIN thread USING (utid);"
if [ -n "$tp" ]; then
  out=$(printf '%s\n' "$queries" | "$tp" -q /dev/stdin "$dir/t.pftrace" 2>"$dir/err") ||
    { cat "$dir/err" >&2; echo "FAIL: trace processor refused the trace" >&2; exit 1; }
elif python3 -c 'import perfetto.trace_processor' 2>/dev/null; then
  out=$(python3 - "$dir/t.pftrace" "$queries" <<'PY'
import sys
from perfetto.trace_processor import TraceProcessor
tp = TraceProcessor(trace=sys.argv[1])
for q in sys.argv[2].split(';'):
    if q.strip():
        print(next(iter(tp.query(q))).n)
PY
) || { echo "FAIL: trace processor refused the trace" >&2; exit 1; }
else
  echo "SKIP: Perfetto's trace processor is not installed (no trace_processor_shell on PATH," \
       "no Python perfetto module; Debian has no package of it): the trace was checked only" \
       "against the schema by test_trace_formats" >&2
  exit 77
fi
nums=$(printf '%s\n' "$out" | grep -Eo '^"?[0-9]+"?$' | tr -d '"' | tr '\n' ' ')
read -r slices flows procs <<<"$nums"
[ "${slices:-0}" = 4 ] || { echo "FAIL: trace processor found ${slices:-no} of 4 slices" >&2; exit 1; }
[ "${flows:-0}" = 1 ] || { echo "FAIL: trace processor found ${flows:-no} flows, want 1" >&2; exit 1; }
[ "${procs:-0}" = 2 ] || { echo "FAIL: worker threads under ${procs:-no} processes, want 2" >&2; exit 1; }
echo "ok: trace processor imported 4 slices, 1 flow, workers under 2 processes"
