#!/usr/bin/env bash
# mkscope-bench's command line: bad options exit 2 with one line on stderr;
# a 4-rank run with a fault writes results and truth and matches the reference.
set -u
bench=$1
prog=$bench
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"

expect 2 "unknown command" frobnicate
expect 2 "--ranks" run --ranks abc
expect 2 "ranks 0 not in" run --ranks 0
expect 2 "--backend must be cpu or cuda" run --backend tpu
expect 2 "unknown type 'slow'" run --fault slow:rank=1
expect 2 "rank '7' not in 0..3" run --ranks 4 --fault task-delay:rank=7
expect 2 "--rank 4 not in 0..3" run --ranks 4 --rank 4
expect 2 "unexpected argument" run extra
expect 2 "needs the profiler build" run --trace /tmp/x
expect 2 "job name" run --job 'a/b'
expect 2 "needs --cuda-mode persistent" run --backend cuda --cuda-mode per-op --ar-relay
expect 0 "" --help
"$bench" --help | grep -q EXAMPLES || { echo "FAIL: --help has no EXAMPLES"; fails=$((fails + 1)); }

job="cli$$"
expect 0 "" run --ranks 4 --steps 8 --job "$job" --check \
    --fault comm-delay:rank=2,gen=1,magnitude=300,steps=2-4 \
    --json "$tmp/out.json" --truth "$tmp/truth.json"
grep -q '"type": "comm-delay"' "$tmp/truth.json" || { echo "FAIL: truth lacks the fault"; fails=$((fails + 1)); }
grep -q '"class_counts"' "$tmp/out.json" || { echo "FAIL: results lack class counts"; fails=$((fails + 1)); }
grep -q "match" "$tmp/out" || { echo "FAIL: --check did not report a match"; fails=$((fails + 1)); }

# --wait-agents with no agent: waits its time, says so, runs unobserved
expect 0 "no agent attached within 100 ms" run --ranks 2 --steps 3 --job "clw$$" --wait-agents 100
expect 2 "wait_agents_ms" run --wait-agents 999999999

# --rank mode: two ranks started separately meet in shared memory
job="clr$$"
"$bench" run --ranks 2 --steps 6 --rank 1 --job "$job" -q 2>"$tmp/r1.err" &
r1=$!
"$bench" run --ranks 2 --steps 6 --rank 0 --job "$job" --json "$tmp/r0.json" -q 2>"$tmp/r0.err"
rc0=$?
wait $r1
rc1=$?
if [ $rc0 != 0 ] || [ $rc1 != 0 ] || ! grep -q '"tokens"' "$tmp/r0.json"; then
    echo "FAIL: --rank mode: rank0 $rc0 rank1 $rc1: $(cat "$tmp/r0.err" "$tmp/r1.err")"
    fails=$((fails + 1))
fi

[ $fails = 0 ] && echo "cli: all passed"
exit $((fails > 0))
