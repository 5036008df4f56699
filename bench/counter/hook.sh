#!/usr/bin/env bash
# bench/counter/hook.sh: what bench/counter.sh adds to each run of
# bench/accuracy.sh ($MKS_ACC_HOOK), so every tool sees the same run.
#
#   hook.sh args ID RANKS MODE SEED STEPS SPEC DIR
#       the extra arguments of the run, one a line: the launcher's, `--`, the
#       bench's: the native trace and the fixed counters into DIR, and for a
#       faulty run the closed loop's --baseline, a clean run of the same
#       ranks, seed and steps (made once, under a lock, with the same binary,
#       agents and launcher arguments)
#   hook.sh post ID DIR RUNS
#       every tool's answer about the run in DIR, scored by
#       bench/accuracy/score.jq against DIR/truth.json into
#       $MKS_COUNTER_OUT/tools/ID.TOOL.score with the bytes of telemetry the
#       tool needed (RUNS, accuracy.sh's own scores, is left to it)
#
# Environment (bench/counter.sh sets it): MKS_COUNTER_OUT (baselines live in
# its baselines/), MKS_BASELINES_BIN (mkscope-baselines), MKS_COUNTER_LAUNCH
# (extra launcher arguments, one a line), MKS_COUNTER_EPOCH and
# MKS_COUNTER_BUDGET and MKS_COUNTER_DETAIL (the agents' epoch, budget and
# --step-detail[/--detail-every], recorded in the scores),
# and accuracy.sh's MKS_*_BIN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
what=${1:?usage: hook.sh args|post ...}
shift

launch_extra() {
  [ -z "${MKS_COUNTER_LAUNCH:-}" ] || printf '%s\n' "$MKS_COUNTER_LAUNCH"
}

# baseline R SEED STEPS: path of the clean run's bench.json, made if missing.
# The closed loop compares every faulted step with the same step of this
# run, so a baseline caught by a burst of the machine's load (steps several
# times the clean step) would scale every fault made from it: one whose
# median step is over twice accuracy.sh's clean step (OUT/base-R) is made
# again, at most three times, and the quietest kept.
baseline() {
  local R=$1 seed=$2 st=$3 dir=$MKS_COUNTER_OUT/baselines f d
  f=$dir/r$R.s$seed.n$st.json
  mkdir -p "$dir"
  (
    flock 9
    if [ ! -s "$f" ]; then
      d=$dir/work.r$R.s$seed.$$
      local extra=() base="" med best="" i
      mapfile -t extra < <(launch_extra)
      base=$(cat "$MKS_COUNTER_OUT/base-$R" 2>/dev/null) || true
      for i in 1 2 3; do
        rm -rf "$d"
        if ! "$root/deploy/local/mkscope-launch" --ranks "$R" --steps "$st" --dir "$d" \
            --epoch-ms 5 -q --job "cbase$R$seed$$$i" "${extra[@]}" -- --seed "$seed" \
            >/dev/null 2>"$d.err"; then
          echo "hook: baseline run r$R s$seed failed: $(tail -n 3 "$d.err" | tr '\n' ' ')" >&2
          exit 1
        fi
        med=$(jq '[.ranks[].step_ns[2:][]] | sort | .[length / 2 | floor] / 1000' "$d/bench.json")
        if [ -z "$best" ] || awk -v a="$med" -v b="$best" 'BEGIN { exit !(a < b) }'; then
          cp "$d/bench.json" "$f.tmp"
          best=$med
        fi
        rm -rf "$d" "$d.err"
        case "$base" in ''|*[!0-9]*) break ;; esac
        awk -v a="$best" -v b="$base" 'BEGIN { exit !(a <= 2 * b) }' && break
        if [ "$i" -lt 3 ]; then
          echo "hook: baseline r$R s$seed: median step $med us, over twice the clean $base us; again" >&2
        else
          echo "hook: baseline r$R s$seed: still over twice the clean step; the quietest kept ($best us)" >&2
        fi
      done
      mv "$f.tmp" "$f"
    fi
  ) 9>"$dir/.lock"
  echo "$f"
}

case "$what" in
args)
  id=$1 R=$2 mode=$3 seed=$4 st=$5 spec=$6 d=$7
  : "$id" "$mode"
  launch_extra
  echo --
  printf '%s\n' --trace "$d/trace" --counters "$d/ctr"
  if [ "$spec" != none ]; then
    b=$(baseline "$R" "$seed" "$st")
    printf '%s\n' --baseline "$b"
  fi
  ;;
post)
  id=$1 d=$2
  runs=$MKS_COUNTER_OUT/tools
  mkdir -p "$runs"
  bin=${MKS_BASELINES_BIN:?}
  truth=$(cat "$d/truth.json")
  score() { # TOOL BYTES GROUPS-FILE
    jq -n -c --argjson diag "$(cat "$3")" --argjson truth "$truth" -f "$root/bench/accuracy/score.jq" |
      jq -c --arg id "$id" --arg tool "$1" --argjson bytes "$2" --argjson full "$full" \
        --argjson epoch "${MKS_COUNTER_EPOCH:-5}" \
        --argjson budget "${MKS_COUNTER_BUDGET:-0}" --arg detail "${MKS_COUNTER_DETAIL:-default}" \
        '. + {id: $id, tool: $tool, bytes: $bytes, trace_bytes: $full,
              epoch_ms: $epoch, agent_budget: $budget, step_detail: $detail}' >"$runs/$id.$1.score.tmp"
  }
  "$bin" trace --bench "$d/bench.json" --trace "$d/trace" -o "$d/ans.trace.json"
  full=$(jq .bytes "$d/ans.trace.json")
  # mkscope: what the agents sent (summaries, registration, heartbeats)
  mk=$(jq -s 'map(.bytes_sent) | add' "$d"/agent-*.json)
  score mkscope "$mk" "$d/diag.json"
  jq .groups "$d/ans.trace.json" >"$d/g.trace.json"
  score trace "$full" "$d/g.trace.json"
  "$bin" trace --bench "$d/bench.json" --trace "$d/trace" --keep-bytes "$mk" -o "$d/ans.sampled.json"
  jq .groups "$d/ans.sampled.json" >"$d/g.sampled.json"
  score trace_sampled "$(jq .bytes "$d/ans.sampled.json")" "$d/g.sampled.json"
  "$bin" counters --bench "$d/bench.json" --counters "$d/ctr" -o "$d/ans.counters.json"
  jq .groups "$d/ans.counters.json" >"$d/g.counters.json"
  score counters "$(jq .bytes "$d/ans.counters.json")" "$d/g.counters.json"
  "$bin" steps --bench "$d/bench.json" -o "$d/ans.steps.json"
  jq .groups "$d/ans.steps.json" >"$d/g.steps.json"
  score steps "$(jq .bytes "$d/ans.steps.json")" "$d/g.steps.json"
  for t in mkscope trace trace_sampled counters steps; do
    mv "$runs/$id.$t.score.tmp" "$runs/$id.$t.score"
  done
  # the traces are large: a kept run directory keeps the answers, not them
  rm -f "$d"/trace.rank*.json
  ;;
*)
  echo "hook: args or post, not '$what'" >&2
  exit 2
  ;;
esac
