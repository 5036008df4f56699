#!/usr/bin/env bash
# mkscope demo: install, build, then on this machine start a collector and N
# ranks of the reference megakernel (CPU backend unless a GPU is present),
# each with its agent; print what the collector learned next to what the
# megakernel says it executed, and mkscope's diagnosis of the fault it
# injected.  By default one rank's scheduler is imbalanced (queue-oversub on
# rank 2) and the other ranks stall waiting on its all-reduce contribution:
# the diagnosis names both, the stalled ranks with a remote stall and the
# root with local imbalance and its task class.  Stops everything it started
# and checks that nothing is left.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: deploy/demo.sh [--ranks N] [--steps N] [--fault SPEC]... [-f text|json] [--no-build]

  --ranks N      megakernel ranks, one agent each (default 4)
  --steps N      decode steps (default 200)
  --fault SPEC   inject a fault as mkscope-bench does (repeatable), e.g.
                 task-delay:rank=1,class=attention,magnitude=20000,steps=50-54.
                 Types: task-delay, moe-skew, notify-delay, queue-oversub,
                 comm-delay, tile-starve, slow-rank (docs/bench.md).  Without
                 steps=, or with steps=all, every step (persistent).
                 --fault none: a clean run.  Default: queue-oversub on rank 2
                 (the last rank when fewer), 50 ms on each of 5 steps from
                 the middle of the run
  -f json        one JSON document on stdout instead of text
  --no-build     use the existing build/ (no install, no build)
  --keep         keep the run directory (sockets, store.db, logs)

Exit status: 0 when every per-rank, per-class count the collector learned
equals the megakernel's own and no process was left behind.
USAGE
}

root=$(cd "$(dirname "$0")/.." && pwd)
ranks=4 steps=200 fmt=text build=1 keep=0
faults=() fault_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --fault)
      fault_given=1
      [ "$2" = none ] || faults+=(--fault "$2")
      shift 2 ;;
    -f|--format) fmt=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "demo: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
case "$fmt" in text|json) ;; *) echo "demo: -f wants text or json" >&2; exit 2 ;; esac
case "$ranks$steps" in ''|*[!0-9]*) echo "demo: --ranks and --steps want numbers" >&2; exit 2 ;; esac
[ "$ranks" -ge 1 ] && [ "$steps" -ge 1 ] || { echo "demo: --ranks and --steps must be at least 1" >&2; exit 2; }
if [ "$fault_given" = 0 ] && [ "$ranks" -ge 2 ]; then
  # A remote stall caused by local scheduler imbalance on another rank.
  root_rank=$((ranks > 2 ? 2 : ranks - 1)) first=$((steps / 2))
  faults=(--fault "queue-oversub:rank=$root_rank,magnitude=50000,steps=$first-$((first + 4))")
fi

# Text goes to stderr in json mode so that stdout is one document.
say() { if [ "$fmt" = json ]; then echo "$*" >&2; else echo "$*"; fi; }

build_dir=${MKS_BUILD_DIR:-$root/build}
if [ "$build" = 1 ]; then
  say "== installing dependencies"
  "$root/deploy/install-deps.sh" >&2
  say "== building (log: $build_dir.log)"
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build_dir.log" 2>&1 ||
    { tail -n 40 "$build_dir.log" >&2; exit 1; }
  cmake --build "$build_dir" -j"$(nproc 2>/dev/null || echo 2)" >>"$build_dir.log" 2>&1 ||
    { tail -n 40 "$build_dir.log" >&2; exit 1; }
fi
export MKS_AGENT_BIN=$build_dir/agent/mkscope-agent
export MKS_COLLECTOR_BIN=$build_dir/collector/mkscope-collector
export MKS_BENCH_BIN=$build_dir/bench/mkscope-bench
export MKS_MONITORS_DIR=$build_dir/agent/monitors
cli_bin=$build_dir/collector/cli/mkscope
check_bin=$build_dir/tests/integration/mks-countcheck
for b in "$MKS_AGENT_BIN" "$MKS_COLLECTOR_BIN" "$MKS_BENCH_BIN" "$cli_bin" "$check_bin"; do
  [ -x "$b" ] || { echo "demo: $b missing: build first (without --no-build)" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/mkscope-demo.XXXXXX)
collector=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$collector" ]; then
    kill -TERM -- "-$collector" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 -- "-$collector" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$collector" 2>/dev/null || true
  fi
  [ "$keep" = 1 ] && say "run directory kept: $dir" || rm -rf "$dir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" --survey "ipc://$dir/survey" \
  --cli "ipc://$dir/cli" --metrics off --db "$dir/store.db" >"$dir/collector.log" 2>&1 </dev/null &
collector=$!
cli() { "$cli_bin" --collector "ipc://$dir/cli" "$@"; }

say "== collector, $ranks megakernel ranks and $ranks agents (run directory $dir)"
[ ${#faults[@]} -eq 0 ] || say "   faults: ${faults[*]}"
# Agent epochs of 5 ms keep decode steps apart in the summaries, which the
# diagnosis needs to tell a slow step from its neighbours.
"$root/deploy/local/mkscope-launch" --ranks "$ranks" --steps "$steps" --dir "$dir" \
  --collector "ipc://$dir/ingest" --job "demo$$" --epoch-ms 5 "${faults[@]}" >/dev/null

cli -f json status >"$dir/status.json"
cli -f json query 'count(task) by rank, class' >"$dir/query.json"
set +e
"$check_bin" --bench "$dir/bench.json" --query "$dir/query.json" --status "$dir/status.json" \
  -f "$fmt" >"$dir/counts.out" "$dir"/agent-*.json
counts_rc=$?
set -e
# Groups of one or two slow steps are the machine's noise here (several
# ranks, agents and the collector share its cores): left out, and counted.
if cli -f "$fmt" diagnose --min-steps 3 >"$dir/diagnose.out" 2>"$dir/diagnose.err"; then
  if [ "$fmt" = json ]; then
    # one JSON object per slow-step group: an array of them in the document
    { echo '['; sed '$!s/$/,/' "$dir/diagnose.out"; echo ']'; } >"$dir/diagnose.arr"
    mv "$dir/diagnose.arr" "$dir/diagnose.out"
  fi
elif [ "$fmt" = json ]; then
  cat "$dir/diagnose.err" >&2
  echo null >"$dir/diagnose.out"
else
  cat "$dir/diagnose.err" >>"$dir/diagnose.out"
fi

if [ "$fmt" = text ]; then
  echo
  echo "== what the collector learned (mkscope status)"
  cli status
  echo
  echo "== per-rank task counts: the megakernel's own vs. the collector's"
  cat "$dir/counts.out"
  if [ -f "$dir/diagnose.out" ]; then
    echo
    echo "== mkscope diagnose"
    cat "$dir/diagnose.out"
  fi
fi

# Stop the collector (the launcher stopped the ranks and agents) and check.
kill -TERM -- "-$collector" 2>/dev/null || true
for _ in $(seq 50); do kill -0 -- "-$collector" 2>/dev/null || break; sleep 0.1; done
collector=""
left=$( (pgrep -f "$dir" || true) | wc -l)
if [ "$fmt" = json ]; then
  printf '{"ranks": %s, "steps": %s, "status": ' "$ranks" "$steps"
  cat "$dir/status.json"
  printf ', "counts": '
  cat "$dir/counts.out"
  printf ', "diagnosis": '
  if [ -f "$dir/diagnose.out" ]; then cat "$dir/diagnose.out"; else printf 'null'; fi
  printf ', "processes_left": %s}\n' "$left"
else
  echo
  if [ "$left" -eq 0 ]; then echo "== stopped everything: no mkscope process left"
  else echo "== $left processes left behind:"; pgrep -af "$dir"; fi
fi
[ "$left" -eq 0 ] || { pkill -KILL -f "$dir" || true; exit 1; }
exit $counts_rc
