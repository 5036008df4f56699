#!/usr/bin/env bash
# Every `mkscope probe` example of docs/probes.md against a real collector,
# agents and CPU ranks of the reference megakernel, its answer checked
# against what the megakernel itself recorded (mkscope-bench-obs: --json's
# per-rank class counts and per-step request generations, --truth's fault,
# --counters' per-step waits), never against another part of mkscope.
#
# Most examples get a job of their own whose agents attach nothing and
# whose ranks wait (--wait-agents) until the probe is attached, so that the
# probe sees the whole run: its counts must then equal the megakernel's
# exactly.  The last job runs with the standard monitors, unwaited for, and
# a probe with a window shorter than the job: it must run for its window.
# Every answer must keep coverage's books: per hook and rank, eligible =
# observed + throttled (+ lost, counted apart), matched <= observed.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is missing: run deploy/install-deps.sh" >&2; exit 1; }
obs_bin="$(dirname "$MKS_BENCH_BIN")/mkscope-bench-obs"
[ -x "$obs_bin" ] || { echo "SKIP: $obs_bin (the counters build of the bench) is not built" >&2; exit 77; }

ranks=2 steps=200 pace_us=5000 epoch_ms=100
start_collector
for _ in $(seq 100); do [ -S "$dir/cli" ] && break; sleep 0.1; done

# The examples of the page, which this test must all know.
docs_examples=$(grep -o "^\$ mkscope \(probe\|trigger add\) '.*" "$root/docs/probes.md" | sed 's/ *$//' | sort -u)
[ "$(wc -l <<<"$docs_examples")" -ge 5 ] || fail "docs/probes.md has too few examples: $docs_examples"
ran_examples=()

# job NAME ATTACH BENCH-ARGS...: one job of $ranks ranks (files in $dir/NAME),
# its agents attaching ATTACH ('' for nothing), started in the background
job() {
  local name=$1 attach=$2 r; shift 2
  mkdir -p "$dir/$name"
  for r in $(seq 0 $((ranks - 1))); do
    start "$dir/$name/agent-$r.log" "$MKS_AGENT_BIN" --job "$name" --rank "$r" \
      --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --monitors "$MKS_MONITORS_DIR" \
      --attach "$attach" --epoch-ms "$epoch_ms" --exit-with-app --stats "$dir/$name/agent-$r.json"
  done
  it_jobs+=("$name")
  start "$dir/$name/bench.log" "$obs_bin" run --ranks "$ranks" --job "$name" --json "$dir/$name/bench.json" \
    --counters "$dir/$name/ctr" --step-interval-us "$pace_us" "$@"
  bench_pid=$started
}
# registered NAME: wait until every rank of the job has registered (a probe
# goes to the ranks the collector knows when it is sent)
registered() {
  for _ in $(seq 200); do
    cli -f json sql "SELECT COUNT(DISTINCT rank) AS n FROM task_classes WHERE job = '$1'" |
      jq -e --argjson r $ranks '.rows[0].n == $r' >/dev/null && return 0
    sleep 0.1
  done
  fail "job $1: its $ranks ranks did not register within 20 s"
}
job_end() { # wait for the ranks, then their agents
  local i
  for i in $(seq 600); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$bench_pid" 2>/dev/null || true
  [ -s "$dir/$1/bench.json" ] || fail "job $1: the megakernel wrote no result: $(tail -3 "$dir/$1/bench.log")"
}

# probe NAME TEXT ARGS...: the example run as the page shows it, against job
# NAME; the text answer to $dir/NAME/probe.txt, the final JSON object in $a
probe() {
  local name=$1 text=$2; shift 2
  registered "$name"
  ran_examples+=("\$ mkscope probe '$text'${*:+ $*}")
  cli --job "$name" probe "$text" "$@" >"$dir/$name/probe.txt" 2>"$dir/$name/probe.err" ||
    fail "probe '$text' failed: $(cat "$dir/$name/probe.err")"
  local id
  id=$(sed -n 's/^probe \([0-9][0-9]*\) sent to .*/\1/p' "$dir/$name/probe.err" "$dir/$name/probe.txt" | head -1)
  [ -n "$id" ] || fail "probe '$text': no probe id in its output: $(head -3 "$dir/$name/probe.txt")"
  a=$(cli --job "$name" -f json probe --id "$id")
  [ "$(jq -r .state <<<"$a")" = done ] || fail "probe '$text': state $(jq -r .state <<<"$a")"
  books "$text"
  echo "--- probe '$text' $*" # and its final answer, the last one printed
  awk '/^probe [0-9]+: / { n = 0 } { b[n++] = $0 } END { for (i = 0; i < n; i++) print b[i] }' \
    "$dir/$name/probe.txt"
}

# Coverage's books, in every answer: per hook, per rank and in total.
books() {
  local bad
  bad=$(jq -r '[(.hooks[] | {w: "hook \(.hook)"} + .), (.ranks[] | {w: "rank \(.rank)"} + .),
                (.coverage | {w: "total"} + .)][] |
    select(.eligible != .observed + .throttled or .matched > .observed or .lost > .eligible or
           .observed == 0) |
    "\(.w): eligible \(.eligible), observed \(.observed), throttled \(.throttled), lost \(.lost), matched \(.matched)"' <<<"$a")
  [ -z "$bad" ] || fail "probe '$1': coverage does not add up: $bad"
  [ "$(jq '.coverage.overflowed' <<<"$a")" = 0 ] || fail "probe '$1': groups overflowed"
  [ "$(jq '[.ranks[] | select(.ended == "application ended" or .ended == "window")] | length' \
       <<<"$a")" = "$ranks" ] || fail "probe '$1': not every rank ended it: $(jq -c .ranks <<<"$a")"
}

# ---- the plan: nothing sent --------------------------------------------------
job plan latency --steps 400
registered plan
text='p99(wait), count() by channel, peer'
ran_examples+=("\$ mkscope probe '$text' --dry-run")
plan=$(cli --job plan -f json probe "$text" --dry-run) || fail "--dry-run failed"
jq -e '.dry_run == true and ([.hooks[].hook] | sort) == ["dep_wait_begin", "dep_wait_end"] and
       .cost > 0 and .cost <= .max_cost and .cost == ([.hooks[].cost] | max) and
       ([.maps[].name] | index("groups")) != null and .map_bytes > 0' <<<"$plan" >/dev/null ||
  fail "--dry-run plan: $(jq -c 'del(.hooks[].program)' <<<"$plan")"
[ "$(cli -f json sql "SELECT COUNT(*) AS n FROM probes" | jq '.rows[0].n')" = 0 ] ||
  fail "--dry-run stored a probe"
cli --job plan probe "$text" --dry-run >"$dir/plan.txt"
grep -q "worst-case cost" "$dir/plan.txt" || fail "the text plan names no cost: $(head -5 "$dir/plan.txt")"
echo "ok --dry-run: cost $(jq .cost <<<"$plan") of $(jq .max_cost <<<"$plan"), nothing stored"
# a probe above the budget is refused before anything runs
if cli --job plan probe "$text" --max-cost 20 --dry-run >/dev/null 2>"$dir/over.err"; then
  fail "a probe above --max-cost was accepted"
fi
grep -qi "cost" "$dir/over.err" || fail "refusal says nothing of the cost: $(cat "$dir/over.err")"
job_end plan

# ---- count() by rank, class: the megakernel's own class counts -------------------
job counts '' --steps "$steps" --wait-agents 20000
probe counts 'count() by rank, class where event = task_end' --for 30s
job_end counts
diff <(jq -r '.ranks[] | .rank as $r | .class_counts | to_entries[] | select(.value > 0) |
              "\($r) \(.key) \(.value)"' "$dir/counts/bench.json" | sort) \
     <(jq -r '.rows[] | "\(.rank) \(.class) \(.["count()"])"' <<<"$a" | sort) ||
  fail "count() by rank, class differs from the megakernel's counts (< bench, > probe)"
echo "ok counts equal the megakernel's on every rank and class"

# ---- one request generation ----------------------------------------------------
gen=12
job reqgen '' --steps "$steps" --wait-agents 20000
probe reqgen "hist(run) by class where req_gen = $gen" --for 30s
job_end reqgen
# Tasks carry a request generation only when they exist for a request:
# rmsnorm per layer, attention per layer and head, for each slot that holds
# the generation in a step, on every rank.
slots=$(jq --argjson g $gen '[.steps[].req_gen[] | select(. == $g)] | length' "$dir/reqgen/bench.json")
layers=$(jq .config.layers "$dir/reqgen/bench.json") heads=$(jq .config.heads "$dir/reqgen/bench.json")
[ "$slots" -gt 0 ] || fail "request generation $gen never ran: pick another"
want=$(jq -n -c --argjson s "$slots" --argjson l "$layers" --argjson h "$heads" --argjson r $ranks \
  '{attention: ($s * $l * $h * $r), rmsnorm: ($s * $l * $r)}')
got=$(jq -c '[.rows[] | {(.class): .["hist(run)"].count}] | add' <<<"$a")
[ "$got" = "$want" ] || fail "req_gen = $gen: $got tasks, the megakernel ran $want"
jq -e 'all(.rows[]; .["hist(run)"].sum > 0 and (.["hist(run)"].buckets | add) == .["hist(run)"].count)' \
  <<<"$a" >/dev/null || fail "req_gen = $gen: histogram buckets do not add up to the count"
echo "ok request generation $gen: $got, as the megakernel's steps say"

# ---- dependency waits longer than 20 us, per dependency event --------------------
mag=3000
job depwait '' --steps "$steps" --wait-agents 20000 \
  --fault "comm-delay:rank=1,gen=1,magnitude=$mag,steps=all" --truth "$dir/depwait/truth.json"
probe depwait 'count() by dep_event where event = dep_wait_end and wait > 20us' --for 30s
job_end depwait
# The fault: rank 1's transfers of one all-reduce complete $mag us late, so
# rank 0, in step with rank 1 since the all-reduce before, waits that long
# on rank 1's inbox (dep_event 1<<63 | dst<<16 | src) at least once a
# step; and no more often than the runtime counted waits there at all.
# (Rank 1 then waits on rank 0, which is behind by that wait: the other
# inbox has long waits too, by design, so it is not compared.)
src=$(jq '.faults[0].rank' "$dir/depwait/truth.json")
faulted=$(jq '.faults[0].steps | .[1] - .[0] + 1' "$dir/depwait/truth.json")
inbox=$(printf '0x%x' $(((1 << 63) | (0 << 16) | src)))
n_in=$(jq --arg e "$inbox" '[.rows[] | select(.dep_event == $e) | .["count()"]] | add // 0' <<<"$a")
n_max_other=$(jq --arg e "$inbox" '[.rows[] | select(.dep_event != $e) | .["count()"]] | max // 0' <<<"$a")
[ "$n_in" -ge $((faulted * 9 / 10)) ] ||
  fail "waits > 20us on $inbox (rank $src's inbox, faulted): $n_in in $faulted faulted steps"
total=$(jq --argjson p "$src" '[.steps[].w[] | select(.[0] == $p) | .[1]] | add' "$dir/depwait/ctr.rank0.json")
[ "$n_in" -le "$total" ] || fail "$n_in long waits on rank $src but rank 0 waited on it $total times"
echo "ok dependency waits: $n_in long waits on $inbox in $faulted faulted steps (the other inbox $n_max_other); rank 0 waited on rank $src $total times"

# ---- routing imbalance and one communication phase --------------------------------
job skew '' --steps "$steps" --wait-agents 20000 \
  --fault "moe-skew:rank=1,magnitude=2000,steps=all" --truth "$dir/skew/truth.json"
probe skew 'sum(wait), count() by rank, channel, peer where event = dep_wait_end' --for 30s
job_end skew
# The hot expert is rank 1's, each of its steps there 2000 us longer, just
# before the MoE all-reduce (channel 2): its peer waits on it there about
# that long a step, while it hardly waits on its peer there.  (How long the
# attention all-reduce waits is the machine's load, not the fault's.)
owner=$(jq '.faults[0].rank' "$dir/skew/truth.json")
moe=$(jq -c --argjson o "$owner" '[.rows[] | select(.channel == 2)] | sort_by(-.["sum(wait)"])' <<<"$a")
jq -e --argjson o "$owner" '.[0].peer == $o and .[0].rank != $o' <<<"$moe" >/dev/null ||
  fail "the longest MoE all-reduce waits are not on the hot expert's owner: $moe"
jq -e --argjson min $((2000 * 1000 * steps / 2)) '.[0]["sum(wait)"] >= $min and
     .[0]["sum(wait)"] > 10 * ([.[1:][]["sum(wait)"]] | max // 0)' <<<"$moe" >/dev/null ||
  fail "the MoE all-reduce's wait on rank $owner is not the fault's: $moe"
top=$(jq -c '.[0]' <<<"$moe")
# every wait is counted: the megakernel's own per-peer wait counts
for r in $(seq 0 $((ranks - 1))); do
  want=$(jq '[.steps[].w[][1]] | add' "$dir/skew/ctr.rank$r.json")
  got=$(jq --argjson r "$r" '[.rows[] | select(.rank == $r) | .["count()"]] | add' <<<"$a")
  unk=$(jq --argjson r "$r" '.ranks[] | select(.rank == $r) | .unknown' <<<"$a")
  [ $((got + unk)) = "$want" ] || fail "rank $r: $got waits and $unk unknown, the megakernel waited $want times"
done
echo "ok routing imbalance: $top; the MoE all-reduce's others: $(jq -c '.[1:]' <<<"$moe")"

# ---- a window shorter than the job; a delayed class ------------------------------
mag=3000
layers=2 tiles=4 workers=2 # given: the job is stopped, it writes no bench.json
job window latency,depwait --steps 100000 --layers $layers --tiles $tiles --workers $workers \
  --fault "task-delay:rank=0,class=o_proj,magnitude=$mag,steps=all" --truth "$dir/window/truth.json"
for _ in $(seq 100); do
  cli -f json sql "SELECT COUNT(*) AS n FROM epochs WHERE job = 'window'" | jq -e '.rows[0].n > 0' \
    >/dev/null && break
  sleep 0.1
done
probe window 'hist(run) by rank where class = o_proj' --for 2s
kill -TERM -- "-$bench_pid" 2>/dev/null || true
ran=$(jq -c '[.ranks[].ran_ns]' <<<"$a")
jq -e 'all(.ranks[]; .ran_ns >= 2e9 and .ran_ns <= 2e9 + 1.5e9 and .ended == "window")' <<<"$a" \
  >/dev/null || fail "--for 2s ran $ran ns: $(jq -c .ranks <<<"$a")"
echo "ok --for 2s: ran $ran ns"
# Each o_proj task of rank 0 sleeps magnitude / (layers x waves) longer
# (docs/bench.md; a late wake is paid back by the worker's next sleep, so
# that is the mean, not a floor): the mean run at least that, most runs in
# its log2 bucket or the next; rank 1's o_proj tasks, unfaulted, mostly below it.
delay=$((mag * 1000 / (layers * ((tiles + workers - 1) / workers))))
b=0; while [ $((1 << b)) -le "$delay" ]; do b=$((b + 1)); done # the log2 bucket [2^(b-1), 2^b) of delay
jq -e --argjson b $b --argjson d "$delay" '.rows[] | select(.rank == 0) | .["hist(run)"] as $h |
     ($h.buckets | length) > $b and $h.sum >= 0.9 * $d * $h.count and
     ($h.buckets[$b] + ($h.buckets[$b + 1] // 0)) * 2 >= $h.count' \
  <<<"$a" >/dev/null || fail "rank 0's o_proj runs are not at the injected $delay ns: $(jq -c '.rows' <<<"$a")"
jq -e --argjson b $b '.rows[] | select(.rank == 1) | .["hist(run)"] as $h |
     ([$h.buckets[:$b][]] | add // 0) * 2 > $h.count' <<<"$a" >/dev/null ||
  fail "rank 1's o_proj runs are as slow as the faulted rank's: $(jq -c '.rows' <<<"$a")"
echo "ok o_proj on rank 0 at the injected $delay ns (bucket $b), rank 1 below"

# ---- only while an SLO is at risk: a trigger that starts a probe -------------------
# Rank 1's attention is 20 ms a step slower from step 200 to 399 (5 ms
# paced steps of about 1 ms before): p50(step) over a second of summaries
# crosses 10 ms only then.  The trigger starts its probe once, on the
# ranks that crossed and those they waited on, and its hold-off (5 min)
# keeps it from starting another.
job slo latency,depwait,queue,genprog --steps 100000 \
  --fault "task-delay:rank=1,class=attention,magnitude=20000,steps=200-399" --truth "$dir/slo/truth.json"
registered slo
slo_text='p50(step) > 10ms' slo_probe='mean(run), count() by rank where class = attention'
ran_examples+=("\$ mkscope trigger add '$slo_text' --probe '$slo_probe' --probe-for 2s")
cli --job slo trigger add "$slo_text" --probe "$slo_probe" --probe-for 2s >"$dir/slo/trigger.txt" ||
  fail "trigger add --probe failed"
pid=""
for _ in $(seq 300); do
  pid=$(cli -f json trigger list | jq -r '.triggers[] | select(.probe != null) | .last_probe // empty')
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || fail "the trigger never started its probe: $(cli trigger list)"
cli --job slo probe --id "$pid" >"$dir/slo/probe.txt" 2>&1 || fail "probe --id $pid: $(cat "$dir/slo/probe.txt")"
a=$(cli --job slo -f json probe --id "$pid")
kill -TERM -- "-$bench_pid" 2>/dev/null || true
books "$slo_probe"
echo "--- trigger add '$slo_text' --probe '$slo_probe' --probe-for 2s; probe --id $pid"
cat "$dir/slo/trigger.txt"; cli trigger list; cat "$dir/slo/probe.txt"
jq -e '.probes == 1 and .escalations == 0 and .probe_error == null' \
  <<<"$(cli -f json trigger list | jq '.triggers[] | select(.probe != null)')" >/dev/null ||
  fail "the trigger started more than one probe, or an escalation: $(cli -f json trigger list)"
# It sampled while the SLO was broken: rank 1's attention slowed by the
# fault (20 ms a step over its tasks: hundreds of microseconds each), a
# hundred times rank 0's clean ones.
jq -e '.ranks | map(.rank) | index(1) != null' <<<"$a" >/dev/null ||
  fail "the probe did not go to rank 1, the rank that crossed: $(jq -c .ranks <<<"$a")"
jq -e '(.rows | map({(.rank | tostring): .["mean(run)"]}) | add) as $m |
       $m["1"] >= 200e3 and $m["1"] >= 100 * $m["0"]' <<<"$a" >/dev/null ||
  fail "rank 1's attention is not the faulted one in the probe's window: $(jq -c .rows <<<"$a")"
jq -e 'all(.ranks[]; .ran_ns >= 2e9 and .ran_ns <= 3.5e9)' <<<"$a" >/dev/null ||
  fail "--probe-for 2s: ran $(jq -c '[.ranks[].ran_ns]' <<<"$a")"
echo "ok the SLO's probe $pid ran on ranks $(jq -c '[.ranks[].rank]' <<<"$a") while it was at risk"

# ---- a monitor of one's own, read back by name: mkscope maps ----------------------
# classrun.bpf.o (tests/integration/progs) counts task ends per (class,
# rank) in a hash map of structs; the ranks wait until it is attached, so
# its per-epoch dumps added up (--sum) are the megakernel's class counts.
if [ -n "${MKS_IT_USER_MONITOR:-}" ] && [ -f "$MKS_IT_USER_MONITOR" ]; then
  job usermon '' --steps 100 --wait-agents 20000
  registered usermon
  cli --job usermon attach "$MKS_IT_USER_MONITOR" --name classrun >"$dir/usermon/attach.txt" ||
    fail "attach of the user monitor failed: $(cat "$dir/usermon/attach.txt")"
  job_end usermon
  # the agents' last summaries (application ended) are in once both are gone
  for _ in $(seq 100); do pgrep -f "$dir/usermon/agent" >/dev/null || break; sleep 0.1; done
  m=$(cli --job usermon -f json maps classrun/by_class --sum) || fail "maps --sum failed"
  jq -e '.decoded == true and (.note == null)' <<<"$m" >/dev/null || fail "not decoded: $(jq -c 'del(.rows)' <<<"$m")"
  names=$(cli -f json sql "SELECT rank, id, name FROM task_classes WHERE job = 'usermon'" | jq -c '.rows')
  diff <(jq -r '.ranks[] | .rank as $r | .class_counts | to_entries[] | select(.value > 0) |
                "\($r) \(.key) \(.value)"' "$dir/usermon/bench.json" | sort) \
       <(jq -r --argjson n "$names" '.rows[] | .rank as $r | .key.task_class as $c |
                ($n[] | select(.rank == $r and .id == $c) | .name) as $name |
                "\($r) \($name) \(.value.tasks)"' <<<"$m" | sort) ||
    fail "maps classrun/by_class --sum differs from the megakernel's class counts (< bench, > maps)"
  jq -e 'all(.rows[]; .key.rank == .rank and (.value.kind == "CLASSRUN_COMPUTE" or
         .value.kind == "CLASSRUN_COMM") and .value.tag == "tasks" and .value.run_ns > 0)' <<<"$m" \
    >/dev/null || fail "decoded fields wrong: $(jq -c '.rows[0]' <<<"$m")"
  jq -e '[.rows[] | select(.value.kind == "CLASSRUN_COMM")] | length > 0' <<<"$m" >/dev/null ||
    fail "no communication class came out as CLASSRUN_COMM"
  cli --job usermon maps classrun/by_class >"$dir/usermon/maps.txt" || fail "maps (text) failed"
  ! grep -q '0x' "$dir/usermon/maps.txt" || fail "the text answer has hex: $(head -5 "$dir/usermon/maps.txt")"
  echo "--- mkscope maps classrun/by_class"; head -6 "$dir/usermon/maps.txt"
  if cli --job usermon maps classrun/nosuch 2>"$dir/usermon/err.txt"; then fail "a map the object lacks answered"; fi
  grep -q "has no map 'nosuch'; its maps: by_class" "$dir/usermon/err.txt" ||
    fail "no such map: $(cat "$dir/usermon/err.txt")"
  if cli --job usermon maps nosuch/by_class 2>"$dir/usermon/err.txt"; then fail "a program never attached answered"; fi
  grep -q "no program 'nosuch'.*classrun" "$dir/usermon/err.txt" ||
    fail "no such program: $(cat "$dir/usermon/err.txt")"
  echo "ok mkscope maps: $(jq '.rows | length' <<<"$m") (class, rank) entries decoded, their sums the megakernel's counts"
else
  echo "note: MKS_IT_USER_MONITOR unset (ctest sets it): mkscope maps not checked" >&2
fi

# ---- live answers: again as each rank's first result comes ------------------------
# Rank 0's agent ends an epoch every 100 ms, rank 1's every 1.5 s: rank 0's
# first result comes well before rank 1's.  The CLI prints as soon as the
# first is in and again as each other rank's first comes, not at the next
# --interval (60 s, past the window): some live answer before the final one
# has both ranks' results.
name=live
mkdir -p "$dir/$name"
it_jobs+=("$name")
for r in 0 1; do
  start "$dir/$name/agent-$r.log" "$MKS_AGENT_BIN" --job "$name" --rank "$r" \
    --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --attach '' \
    --epoch-ms $((r ? 1500 : 100)) --exit-with-app
done
start "$dir/$name/bench.log" "$obs_bin" run --ranks 2 --job "$name" --steps 100000 \
  --step-interval-us "$pace_us"
bench_pid=$started
registered "$name"
cli --job "$name" -f json probe 'count() by rank where event = task_end' --for 6s --interval 60 \
  >"$dir/$name/live.jsonl" || fail "probe -f json failed"
kill -TERM -- "-$bench_pid" 2>/dev/null || true
jq -s -e 'map(select(.final | not)) | any(.[]; [.ranks[] | select(.epochs > 0)] | length == 2)' \
  "$dir/$name/live.jsonl" >/dev/null ||
  fail "no live answer had both ranks' results before the end: $(jq -c '[.final, [.ranks[].epochs]]' "$dir/$name/live.jsonl")"
echo "ok live answers (ranks' epochs): $(jq -s -c 'map([.ranks[].epochs])' "$dir/$name/live.jsonl")"

# ---- the start reaches every rank at once, not with its next summary's ack -------
# Agents whose epochs (60 s, the longest) and heartbeats (10 min) do not
# end while the test runs: after registering and sending their first
# heartbeat they send nothing of their own, so the probe's command can only
# reach them because the collector tells them on the survey socket that it
# waits.  Every rank must have attached it (its reply stored) while none of
# them has closed an epoch, and the ranks, waiting for it, run every step
# under it: when the agents stop, its counts are the megakernel's.  (How
# many milliseconds that takes is measured by bench/probe_start.sh.)
name=pushed
mkdir -p "$dir/$name"
it_jobs+=("$name")
start "$dir/$name/bench.log" "$obs_bin" run --ranks "$ranks" --job "$name" --json "$dir/$name/bench.json" \
  --steps "$steps" --step-interval-us "$pace_us" --wait-agents 60000
bench_pid=$started
# An agent looks for its application at its first epoch tick (1 ms after it
# starts), then once an epoch: it starts once the control blocks are there,
# and again if it missed a block still being set up.
for _ in $(seq 100); do
  [ "$(ls /dev/shm/mkscope."$name".* 2>/dev/null | wc -l)" -ge "$ranks" ] && break
  sleep 0.1
done
# wait_n WANT TRIES SQL: until SQL's count (AS n) is WANT, TRIES tenths of a second at most; the count in $n
wait_n() {
  local want=$1 tries=$2 sql=$3
  for _ in $(seq "$tries"); do
    n=$(cli -f json sql "$sql" | jq '.rows[0].n')
    [ "$n" = "$want" ] && return 0
    sleep 0.1
  done
  return 1
}
declare -A agent_pid=()
heartbeats="SELECT COUNT(*) AS n FROM ranks WHERE job = '$name' AND last_heartbeat_ns IS NOT NULL"
for attempt in 1 2 3 4 5; do
  for r in $(seq 0 $((ranks - 1))); do
    [ -n "$(cli -f json sql "SELECT rank FROM ranks WHERE job = '$name' AND rank = $r AND last_heartbeat_ns IS NOT NULL" |
            jq -r '.rows[0].rank // empty')" ] && continue
    [ -n "${agent_pid[$r]:-}" ] && { kill -TERM -- "-${agent_pid[$r]}" 2>/dev/null || true; sleep 0.2; }
    start "$dir/$name/agent-$r.log" "$MKS_AGENT_BIN" --job "$name" --rank "$r" \
      --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --attach '' \
      --epoch-ms 60000 --heartbeat-ms 600000 --stats "$dir/$name/agent-$r.json"
    agent_pid[$r]=$started
  done
  wait_n "$ranks" 50 "$heartbeats" && break
done
[ "$n" = "$ranks" ] || fail "job $name: $n of $ranks agents registered and sent their heartbeat"
start "$dir/$name/probe.txt" "$MKS_CLI_BIN" --collector "ipc://$dir/cli" --job "$name" \
  probe 'count() by rank where event = task_end' --for 1s
cli_pid=$started
wait_n "$ranks" 300 "SELECT COUNT(*) AS n FROM commands WHERE job = '$name' AND kind = 'probe' AND ok = 1" ||
  fail "job $name: $n of $ranks ranks attached the probe in 30 s: $(cli -f json sql "SELECT rank, sent_ns, replied_ns, ok, error FROM commands WHERE job = '$name'" | jq -c .rows)"
n_epochs=$(cli -f json sql "SELECT COUNT(*) AS n FROM epochs WHERE job = '$name'" | jq '.rows[0].n')
[ "$n_epochs" = 0 ] || fail "job $name: $n_epochs epochs were stored before every rank had the probe"
# the ranks run their steps under it; the agents' last summaries carry its counts
job_end "$name"
for r in $(seq 0 $((ranks - 1))); do kill -TERM -- "-${agent_pid[$r]}" 2>/dev/null || true; done
for _ in $(seq 300); do kill -0 "$cli_pid" 2>/dev/null || break; sleep 0.1; done
id=$(sed -n 's/^probe \([0-9][0-9]*\) sent to .*/\1/p' "$dir/$name/probe.txt" | head -1)
[ -n "$id" ] || fail "job $name: no probe id: $(head -3 "$dir/$name/probe.txt")"
a=$(cli --job "$name" -f json probe --id "$id")
diff <(jq -r '.ranks[] | "\(.rank) \([.class_counts[]] | add)"' "$dir/$name/bench.json" | sort) \
     <(jq -r '.rows[] | "\(.rank) \(.["count()"])"' <<<"$a" | sort) ||
  fail "job $name: the probe's task counts differ from the megakernel's (< bench, > probe)"
for r in $(seq 0 $((ranks - 1))); do
  jq -e '.wakeups >= 1' "$dir/$name/agent-$r.json" >/dev/null ||
    fail "job $name: agent $r was never told that commands waited: $(cat "$dir/$name/agent-$r.json")"
done
echo "ok the probe reached all $ranks ranks before any closed an epoch (60 s epochs); its counts are the megakernel's"

# ---- the page shows what ran ----------------------------------------------------
ran_sorted=$(printf '%s\n' "${ran_examples[@]}" | sort -u)
missing=$(comm -23 <(echo "$docs_examples") <(echo "$ran_sorted"))
[ -z "$missing" ] || fail "docs/probes.md shows examples this test does not run: $missing"
echo "ok every example of docs/probes.md ran and was checked"
