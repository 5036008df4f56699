#!/usr/bin/env bash
# bench/accuracy.sh: how often `mkscope diagnose` names the fault the bench
# injected.  On the CPU backend, through the real agents and collector
# (deploy/local/mkscope-launch, as deploy/demo.sh runs them): every fault
# type x every task class it applies to x magnitudes from near the noise
# floor to large x 2, 4 and 8 ranks x windowed (5 steps) and persistent
# (every step) x several seeds, plus clean runs short and long.  Each run is
# scored by an automatic rule (bench/accuracy/score.jq) against the bench's
# truth file, which the diagnosis never sees; the matrix (report.jq) and the
# targets (targets.jq) are printed last.
#
# Other tools can score the same runs: $MKS_ACC_HOOK names a program that
# is called as `HOOK args ID RANKS MODE SEED STEPS SPEC DIR` before a run
# (it prints extra arguments one a line: the launcher's, then a line `--`,
# then the bench's) and as `HOOK post ID DIR RUNS` once the diagnosis is in
# DIR/diag.json, before the run is scored (bench/counter.sh does so); a
# failing hook fails the run, so a second call runs it again.
#
# Runs are independent (own directory, sockets and collector) and each
# leaves its score in OUT/runs/ID.score: a second call resumes where the
# first stopped, --jobs N runs N at once.  Magnitudes are multiples of the
# clean step time at each rank count (OUT/base-R: fixed, or measured once
# with --calibrate).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/accuracy.sh [OPTIONS]

  --build DIR      build tree with the agent, collector, CLI and bench [build/]
  --out DIR        results and resumable state [BUILD/accuracy]
  --subset S       full (the matrix) or ci (every fault type, windowed and
                   persistent, 4 ranks, one class, the large magnitude, four seeds) [full]
  --jobs N         runs at once [1]
  --seeds N        seeds per cell [3; 4 with --subset ci]
  --ranks LIST     rank counts ["2 4 8"]
  --steps N        steps of a run [30]; windowed faults hit 5 steps from N/3
  --long-steps N   steps of the long clean runs [10000]; 0: none
  --calibrate      measure the clean step at each rank count (median of three
                   runs) instead of the fixed 800, 1200, 3000 us at 2, 4, 8 ranks
  --hog WHICH      a deliberate CPU hog during the runs: clean (the clean runs)
                   or all; bursts of a busy loop on every core, 50-150 ms each,
                   100-500 ms apart, at the niceness of this script (a loaded
                   host; a clean run must still name no cause) [none]
  --fresh          forget earlier results in OUT
  --keep           keep each run's directory (store, logs) in OUT/failed, as
                   for every run that was wrong
  --assert         exit 1 when a target is missed
  --report         only print the matrix of the runs done so far
  --list           print the plan (one run a line) and exit

Binaries: --agent, --collector, --cli, --bench FILE and --monitors DIR, else
$MKS_AGENT_BIN, $MKS_COLLECTOR_BIN, $MKS_CLI_BIN, $MKS_BENCH_BIN and
$MKS_MONITORS_DIR when set, else from --build.

EXAMPLES
  bench/accuracy.sh --jobs 2                  # the matrix (docs/RESULTS.md)
  bench/accuracy.sh --subset ci --assert      # what ctest runs
  bench/accuracy.sh --report                  # the matrix of the runs so far
  bench/accuracy.sh --subset ci --hog clean   # the CI subset, its clean runs on a loaded host
USAGE
}

root=$(cd "$(dirname "$0")/.." && pwd)
here=$root/bench/accuracy
build=$root/build out="" subset=full jobs=1 seeds=3 ranks_list="2 4 8" steps=30
long_steps=10000 hog=none fresh=0 calibrate=0 keep=0 assert=0 report_only=0 list=0 one="" ranks_given="" seeds_given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --subset) subset=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --seeds) seeds=$2; seeds_given=1; shift 2 ;;
    --ranks) ranks_list=$2; ranks_given=1; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --long-steps) long_steps=$2; shift 2 ;;
    --hog) hog=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --calibrate) calibrate=1; shift ;;
    --keep) keep=1; shift ;;
    --assert) assert=1; shift ;;
    --report) report_only=1; shift ;;
    --list) list=1; shift ;;
    --agent) export MKS_AGENT_BIN=$2; shift 2 ;;
    --collector) export MKS_COLLECTOR_BIN=$2; shift 2 ;;
    --cli) export MKS_CLI_BIN=$2; shift 2 ;;
    --bench) export MKS_BENCH_BIN=$2; shift 2 ;;
    --monitors) export MKS_MONITORS_DIR=$2; shift 2 ;;
    --one) one=$2; shift 2 ;; # internal: run one line of the plan
    -h|--help) usage; exit 0 ;;
    *) echo "accuracy: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
case "$subset" in full|ci) ;; *) echo "accuracy: --subset wants full or ci" >&2; exit 2 ;; esac
case "$hog" in none|clean|all) ;; *) echo "accuracy: --hog wants clean, all or none" >&2; exit 2 ;; esac
[ "$subset" = ci ] && [ -z "$ranks_given" ] && ranks_list=4
[ "$subset" = ci ] && [ -z "$seeds_given" ] && seeds=4
for v in "$jobs" "$seeds" "$steps" "$long_steps"; do
  case "$v" in ''|*[!0-9]*) echo "accuracy: --jobs, --seeds, --steps, --long-steps want numbers" >&2; exit 2 ;; esac
done
[ "$steps" -ge 30 ] || { echo "accuracy: --steps must be at least 30" >&2; exit 2; }
[ "$jobs" -ge 1 ] && [ "$seeds" -ge 1 ] || { echo "accuracy: --jobs and --seeds must be at least 1" >&2; exit 2; }
command -v jq >/dev/null || { echo "accuracy: jq is missing (deploy/install-deps.sh)" >&2; exit 1; }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "accuracy: no build tree $build" >&2; exit 1; }
[ -n "$out" ] || out=$build/accuracy
export MKS_AGENT_BIN=${MKS_AGENT_BIN:-$build/agent/mkscope-agent}
export MKS_COLLECTOR_BIN=${MKS_COLLECTOR_BIN:-$build/collector/mkscope-collector}
export MKS_BENCH_BIN=${MKS_BENCH_BIN:-$build/bench/mkscope-bench}
export MKS_MONITORS_DIR=${MKS_MONITORS_DIR:-$build/agent/monitors}
cli_bin=${MKS_CLI_BIN:-$build/collector/cli/mkscope}
launch=$root/deploy/local/mkscope-launch
for b in "$MKS_AGENT_BIN" "$MKS_COLLECTOR_BIN" "$MKS_BENCH_BIN" "$cli_bin"; do
  [ -x "$b" ] || { echo "accuracy: $b missing: build first" >&2; exit 1; }
done

# ---- the plan ---------------------------------------------------------------
# One line a run: ID RANKS MODE SEED STEPS SPEC (SPEC "none": clean).
# Classes each type applies to; "expert" is the faulty rank's first expert.
# notify-delay on sample is left out: sample's release starts the next step,
# outside the step the diagnosis times (docs/RESULTS.md).
classes() {
  case "$1" in
    task-delay) echo "rmsnorm qkv_proj attention o_proj allreduce_send allreduce_reduce moe_router moe_combine lm_head sample expert" ;;
    queue-oversub) echo "rmsnorm qkv_proj attention o_proj allreduce_send allreduce_reduce moe_router moe_combine lm_head sample" ;;
    notify-delay) echo "allreduce_send rmsnorm qkv_proj attention o_proj allreduce_reduce moe_router moe_combine lm_head" ;;
    tile-starve) echo "qkv_proj o_proj lm_head" ;;
    comm-delay) echo "all gen1" ;;
    moe-skew) echo "expert" ;;
    slow-rank) echo "rank" ;;
  esac
}
ci_class() {
  case "$1" in
    task-delay) echo o_proj ;; queue-oversub|tile-starve) echo qkv_proj ;;
    notify-delay) echo allreduce_send ;; comm-delay) echo all ;; moe-skew) echo expert ;;
    slow-rank) echo rank ;;
  esac
}
types="task-delay moe-skew notify-delay queue-oversub comm-delay tile-starve slow-rank"
short() {
  case "$1" in
    task-delay) echo td ;; moe-skew) echo ms ;; notify-delay) echo nd ;; queue-oversub) echo qo ;;
    comm-delay) echo cd ;; tile-starve) echo ts ;; slow-rank) echo sr ;;
  esac
}
# Magnitudes as multiples of the clean step: windowed faults from about
# one step more (near the noise floor of a loaded machine) to 20 steps;
# persistent ones from half a step (the straggler's peers wait that much
# every step; a loaded machine slows one rank by a fifth of a step for tens
# of steps on its own) to 4 steps.
mults_windowed="1.5 5 20" mults_persistent="0.5 1 4"
plan() {
  local t c R mode s mi mults cls spec rank key lo hi k=0
  for R in $ranks_list; do
    for s in $(seq 1 "$seeds"); do
      [ "$subset" = ci ] && [ "$s" -gt 2 ] && continue
      echo "clean.r$R.s$s $R clean $s $steps none"
    done
    if [ "$long_steps" -gt 0 ] && { [ "$subset" = full ] || [ "$R" = 4 ]; }; then
      local ls=$long_steps
      [ "$subset" = ci ] && ls=$((long_steps < 1000 ? long_steps : 1000))
      echo "clean.r$R.long $R clean 1 $ls none"
    fi
    for t in $types; do
      [ "$t" = comm-delay ] && [ "$R" -lt 2 ] && continue
      cls=$(classes "$t")
      [ "$subset" = ci ] && cls=$(ci_class "$t")
      for c in $cls; do
        for mode in windowed persistent; do
          if [ "$mode" = windowed ]; then mults=$mults_windowed; else mults=$mults_persistent; fi
          # the CI subset takes the large magnitude: it must hold on a loaded
          # machine; the matrix covers the rest
          [ "$subset" = ci ] && mults=$(echo "$mults" | cut -d' ' -f3)
          mi=0
          for m in $mults; do
            mi=$((mi + 1))
            for s in $(seq 1 "$seeds"); do
              # four seeds (four faulty ranks a cell, 56 faulty runs): with
              # fewer, one confident wrong answer in about 30 runs is 3% and
              # the 2% false-confidence target cannot be told from chance
              [ "$subset" = ci ] && [ "$s" -gt 4 ] && continue
              # (the subset's second seed stays in its cell's count: the
              # faulty rank then differs between the two)
              [ "$subset" = ci ] && [ "$s" -gt 1 ] || k=$((k + 1))
              # the faulty rank moves around: no rank's peculiarity passes
              # for a diagnosis
              rank=$(( (s * 7 + k * 3 + mi) % R ))
              key="rank=$rank"
              case "$c" in
                all|rank) ;;
                gen1) key="$key,gen=1" ;;
                expert) [ "$t" = moe-skew ] || key="$key,class=expert.$rank" ;;
                *) key="$key,class=$c" ;;
              esac
              lo=$((steps / 3)) hi=$((steps / 3 + 4))
              if [ "$mode" = windowed ]; then key="$key,steps=$lo-$hi"; fi
              echo "$(short "$t").$c.m$mi.r$R.${mode:0:1}.s$s $R $mode $s $steps $t:$key,magnitude=@$m"
            done
          done
        done
      done
    done
  done
}

if [ "$list" = 1 ]; then plan; exit 0; fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
[ "$fresh" = 1 ] && rm -rf "$out/runs" "$out/work" "$out/failed" "$out"/base-*
mkdir -p "$out/runs" "$out/work"

# ---- one run ----------------------------------------------------------------

stop_collector() {
  local p
  p=$(cat "$1/collector.pid" 2>/dev/null) || return 0
  kill -TERM -- "-$p" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$p" 2>/dev/null || true
}

# base R: the clean step (us) at R ranks with agents attached, measured
# once: the median of three runs' median steps (a burst of the machine's
# load can make one run's steps many times longer)
base_of() {
  local R=$1 f=$out/base-$1 d i
  if [ ! -s "$f" ] && [ "$calibrate" = 0 ]; then
    # the clean steps of a quiet moment of this 2-core machine (agents
    # attached, 5 ms epochs): the plan stays the same from run to run
    case "$R" in 1) echo 600 ;; 2) echo 800 ;; 4) echo 1200 ;; 8) echo 3000 ;;
      *) echo $((R * 400)) ;; esac >"$f"
  fi
  if [ ! -s "$f" ]; then
    for i in 1 2 3; do
      d=$out/work/base-r$R.$i.$$
      rm -rf "$d"
      "$launch" --ranks "$R" --steps "$steps" --dir "$d" --epoch-ms 5 --job "accbase$R$i$$" -q \
        -- --seed 1 >/dev/null
      jq '[.ranks[].step_ns[]] | sort | .[length / 2 | floor] / 1000 | floor' "$d/bench.json"
      rm -rf "$d"
    done | sort -n | sed -n 2p >"$f.tmp"
    mv "$f.tmp" "$f"
  fi
  cat "$f"
}

# The CPU hog of --hog: until DIR/hog.stop exists, bursts of a busy loop
# on every core (each ends by itself, so nothing is left behind).
hog_loop() {
  local stop=$1 n i
  n=$(nproc)
  RANDOM=$2
  while [ ! -e "$stop" ]; do
    sleep "0.$((RANDOM % 5 + 1))"
    for i in $(seq "$n"); do
      timeout "0.$(printf '%02d' $((RANDOM % 11 + 5)))" sh -c 'while :; do :; done' &
    done
    wait
  done
}

run_one() {
  local id=$1 R=$2 mode=$3 seed=$4 st=$5 spec=$6
  local score=$out/runs/$id.score d=$out/work/$id job
  [ -s "$score" ] && return 0
  if [[ "$spec" == *@* ]]; then
    local m=${spec##*@} base
    base=$(base_of "$R")
    spec="${spec%@*}$(awk -v m="$m" -v b="$base" 'BEGIN { printf "%d", m * b }')"
  fi
  job=$(echo "acc$id" | tr -c 'A-Za-z0-9_.\n-' '_' | cut -c1-48)
  rm -rf "$d"
  mkdir -p "$d"
  local fa=() hook_launch=() hook_bench=() a side=launch
  [ "$spec" = none ] || fa=(--fault "$spec")
  if [ -n "${MKS_ACC_HOOK:-}" ]; then
    local hook_out
    hook_out=$("$MKS_ACC_HOOK" args "$id" "$R" "$mode" "$seed" "$st" "$spec" "$d") ||
      { echo "accuracy: run $id: $MKS_ACC_HOOK args failed" >&2; return 1; }
    while IFS= read -r a; do
      [ -n "$a" ] || continue
      if [ "$a" = -- ]; then side=bench
      elif [ "$side" = launch ]; then hook_launch+=("$a")
      else hook_bench+=("$a"); fi
    done <<<"$hook_out"
  fi
  local hog_pid="" launched=0
  if [ "$hog" = all ] || { [ "$hog" = clean ] && [ "$spec" = none ]; }; then
    hog_loop "$d/hog.stop" "$seed" >/dev/null 2>&1 &
    hog_pid=$!
  fi
  "$launch" --ranks "$R" --steps "$st" --dir "$d" --epoch-ms 5 --keep-collector -q \
      --job "$job" "${fa[@]}" "${hook_launch[@]}" -- --truth "$d/truth.json" --seed "$seed" \
      "${hook_bench[@]}" >/dev/null 2>"$d/launch.err" && launched=1
  if [ -n "$hog_pid" ]; then
    touch "$d/hog.stop"
    wait "$hog_pid" 2>/dev/null || true
  fi
  if [ "$launched" = 0 ]; then
    stop_collector "$d"
    echo "accuracy: run $id failed: $(tail -n 3 "$d/launch.err" | tr '\n' ' ')" >&2
    return 1
  fi
  # the diagnosis as a user asks for it (deploy/demo.sh does the same)
  if ! "$cli_bin" --collector "ipc://$d/cli" --job "$job" --timeout 60000 -f json diagnose \
      --min-steps 3 >"$d/diag.jsonl" 2>"$d/diag.err"; then
    stop_collector "$d"
    echo "accuracy: run $id: diagnose failed: $(cat "$d/diag.err")" >&2
    return 1
  fi
  stop_collector "$d"
  jq -s . "$d/diag.jsonl" >"$d/diag.json"
  if [ -n "${MKS_ACC_HOOK:-}" ] && ! "$MKS_ACC_HOOK" post "$id" "$d" "$out/runs" 2>"$d/hook.err"; then
    echo "accuracy: run $id: $MKS_ACC_HOOK post failed: $(tail -n 3 "$d/hook.err" | tr '\n' ' ')" >&2
    return 1
  fi
  jq -n -c --argjson diag "$(cat "$d/diag.json")" --argjson truth "$(cat "$d/truth.json")" \
    -f "$here/score.jq" | jq -c --arg id "$id" --arg spec "$spec" '. + {id: $id, spec: $spec}' \
    >"$score.tmp"
  mv "$score.tmp" "$score"
  # a wrong or confident-wrong answer keeps its store and logs for a look
  if [ "$keep" = 1 ] || jq -e '.false_conf or (.clean == false and .correct == false)' "$score" \
      >/dev/null; then
    mkdir -p "$out/failed"
    rm -rf "$out/failed/$id"
    mv "$d" "$out/failed/$id"
  else
    rm -rf "$d"
  fi
}

if [ -n "$one" ]; then
  # shellcheck disable=SC2086
  run_one $one
  exit $?
fi

# ---- all runs, then the matrix ----------------------------------------------

report() {
  local files
  files=$(find "$out/runs" -name '*.score' | sort)
  [ -n "$files" ] || { echo "accuracy: no runs scored yet in $out/runs" >&2; return 1; }
  # shellcheck disable=SC2086
  jq -s . $files >"$out/scores.json"
  jq -r -f "$here/report.jq" "$out/scores.json"
  echo
  jq -r -f "$here/targets.jq" "$out/scores.json" | tee "$out/targets.txt"
}

if [ "$report_only" = 0 ]; then
  # calibrate the rank counts first (one at a time, so the runs that follow
  # in parallel do not race to measure)
  for R in $ranks_list; do base_of "$R" >/dev/null; done
  total=$(plan | wc -l)
  todo=$(plan | while read -r id _; do [ -s "$out/runs/$id.score" ] || echo "$id"; done | wc -l)
  echo "accuracy: $total runs in the plan, $todo to do, $jobs at a time (results in $out)" >&2
  t0=$SECONDS
  failed=0
  # in a fixed shuffled order: a matrix cut short still covers every kind
  # of run
  plan | sort -R --random-source=<(yes) | while read -r line; do
    id=${line%% *}
    [ -s "$out/runs/$id.score" ] || printf '%s\0' "$line"
  done | xargs -0 -r -P "$jobs" -I{} "$0" --build "$build" --out "$out" --steps "$steps" \
    --hog "$hog" --one "{}" $([ "$keep" = 1 ] && echo --keep) || failed=1
  echo "accuracy: done in $((SECONDS - t0)) s" >&2
  [ "$failed" = 0 ] || echo "accuracy: some runs failed (see above); run again to retry them" >&2
fi
report
if [ "$assert" = 1 ] && grep -q '^FAIL' "$out/targets.txt"; then exit 1; fi
exit 0
