#!/usr/bin/env bash
# A job as a user runs it: 4 CPU ranks of the reference megakernel with their
# agents at the default epoch, steps paced to 20 ms.  Then:
#   - every query example of docs/query.md, README.md and docs/cli.md (taken
#     from those files, so they cannot drift apart) answers with rows, and
#     with values that are plausible against the megakernel's own record
#     (bench.json): counts equal, step times near its own, idle time within
#     the step, waits on every peer;
#   - the other documented commands answer (status, diagnose, waitchain as
#     a graph, sql);
#   - a trigger on p99(step) and one on max(run), their thresholds set from
#     this machine's clean step and run times (so a loaded machine moves
#     both), fire on a faulted run and not on a clean one (600 unpaced
#     steps each); a trigger
#     escalates once within its hold-off, the escalation is listed by
#     `mkscope trace list` and its trace lands in --trace-dir;
#   - the same collector restarted on its store with a detail window of a
#     second rolls every epoch up: counts, sums and maxima answer as before,
#     answers say what is rolled up, a step filter and the diagnosis say
#     the steps are rolled up.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is missing: run deploy/install-deps.sh" >&2; exit 1; }

pace_us=20000
start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
  --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics off --db "$dir/store.db" \
  --ucx-port 0 --trace-dir "$dir/traces/new"
collector_pid=$started
for _ in $(seq 100); do [ -S "$dir/cli" ] && break; sleep 0.1; done
[ -d "$dir/traces/new" ] || fail "--trace-dir was not created at start"

# job NAME ARGS...: one job of 4 ranks (60 steps unless ARGS say), its files
# in $dir/NAME
job() {
  local name=$1; shift
  mkdir -p "$dir/$name"
  "$launch" --ranks 4 --job "$name" --dir "$dir/$name" --collector "ipc://$dir/ingest" \
    --steps 60 -q "$@" -- --step-interval-us "$pace_us" >/dev/null
}
# num JSON FILTER: a number from the CLI's answer (fails on null)
num() { jq -e "$2" <<<"$1" || fail "no number for $2 in: $1"; }

# The examples read per-step detail: a job the collector made its agents
# coarsen (its ingest pressure on a loaded machine) is run again, twice at
# most, rather than taken for an answer.
for cal in cal cal_b cal_c; do
  job "$cal"
  coarse=$(cli -f json sql "SELECT COUNT(*) AS n FROM epochs WHERE job = '$cal' AND detail_tier < 2" |
    jq '.rows[0].n')
  [ "$coarse" = 0 ] && break
  echo "job $cal: $coarse summaries coarsened by the collector's pressure; again"
done
if [ "$coarse" != 0 ]; then
  echo "SKIP: this machine is too loaded: the collector's pressure coarsened every calibration" \
    "job's summaries (the examples need per-step detail)" >&2
  exit 77
fi


# ---- every documented query ------------------------------------------------
examples=$(
  { awk '/^Examples:/ { on = 1; next } on && /^    / { sub(/^    /, ""); print; seen = 1; next }
         on && seen { exit }' "$root/docs/query.md"
    grep -ho "mkscope query '[^']*'" "$root/README.md" "$root/docs/cli.md" |
      sed "s/^mkscope query '//; s/'\$//"
  } | sort -u)
[ "$(wc -l <<<"$examples")" -ge 6 ] || fail "found only these examples: $examples"
while IFS= read -r q; do
  out=$(cli --job "$cal" -f json query "$q" 2>"$dir/q.err") ||
    fail "example '$q' failed: $(cat "$dir/q.err")"
  rows=$(jq '.rows | length' <<<"$out")
  [ "$rows" -ge 1 ] || fail "example '$q' answered no rows"
  # Every aggregate of every row is a number, none negative or absurd (a
  # latency beyond 10 s, a count of 0 where rows exist).
  bad=$(jq -r --argjson g "$(jq .group_columns <<<"$out")" '
    .columns[$g:] as $aggs | .rows[] | . as $r | $aggs[] | . as $a | $r[$a] |
    select(type != "number" or . < 0 or . > 1e10 or ($a | startswith("count")) and . == 0) |
    "\($a) = \(.)"' <<<"$out" | head -3)
  [ -z "$bad" ] || fail "example '$q': $bad"
  cov=$(jq '.coverage.ratio' <<<"$out")
  [ "$cov" = 1 ] || [ "$cov" = 1.0 ] || fail "example '$q': coverage $cov on a clean run"
  echo "ok query '$q' ($rows rows)"
done <<<"$examples"

bench=$dir/$cal/bench.json
# Counts: the collector's per-class counts of rank 1 are the megakernel's.
want=$(jq -c '[.ranks[1].class_counts | to_entries[] | select(.value > 0)] | from_entries' "$bench")
got=$(cli -f json query 'count(task) by class where rank = 1' |
  jq -c '[.rows[] | {key: .class, value: .["count(task)"]}] | from_entries')
[ "$(jq -S . <<<"$want")" = "$(jq -S . <<<"$got")" ] || fail "counts of rank 1: $got, bench $want"
# Step times: each rank's median (first task start to last task end) within
# the megakernel's own step time (which also holds the dispatch before the
# first task: on a loaded machine much of it), and not below a quarter of
# it; every complete step there (60, the first included).
steps=$(cli -f json query 'p50(step), count(step) by rank')
for r in 0 1 2 3; do
  mine=$(num "$steps" ".rows[] | select(.rank == $r) | .[\"p50(step)\"]")
  n=$(num "$steps" ".rows[] | select(.rank == $r) | .[\"count(step)\"]")
  theirs=$(jq "[.ranks[$r].step_ns[]] | sort | .[length / 2 | floor]" "$bench")
  [ "$n" = 60 ] || fail "rank $r: $n complete steps, the run had 60"
  awk -v a="$mine" -v b="$theirs" 'BEGIN { exit !(a > b / 4 && a < b * 1.1) }' ||
    fail "rank $r: median step $mine ns, the megakernel's $theirs ns"
done
echo "ok steps: 60 complete per rank, medians within the megakernel's own"
# Idle time of step 37 lies within the step, on every rank and worker.
idle=$(cli -f json query 'max(idle), min(idle), count(idle) by rank where step = 37')
span=$(cli -f json query 'max(step) by rank where step = 37')
for r in 0 1 2 3; do
  hi=$(num "$idle" ".rows[] | select(.rank == $r) | .[\"max(idle)\"]")
  s=$(num "$span" ".rows[] | select(.rank == $r) | .[\"max(step)\"]")
  awk -v a="$hi" -v b="$s" 'BEGIN { exit !(a <= b) }' || fail "rank $r: idle $hi ns > step $s ns"
done
[ "$(jq '[.rows[]."count(idle)"] | min' <<<"$idle")" -ge 1 ] || fail "no worker rows: $idle"
# Waits: every rank waited on each of its three peers.
[ "$(cli -f json query 'count(remote_wait) by rank, peer' | jq '.rows | length')" = 12 ] ||
  fail "remote waits are not on every (rank, peer)"
# Maxima are sent and stored: a class's longest task is at least its mean.
mx=$(cli -f json query 'max(run), mean(run), max(queue) by class where rank = 0')
jq -e '[.rows[] | select(.["max(run)"] < .["mean(run)"] or .["max(run)"] == 0)] | length == 0' \
  <<<"$mx" >/dev/null || fail "max(run) below mean(run) or zero: $mx"
echo "ok counts, idle, waits and maxima agree with the run"

# What the roll-up must keep: answered again at the end.
keep_q=('count(task), sum(run), max(run) by rank, class' 'count(remote_wait), sum(remote_wait),'\
' max(remote_wait) by rank, peer' 'count(step), sum(step), max(step), min(step) by rank'
        'sum(idle), sum(busy) by rank')
for i in "${!keep_q[@]}"; do
  cli --job "$cal" -f json query "${keep_q[$i]}" | jq -c .rows >"$dir/keep$i.json" ||
    fail "query '${keep_q[$i]}'"
done

# ---- the other documented commands -------------------------------------------
cli status >"$dir/out.txt"
grep -q "job $cal" "$dir/out.txt" || fail "status does not name the job: $(cat "$dir/out.txt")"
cli -f json diagnose >/dev/null || fail "diagnose failed"
cli -f dot waitchain --step 37 >"$dir/out.txt"
grep -q digraph "$dir/out.txt" || fail "waitchain -f dot is not a graph: $(head -5 "$dir/out.txt")"
[ "$(cli -f json sql 'SELECT rank, COUNT(*) FROM epochs GROUP BY rank' | jq '.rows | length')" -ge 4 ] ||
  fail "the sql example"
echo "ok status, diagnose, waitchain, sql"

# ---- triggers against this machine's clean times ----------------------------------
# Unpaced runs of 600 steps, so that a one-second evaluation window holds
# hundreds of steps and one step a loaded machine stalls is not its p99.
# Thresholds well above a clean run's own (three times it plus 50 ms: a
# shared machine stalls a step now and then; the first steps warm up and
# are left out), the fault well above the thresholds; the max(run) trigger
# watches one rank (a stall of a task is not a fault either).
jobu() { local name=$1; shift; pace_us=0 job "$name" --steps 600 "$@"; }
jobu cal2
p=$(num "$(cli --job cal2 -f json query 'p99(step) where step >= 5')" '.rows[0]["p99(step)"]')
m=$(num "$(cli --job cal2 -f json query 'max(run) where class = "attention" and rank = 1')" \
  '.rows[0]["max(run)"]')
t_step=$(awk -v p="$p" 'BEGIN { printf "%d", 3 * p + 50e6 }')
t_run=$(awk -v m="$m" 'BEGIN { printf "%d", 3 * m + 50e6 }')
# task-delay spreads the magnitude over the class's tasks of a step (two
# layers, a few waves of workers): ten times the larger threshold puts each
# delayed task above t_run and each faulted step far above t_step.
mag_us=$(awk -v a="$t_step" -v b="$t_run" 'BEGIN { x = a > b ? a : b; printf "%d", 10 * x / 1000 }')
echo "clean p99(step) $p ns, max(run) of attention on rank 1 $m ns: thresholds $t_step /" \
  "$t_run ns, fault $mag_us us a step"
sleep 2 # the calibration run's last summaries are evaluated before the triggers exist
cli trigger add "p99(step) > ${t_step}ns where step >= 5" >/dev/null
cli trigger add "max(run) > ${t_run}ns where class = \"attention\" and rank = 1" >/dev/null
fired() { cli -f json trigger list | jq '[.triggers[].fired] | add'; }

jobu clean
sleep 2
[ "$(fired)" = 0 ] || fail "a trigger fired on a clean run: $(cli trigger list)"
echo "ok no trigger fired on a clean run"

jobu faulted --fault "task-delay:rank=1,class=attention,magnitude=$mag_us,steps=300-311"
sleep 2
list=$(cli -f json trigger list)
jq -e '[.triggers[] | select(.fired >= 1)] | length == 2' <<<"$list" >/dev/null ||
  fail "not both triggers fired on the faulted run: $list"
# One escalation per trigger within the hold-off, however often it fired.
jq -e '[.triggers[] | select(.escalations == 1)] | length == 2' <<<"$list" >/dev/null ||
  fail "escalations are not one per trigger: $list"
echo "ok both triggers fired on the faulted run, each escalated once"
esc=$(cli --job faulted -f json trace list)
[ "$(jq '.escalations | length' <<<"$esc")" = 2 ] || fail "trace list: $esc"
jq -e '[.escalations[] | select(.ranks_asked >= 1)] | length == 2' <<<"$esc" >/dev/null ||
  fail "trace list names no ranks asked: $esc"
for _ in $(seq 50); do
  ls "$dir/traces/new"/mkscope-faulted-*.json >/dev/null 2>&1 && break
  sleep 0.2
done
ls "$dir/traces/new"/mkscope-faulted-*.json >/dev/null 2>&1 ||
  fail "no trace in --trace-dir: $esc"
echo "ok trace list and --trace-dir hold the escalation"

# ---- the roll-up past the detail window ----------------------------------------
kill -TERM "$collector_pid"
for _ in $(seq 300); do kill -0 "$collector_pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$collector_pid" 2>/dev/null || fail "the collector did not stop within 30 s"
rm -f "$dir/cli"
start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
  --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics off --db "$dir/store.db" \
  --ucx-port 0 --detail-age 1s
collector_pid=$started
for _ in $(seq 100); do [ -S "$dir/cli" ] && break; sleep 0.1; done
# No agent sends: the collector's idle loop rolls up, a pass a second.
for _ in $(seq 60); do
  left=$(cli -f json sql "SELECT COUNT(*) AS n FROM epochs WHERE compacted < 2" 2>/dev/null |
    jq '.rows[0].n') || left=x
  [ "$left" = 0 ] && break
  sleep 0.5
done
[ "$left" = 0 ] || fail "$left epochs not rolled up after 30 s"
for i in "${!keep_q[@]}"; do
  after=$(cli --job "$cal" -f json query "${keep_q[$i]}" | jq -c .rows)
  [ "$after" = "$(cat "$dir/keep$i.json")" ] ||
    fail "'${keep_q[$i]}' after the roll-up: $after; before: $(cat "$dir/keep$i.json")"
done
# (answers to files first: grep -q leaving early would fail the pipe)
cli --job "$cal" query 'count(task) by class' >"$dir/rolled.txt"
grep -q "is rolled up per rank and minute" "$dir/rolled.txt" ||
  fail "an answer over rolled-up epochs does not say so: $(cat "$dir/rolled.txt")"
rc=0
cli --job "$cal" query 'count(task) where step = 37' >/dev/null 2>"$dir/q.err" || rc=$?
[ "$rc" = 4 ] && grep -q "steps up to 59 are rolled up" "$dir/q.err" ||
  fail "a step filter over rolled-up steps (exit $rc): $(cat "$dir/q.err")"
cli --job "$cal" diagnose >"$dir/rolled.txt"
grep -q "rolled up per minute" "$dir/rolled.txt" ||
  fail "diagnose of rolled-up steps: $(cat "$dir/rolled.txt")"
echo "ok the roll-up keeps counts, sums and maxima and says what is rolled up"
