#!/usr/bin/env bash
# The link between agents and collector, through a proxy that breaks it on
# command (mks-tcpproxy):
#  1. cut (silence both ways) for a while within the agents' buffer: the
#     collector has the ranks silent within two heartbeats, and once the link
#     is back every summary arrives, once, in order; counts equal the
#     megakernel's own;
#  2. reset (connections closed, new ones refused) for longer than a small
#     buffer holds: the summaries that did not fit are lost, and the agent's
#     own count of them is what `mkscope status` and the metrics report;
#     every seq is either stored or counted lost;
#  3. a slow collector (the proxy holds every ack): the agents send less
#     detail and say so (log, summaries' pressure, metrics), nothing is lost,
#     counts stay exact, and full detail comes back with fast acks.
source "$(dirname "$0")/lib.sh"
[ -n "${MKS_PROXY_BIN:-}" ] || { echo "link.sh: needs --proxy" >&2; exit 2; }
hb_ms=500

start_collector
start "$dir/proxy.log" "$MKS_PROXY_BIN" --listen "unix:$dir/proxy" --to "unix:$dir/ingest" \
  --control "$dir/proxy.ctl" --log "$dir/proxy.log"
for _ in $(seq 50); do [ -p "$dir/proxy.ctl" ] && [ -S "$dir/proxy" ] && break; sleep 0.1; done
[ -S "$dir/proxy" ] || fail "the proxy did not start"

# proxy CMD: send a command and wait until it is in force
proxy() {
  local n
  n=$(grep -c "^ok " "$dir/proxy.log" || true)
  echo "$*" >"$dir/proxy.ctl"
  for _ in $(seq 50); do
    [ "$(grep -c "^ok " "$dir/proxy.log" || true)" -gt "$n" ] && return 0
    sleep 0.1
  done
  fail "the proxy did not take '$*'"
}

# job NAME RANKS STEPS AGENT-ARGS...: a job through the proxy, in the background
# (its launcher's pid in $launcher); results in $dir/NAME
job() {
  local name=$1 ranks=$2 steps=$3 a args=()
  shift 3
  for a in --heartbeat-ms $hb_ms --timeout-ms 300 "$@"; do
    args+=(--agent-arg "$a")
  done
  mkdir -p "$dir/$name"
  "$launch" --ranks "$ranks" --job "$name$$" --dir "$dir/$name" --collector "ipc://$dir/proxy" \
    --epoch-ms 50 --drain-ms 30000 --steps "$steps" -q "${args[@]}" -- \
    --step-interval-us 2000 >/dev/null &
  launcher=$!
  jobname=$name$$
}

# flowing N: wait until the current job has N summaries stored
flowing() {
  local n=0
  for _ in $(seq 150); do
    n=$(cli sql "SELECT COUNT(*) FROM epochs WHERE job='$jobname'" 2>/dev/null |
        awk 'NR == 2 { print $1 }') || true
    [ "${n:-0}" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "$jobname: only ${n:-0} summaries reached the collector"
}

states() { cli --job "$jobname" -f json status | tr -d ' \n' | grep -o '"state":"[a-z]*"' | sort -u | tr '\n' ' '; }

field() { sed -E "s/.*\"$2\":([0-9]+).*/\1/" "$1"; }

# every rank of the job: seqs stored once each; prints "rank stored last lost"
# per rank into $dir/NAME/seqs.txt
seqs() {
  local name=$1
  cli sql "SELECT rank, COUNT(*), COUNT(DISTINCT seq), MAX(seq) FROM epochs WHERE job='$jobname' GROUP BY rank" |
    tail -n +2 | grep -v '^(' >"$dir/$name/seqs.txt"
  cat "$dir/$name/seqs.txt"
}

# --- 1: cut within the buffer ---------------------------------------------------------
job cut 2 3000
flowing 8
proxy cut
t0=$(date +%s%N)
for _ in $(seq 60); do
  [ "$(states)" = '"state":"silent" ' ] && break
  sleep 0.05
done
took=$((($(date +%s%N) - t0) / 1000000))
[ "$(states)" = '"state":"silent" ' ] || fail "ranks not silent during the cut: $(states)"
echo "cut: ranks silent after $took ms"
# two heartbeats since the agents' last word, which came at most a heartbeat
# before the cut (and a status request's time on a loaded machine)
[ "$took" -le $((3 * hb_ms + 500)) ] || fail "ranks taken for silent only after $took ms"
sleep 2
proxy pass
wait "$launcher" || fail "the job under the cut link failed"
seqs cut
[ "$(wc -l <"$dir/cut/seqs.txt")" -eq 2 ] || fail "not every rank has summaries"
while read -r rank count distinct hi _; do
  last=$(field "$dir/cut/agent-$rank.json" last_seq)
  lost=$(field "$dir/cut/agent-$rank.json" lost)
  [ "$count" = "$last" ] && [ "$distinct" = "$last" ] && [ "$hi" = "$last" ] ||
    fail "rank $rank: stored $count ($distinct distinct, up to $hi) of $last summaries"
  [ "$lost" = 0 ] || fail "rank $rank: the agent lost $lost summaries within its buffer"
done <"$dir/cut/seqs.txt"
late=$(cli sql "SELECT COUNT(*) FROM epochs a JOIN epochs b ON a.job = b.job AND a.rank = b.rank AND a.seq < b.seq AND a.received_ns > b.received_ns WHERE a.job='$jobname'" |
       awk 'NR == 2 { print $1 }')
[ "$late" = 0 ] || fail "$late summaries were stored out of order"
cli --job "$jobname" -f json query 'count(task) by rank, class' >"$dir/cut/query.json"
"$MKS_COUNTCHECK" --bench "$dir/cut/bench.json" --query "$dir/cut/query.json" \
  "$dir"/cut/agent-*.json >/dev/null || fail "counts differ after the cut"
echo "cut within the buffer: nothing lost, order kept, counts equal"

# --- 2: reset beyond a small buffer ------------------------------------------------------
job reset 1 2500 --buffer-bytes 262144
flowing 4
proxy reset
sleep 3
proxy pass
wait "$launcher" || fail "the job under the reset link failed"
seqs reset
read -r rank count distinct hi _ <"$dir/reset/seqs.txt"
last=$(field "$dir/reset/agent-0.json" last_seq)
lost=$(field "$dir/reset/agent-0.json" lost)
echo "reset: the agent made $last summaries, lost $lost; the collector stored $count"
[ "$lost" -gt 0 ] || fail "a 3 s reset with a 256 KiB buffer lost nothing: the test did not test"
[ "$count" = "$distinct" ] || fail "a summary was stored twice"
[ $((count + lost)) -eq "$last" ] || fail "stored $count + lost $lost != made $last"
reported=$(cli --job "$jobname" -f json status | tr -d ' \n' |
           sed -E 's/.*"lost_summaries":([0-9]+).*/\1/')
[ "$reported" = "$lost" ] || fail "status reports $reported summaries lost, the agent lost $lost"
metric=$(cli metrics | awk -v j="$jobname" '$1 == "mkscope_summaries_lost_total{job=\"" j "\",rank=\"0\"}" { print $2 }')
[ "$metric" = "$lost" ] || fail "metrics report '$metric' summaries lost, the agent lost $lost"
echo "reset beyond the buffer: $lost lost, reported as such by status and metrics"

# --- 3: a slow collector -------------------------------------------------------------------
pressured0=$(cli metrics | awk '$1 == "mkscope_summaries_pressured_total" { print $2 }')
job slow 2 3000
flowing 8
proxy delay 600
sleep 3
proxy delay 0
wait "$launcher" || fail "the job with a slow collector failed"
seqs slow
while read -r rank count distinct hi _; do
  last=$(field "$dir/slow/agent-$rank.json" last_seq)
  lost=$(field "$dir/slow/agent-$rank.json" lost)
  pressured=$(field "$dir/slow/agent-$rank.json" pressured)
  echo "rank $rank: $count of $last summaries stored, $pressured made under pressure"
  [ "$count" = "$last" ] && [ "$distinct" = "$last" ] || fail "rank $rank: stored $count of $last"
  [ "$lost" = 0 ] || fail "rank $rank: lost $lost with a slow collector"
  [ "$pressured" -gt 0 ] || fail "rank $rank: no summary was made under the collector's pressure"
  grep -q "collector \(busy\|behind\)" "$dir/slow/agent-$rank.log" ||
    fail "rank $rank: the agent did not say the collector was slow"
  grep -q "collector keeps up again" "$dir/slow/agent-$rank.log" ||
    fail "rank $rank: the agent did not go back to full detail"
done <"$dir/slow/seqs.txt"
coarse=$(cli sql "SELECT COUNT(*) FROM epochs WHERE job='$jobname' AND detail_tier < 2" |
         awk 'NR == 2 { print $1 }')
[ "$coarse" -gt 0 ] || fail "no stored summary has less detail"
pressured1=$(cli metrics | awk '$1 == "mkscope_summaries_pressured_total" { print $2 }')
[ "$pressured1" -gt "${pressured0:-0}" ] || fail "metrics count no summary made under pressure"
cli --job "$jobname" -f json query 'count(task) by rank, class' >"$dir/slow/query.json"
"$MKS_COUNTCHECK" --bench "$dir/slow/bench.json" --query "$dir/slow/query.json" \
  "$dir"/slow/agent-*.json >/dev/null || fail "counts differ with a slow collector"
echo "slow collector: $coarse summaries with less detail, said so; nothing lost, counts equal"
