#!/usr/bin/env bash
# mkscope diagnose end to end: 4 CPU ranks of the reference megakernel, an
# agent each, one collector.  For every fault type of the bench, one run with
# the fault on one rank; `mkscope diagnose -f json` must name the injected
# cause, rank and task class for most of the faulted steps, and some other
# rank must show the remote stall on the faulty one.  The bench's --truth
# file is read here only, never given to the collector.  A notify-delay on a
# local class (qkv_proj) must be named too, and four faults spread over the
# layers of a 4-layer model on 32 workers a rank.  A clean run must name no
# fault.  Last, 8 ranks in relay order give a chain of two hops.
#
# Faults add 50 ms to each of 5 steps whose usual time is 1-2 ms, far above
# what a loaded 2-core machine adds; agent epochs of 5 ms keep steps apart
# in the summaries.  A slow step that noise makes (a step or two, rarely
# more) may form its own group; the checks look for the fault's group, and
# a clean run may only show such small groups.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is missing: run deploy/install-deps.sh" >&2; exit 1; }

steps=60 first=20 last=24 mag=50000
start_collector
failed=0

# run NAME FAULT...: one job under the launcher ($ranks ranks, bench arguments
# $bench_extra); its diagnosis in $dir/NAME/diag.json
ranks=4 bench_extra=()
run() {
  local name=$1; shift
  local fa=() f
  for f in "$@"; do fa+=(--fault "$f"); done
  mkdir -p "$dir/$name"
  "$launch" --ranks $ranks --job "itd$name$$" --dir "$dir/$name" --collector "ipc://$dir/ingest" \
    --steps $steps --epoch-ms 5 "${fa[@]}" -q -- --truth "$dir/$name/truth.json" \
    "${bench_extra[@]}" >/dev/null ||
    fail "$name: the job failed"
  cli --job "itd$name$$" -f json diagnose >"$dir/$name/diag.json" || fail "$name: diagnose failed"
  jq -c '{cause, root: "\(.root.rank) \(.root.task_class)", steps,
          chain: [.chain[]? | "\(.rank):\(.cause)"], stalled: [.stalled[]? | .rank], reason}' \
    "$dir/$name/diag.json" | sed "s/^/  $name: /"
}

# check NAME CAUSES: the group of the truth's fault
check() {
  local name=$1 causes=$2
  local verdict
  verdict=$(jq -rn --slurpfile t "$dir/$name/truth.json" --arg causes "$causes" '
    ($t[0].faults[0]) as $f
    | [inputs] as $all
    | [$all[] | .root.task_class | strings | select(test("^class[0-9]+$"))] as $unnamed
    | [$all[] | select(.cause as $c | $causes | split(",") | index($c))
              | select(.root.rank == $f.rank and .root.task_class == $f.class)]
    | if ($unnamed | length) > 0
      then "task classes without names (\($unnamed | unique | join(","))): the collector has no task schema"
      elif ([.[].steps[] | select(. >= $f.steps[0] and . <= $f.steps[1] + 1)] | length) < 3
      then "fewer than 3 of the faulty steps are named \($causes) at rank \($f.rank), class \($f.class)"
      elif ([.[] | select((.chain[0].cause == "remote_stall" and (.chain | length) >= 2) or
                          ([.stalled[]?.chain[0].cause] | index("remote_stall")))] | length) == 0
      then "no rank shows a remote stall on rank \($f.rank)"
      else "ok" end' "$dir/$name/diag.json")
  if [ "$verdict" = ok ]; then
    echo "ok $name"
  else
    echo "FAIL $name: $verdict" >&2
    failed=1
  fi
}

faults=(
  "td task-delay slow_task"
  "nd notify-delay notify_delay"
  "qo queue-oversub local_imbalance"
  "ts tile-starve local_imbalance"
  "cd comm-delay slow_transfer"
  "ms moe-skew local_imbalance,slow_task"
)
r=0
for spec in "${faults[@]}"; do
  set -- $spec
  # the faulty rank moves around so that no rank's peculiarity passes for a diagnosis
  run "$1" "$2:rank=$((r % 3 + 1)),magnitude=$mag,steps=$first-$last"
  check "$1" "$3"
  r=$((r + 1))
done

# A notification postponed after a local task (qkv_proj releases its event
# for attention late): named at that rank with that class, from the local
# release records (the task ended on time, its release came late).
run nl "notify-delay:rank=2,class=qkv_proj,magnitude=$mag,steps=$first-$last"
check nl notify_delay

# A deeper graph on many workers, as on a GPU rank: 4 layers make 8
# all-reduces a step, and 32 workers a rank.  A fault's 50 ms is spread over
# the step's operators (about 6 ms each all-reduce, 12 ms each qkv_proj or
# o_proj): the waits and releases of the step's transfers must add up, and
# a slow or held class is named by its longest task or queue wait, a lower
# bound that stands above every other cause.
bench_extra=(--layers 4 --workers 32)
r=0
for spec in "td4 task-delay slow_task" "nd4 notify-delay notify_delay" \
  "qo4 queue-oversub local_imbalance" "cd4 comm-delay slow_transfer"; do
  set -- $spec
  run "$1" "$2:rank=$((r % 3 + 1)),magnitude=$mag,steps=$first-$last"
  check "$1" "$3"
  r=$((r + 1))
done
bench_extra=()

run clean
big=$(jq -s '[.[] | select(.cause != "undecided" and .cause != "none" and (.steps | length) >= 3)] | length' \
  "$dir/clean/diag.json")
if [ "$big" != 0 ]; then
  echo "FAIL clean: $big groups of 3 or more slow steps name a cause" >&2
  failed=1
else
  echo "ok clean"
fi

# Two hops: 8 ranks whose all-reduce contributions go out in relay order
# (rank r sends once rank r-1's has arrived), rank 5's scheduler imbalanced.
# Rank 7 waits on rank 6, which waits on rank 5: some chain must read
# 7 remote_stall -> 6 remote_stall -> 5 local_imbalance (qkv_proj).
# 8 ranks on 2 cores: steps are several times longer and noisier than at
# 4 ranks, so the fault is 3 times larger.
ranks=8 bench_extra=(--ar-relay)
run hops "queue-oversub:rank=5,magnitude=$((3 * mag)),steps=$first-$last"
check hops local_imbalance
hop=$(jq -rs '[.[] | select(.root.rank == 5 and .cause == "local_imbalance") | .chain, .stalled[]?.chain
               | [.[] | "\(.rank):\(.cause)"] | join(" ")]
              | map(select(test("7:remote_stall 6:remote_stall 5:local_imbalance$"))) | length' \
      "$dir/hops/diag.json")
if [ "$hop" -gt 0 ]; then
  echo "ok hops: 7 -> 6 -> 5"
else
  echo "FAIL hops: no chain 7 remote_stall -> 6 remote_stall -> 5 local_imbalance" >&2
  failed=1
fi
[ $failed = 0 ] || fail "diagnosis did not name every fault"
