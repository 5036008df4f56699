#!/usr/bin/env bash
# bench/counter.sh: the counterexample benchmark on the CPU backend.  Can a
# simpler tool name the injected cause as well as mkscope does?
#
# The runs are bench/accuracy.sh's (its plan, launcher, agents, collector,
# truth files and scoring rule), made with one binary, mkscope-bench-obs,
# which carries the hooks, the native profiler and the fixed counters at
# once: every tool observes the very same run.  Faulty runs close the
# bench's loop (--baseline, a clean run of the same ranks, seed and steps),
# so the step times look alike whatever the fault.  bench/counter/hook.sh
# adds the trace, the counters and the baseline to each run and, once
# mkscope's diagnosis is in, asks every other tool (mkscope-baselines) and
# scores all of them with bench/accuracy/score.jq.  The per-tool table
# (bench/counter/report.jq) comes last.
#
# Tools: mkscope (summaries and wait chains, the real diagnosis), trace (the
# native profiler's full trace, critical-path rule), trace_sampled (the
# same trace sampled down to the bytes mkscope sent in that run), counters
# (fixed per-step counters, no programs), steps (the step timeline alone).
# The CUDA tools (CUPTI activity and PC sampling): bench/counter/gpu.sh.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/counter.sh [OPTIONS]

  --build DIR        build tree [build/]
  --out DIR          results, resumable [BUILD/counter]
  --subset S         full (bench/accuracy.sh's matrix), classes (the matrix with
                     one task class a fault type, the CI's: every fault type,
                     every magnitude, windowed and persistent, clean runs) or ci
                     (every fault type, windowed and persistent, 4 ranks, large
                     magnitude, four seeds, two clean runs) [full]
  --ranks LIST       rank counts [4]
  --seeds N          seeds per cell [3; 4 in ci]
  --steps N          steps a run [30]
  --long-steps N     steps of the long clean run [1000 in full, 0 in ci]
  --clean N          short clean runs of the classes subset [10]
  --jobs N           runs at once [1]
  --agent-budget B   agents' telemetry budget, bytes per second [unlimited]
  --epoch-ms MS      agents' epoch [5, bench/accuracy.sh's; the agent's own
                     default is 100]
  --step-detail M    agents' --step-detail (all or auto) [the agent's default]
  --detail-every K   agents' --detail-every (with --step-detail auto)
  --measure          also measure the step-time perturbation of each tool
                     (interleaved rounds) and the time to ask a new question
                     (attach on a live job; rebuild of the counters build)
  --rounds N         rounds of --measure [5]
  --fresh            forget earlier results
  --report           no runs: only the tables of the runs done so far (and
                     --measure, if given)
  --assert           exit 1 when mkscope's accuracy or false-confidence target
                     is missed
  -h, --help

EXAMPLES
  bench/counter.sh --subset ci --assert             # what ctest runs
  bench/counter.sh --subset classes --seeds 1 --long-steps 1000 --measure
  bench/counter.sh --subset classes --seeds 1 --long-steps 1000 --epoch-ms 100 \
      --out build/counter-e100                      # the agent's defaults
  bench/counter.sh --report
USAGE
}

root=$(cd "$(dirname "$0")/.." && pwd)
here=$root/bench/counter
build=$root/build out="" subset=full ranks=4 seeds="" steps=30 long="" jobs=1 budget=""
measure=0 rounds=5 fresh=0 report_only=0 assert=0 epoch=5 clean=10 detail="" every=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --subset) subset=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --long-steps) long=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --agent-budget) budget=$2; shift 2 ;;
    --epoch-ms) epoch=$2; shift 2 ;;
    --step-detail) detail=$2; shift 2 ;;
    --detail-every) every=$2; shift 2 ;;
    --clean) clean=$2; shift 2 ;;
    --measure) measure=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --report) report_only=1; shift ;;
    --assert) assert=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "counter: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
case "$subset" in full|ci|classes) ;; *) echo "counter: --subset wants full, classes or ci" >&2; exit 2 ;; esac
[ -n "$long" ] || { [ "$subset" = ci ] && long=0 || long=1000; }
# the CI subset's four seeds: 56 faulty runs, so that one confident wrong
# answer is not already past the 2% false-confidence target
[ -n "$seeds" ] || { [ "$subset" = ci ] && seeds=4 || seeds=3; }
case "$detail" in ''|all|auto) ;; *) echo "counter: --step-detail wants all or auto" >&2; exit 2 ;; esac
for v in "$seeds" "$steps" "$long" "$jobs" "$rounds" "$epoch" "$clean" ${budget:+"$budget"} ${every:+"$every"}; do
  case "$v" in ''|*[!0-9]*) echo "counter: --seeds, --steps, --long-steps, --jobs, --rounds, --epoch-ms, --clean, --agent-budget, --detail-every want numbers" >&2; exit 2 ;; esac
done
[ "$epoch" -ge 1 ] && [ "$clean" -ge 1 ] && [ "$jobs" -ge 1 ] ||
  { echo "counter: --epoch-ms, --clean and --jobs must be at least 1" >&2; exit 2; }
command -v jq >/dev/null || { echo "counter: jq is missing (deploy/install-deps.sh)" >&2; exit 1; }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "counter: no build tree $build" >&2; exit 1; }
[ -n "$out" ] || out=$build/counter
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ "$fresh" = 1 ] && rm -rf "$out/runs" "$out/tools" "$out/work" "$out/failed" "$out/baselines" \
  "$out"/base-* "$out/measure.json"

obs=$build/bench/mkscope-bench-obs
export MKS_BASELINES_BIN=$build/bench/mkscope-baselines
for b in "$obs" "$MKS_BASELINES_BIN"; do
  [ -x "$b" ] || { echo "counter: $b missing: build first" >&2; exit 1; }
done
export MKS_BENCH_BIN=$obs MKS_ACC_HOOK=$here/hook.sh MKS_COUNTER_OUT=$out
# the launcher takes the last --epoch-ms it is given: these come after
# accuracy.sh's own 5 ms
export MKS_COUNTER_EPOCH=$epoch MKS_COUNTER_BUDGET=${budget:-0}
export MKS_COUNTER_DETAIL=${detail:-default}${every:+/$every}
MKS_COUNTER_LAUNCH="--epoch-ms
$epoch${budget:+
--budget
$budget}${detail:+
--agent-arg
--step-detail=$detail}${every:+
--agent-arg
--detail-every=$every}"
export MKS_COUNTER_LAUNCH

# ---- the runs (bench/accuracy.sh with the hook) ---------------------------------
acc=("$root/bench/accuracy.sh" --build "$build" --out "$out" --ranks "$ranks" --seeds "$seeds"
     --steps "$steps" --long-steps "$long")
# the classes subset: accuracy.sh's matrix, one class a fault type (the
# CI's), run line by line through its --one
classes_re='^(clean|td\.o_proj|ms\.expert|nd\.allreduce_send|qo\.qkv_proj|cd\.all|ts\.qkv_proj|sr\.rank)\.'
if [ "$subset" = classes ]; then
  # with --clean N short clean runs (seeds 1..N) for the false alarms
  plan=$({ "${acc[@]}" --subset full --list | grep -E "$classes_re" | grep -Ev '^clean\.r[0-9]+\.s'
           "${acc[@]}" --subset full --seeds "$clean" --list | grep -E '^clean\.r[0-9]+\.s'; })
else
  plan=$("${acc[@]}" --subset "$subset" --list)
fi
# missing: the runs of the plan that not every tool has scored yet
missing() {
  local id _ t
  while read -r id _; do
    for t in mkscope trace trace_sampled counters steps; do
      [ -s "$out/tools/$id.$t.score" ] || { echo "$id"; break; }
    done
  done <<<"$plan"
}
runs() {
  if [ "$subset" = classes ]; then
    echo "counter: $(missing | wc -l) of $(wc -l <<<"$plan") runs to do, $jobs at a time (results in $out)" >&2
    local t0=$SECONDS p
    # in a fixed shuffled order, as accuracy.sh runs its own: a run cut short
    # still covers every kind of run; done runs are skipped by --one itself
    # (the first alone: it writes accuracy.sh's OUT/base-R that the others read)
    p=$(sort -R --random-source=<(yes) <<<"$plan")
    "${acc[@]}" --one "$(head -n 1 <<<"$p")" || true
    tail -n +2 <<<"$p" | tr '\n' '\0' | xargs -0 -r -P "$jobs" -I{} "${acc[@]}" --one "{}" || true
    echo "counter: runs done in $((SECONDS - t0)) s" >&2
    "${acc[@]}" --report || true
  else
    # mkscope's own matrix as accuracy.sh prints it
    "${acc[@]}" --subset "$subset" --jobs "$jobs"
  fi
}
if [ "$report_only" = 0 ]; then
  runs
  # a run that failed (not one answered wrong: that is scored) is tried once
  # more, as accuracy.sh resumes; one failing twice is reported and, with
  # --assert, fails the benchmark
  if [ -n "$(missing)" ]; then
    echo "counter: $(missing | wc -l) runs failed; trying them once more" >&2
    runs
  fi
fi
# ---- --measure: perturbation and the time to ask a new question ---------------

median_steps() { # FILE...: median of every rank's step_ns past the first 2 steps, us
  jq -s '[.[] | .ranks[].step_ns[2:][]] | sort | .[length / 2 | floor] / 1000' "$@"
}

measure() {
  local m=$out/work/measure R=$ranks i v d t0 t1 extra=()
  R=${R%% *}
  rm -rf "$m"
  mkdir -p "$m"
  echo "counter: measuring step times ($rounds rounds, $R ranks, 200 steps)" >&2
  for i in $(seq "$rounds"); do
    for v in none mkscope trace counters; do
      d=$m/$v.$i
      case $v in
        none) "$build/bench/mkscope-bench-nohooks" run --ranks "$R" --steps 200 --seed "$i" \
                --json "$d.json" -q ;;
        trace) "$build/bench/mkscope-bench-prof" run --ranks "$R" --steps 200 --seed "$i" \
                 --json "$d.json" --trace "$d.tr" -q; rm -f "$d".tr.* ;;
        counters) "$build/bench/mkscope-bench-counters" run --ranks "$R" --steps 200 --seed "$i" \
                    --json "$d.json" --counters "$d.ct" -q; rm -f "$d".ct.* ;;
        mkscope) MKS_BENCH_BIN=$build/bench/mkscope-bench "$root/deploy/local/mkscope-launch" \
                   --ranks "$R" --steps 200 --dir "$d" --epoch-ms "$epoch" -q --job "cm$i$$" \
                   ${budget:+--budget "$budget"} -- --seed "$i" >/dev/null
                 cp "$d/bench.json" "$d.json"; rm -rf "$d" ;;
      esac
    done
  done
  local none mk tr ct
  none=$(median_steps "$m"/none.*.json)
  mk=$(median_steps "$m"/mkscope.*.json)
  tr=$(median_steps "$m"/trace.*.json)
  ct=$(median_steps "$m"/counters.*.json)
  # the time to ask a new question.  mkscope: attach a monitor it did not
  # have to a live job and wait until a query over it answers.  The others:
  # a new counter or record is a change of the runtime: rebuild, then run
  # the job again from its start.
  echo "counter: measuring the time to ask a new question" >&2
  d=$m/live
  MKS_BENCH_BIN=$build/bench/mkscope-bench "$root/deploy/local/mkscope-launch" --live \
    --ranks "$R" --dir "$d" --epoch-ms 100 -q --job "cq$$" >/dev/null 2>"$m/live.err" &
  local lp=$! cli=$build/collector/cli/mkscope ok=0
  for _ in $(seq 300); do
    "$cli" --collector "ipc://$d/cli" --job "cq$$" status >/dev/null 2>&1 && { ok=1; break; }
    sleep 0.1
  done
  local attach="-"
  if [ "$ok" = 1 ]; then
    sleep 1
    t0=$(date +%s%N)
    if "$cli" --collector "ipc://$d/cli" --job "cq$$" attach "$build/agent/monitors/latency.bpf.o" \
        --name question --ranks all >/dev/null 2>&1; then
      for _ in $(seq 100); do
        "$cli" --collector "ipc://$d/cli" --job "cq$$" query 'p99(run) by class' >/dev/null 2>&1 &&
          break
        sleep 0.05
      done
      t1=$(date +%s%N)
      attach=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    fi
  fi
  # TERM, not INT: a job started in the background of a script ignores
  # SIGINT, and the launcher could not trap it
  kill -TERM "$lp" 2>/dev/null || true
  wait "$lp" 2>/dev/null || true
  t0=$(date +%s%N)
  touch "$root/bench/src/runtime/rt.c"
  cmake --build "$build" --target mkscope-bench-counters >/dev/null 2>&1
  t1=$(date +%s%N)
  local rebuild restart
  rebuild=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  t0=$(date +%s%N)
  "$build/bench/mkscope-bench-counters" run --ranks "$R" --steps 30 --counters "$m/q" -q
  t1=$(date +%s%N)
  restart=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  jq -n --argjson none "$none" --argjson mk "$mk" --argjson tr "$tr" --argjson ct "$ct" \
    --arg attach "$attach" --arg rebuild "$rebuild" --arg restart "$restart" --argjson rounds "$rounds" \
    '{step_us: {none: $none, mkscope: $mk, trace: $tr, counters: $ct}, rounds: $rounds,
      perturbation: {mkscope: (100 * ($mk - $none) / $none), trace: (100 * ($tr - $none) / $none),
                     trace_sampled: (100 * ($tr - $none) / $none),
                     counters: (100 * ($ct - $none) / $none), steps: 0},
      question: {mkscope: "attach \($attach) s", trace: "rebuild \($rebuild) s+run",
                 trace_sampled: "rebuild \($rebuild) s+run", counters: "rebuild \($rebuild) s+run",
                 steps: "none possible"},
      restart_s: $restart}' >"$out/measure.json"
  rm -rf "$m"
}
[ "$measure" = 1 ] && measure

# ---- the tables: per tool last ------------------------------------------------
# the plan's runs only: OUT may hold runs of another subset too
files=()
while read -r id _; do
  for f in "$out/tools/$id".*.score; do if [ -s "$f" ]; then files+=("$f"); fi; done
done <<<"$plan"
[ "${#files[@]}" -gt 0 ] || { echo "counter: no runs of the plan scored yet in $out/tools" >&2; exit 1; }
jq -s . "${files[@]}" >"$out/tools.json"
m=null
[ -s "$out/measure.json" ] && m=$(cat "$out/measure.json")
echo
jq -r -f "$here/targets.jq" "$out/tools.json" | tee "$out/targets.txt"
echo
jq -r --argjson m "$m" -f "$here/report.jq" "$out/tools.json"
if [ -n "$(missing)" ]; then
  echo "counter: runs of the plan not scored by every tool: $(missing | tr '\n' ' ')" >&2
  [ "$assert" = 0 ] || exit 1
fi
if [ "$assert" = 1 ] && head -n 2 "$out/targets.txt" | grep -q '^FAIL'; then exit 1; fi
exit 0
