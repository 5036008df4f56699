#!/usr/bin/env bash
# mkscope-load against a collector, briefly (the load run itself is a
# benchmark: docs/PERF.md): 64 simulated agents replaying the committed
# recording at 5 epochs/s for 2 s, with a MAC key; every summary produced is
# acknowledged and stored, nothing is lost, and the report says so.  Also the
# generator's command-line errors and `info` on the recordings.
#   load_smoke.sh --collector C --load L --rec DIR
set -euo pipefail
while [ $# -gt 0 ]; do
  case "$1" in
    --collector) coll=$2 ;;
    --load) load=$2 ;;
    --rec) rec=$2 ;;
    *) echo "load_smoke.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
dir=$(mktemp -d /tmp/mks-load-smoke.XXXXXX)
cpid=""
cleanup() {
  local rc=$?
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null && wait "$cpid" 2>/dev/null
  [ $rc -ne 0 ] && [ -f "$dir/collector.log" ] && tail -n 20 "$dir/collector.log" >&2
  rm -rf "$dir"
  exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# command line: one line of ours, exit 2
for args in "run" "run --recording" "run --recording x --rate 0" "run --recording x --rates 4,2" \
            "run --recording x -f xml" "bogus" "record --ingest ipc:///x"; do
  set +e
  # shellcheck disable=SC2086
  out=$("$load" $args 2>&1)
  rc=$?
  set -e
  [ $rc = 2 ] || fail "mkscope-load $args: exit $rc, expected 2 ($out)"
  [ "$(echo "$out" | wc -l)" = 1 ] || fail "mkscope-load $args: more than one line: $out"
done
"$load" run --recording "$dir/none.mksrec" >/dev/null 2>"$dir/err" && fail "a missing recording was taken"
grep -q "cannot open recording" "$dir/err" || fail "missing recording: $(cat "$dir/err")"
echo "not a recording" >"$dir/bad.mksrec"
"$load" run --recording "$dir/bad.mksrec" >/dev/null 2>"$dir/err" && fail "a bad recording was taken"
grep -q "not a mkscope-load recording" "$dir/err" || fail "bad recording: $(cat "$dir/err")"
for r in "$rec"/*.mksrec; do
  "$load" info "$r" | tail -n 1 | grep -q "^[1-9][0-9]* summaries, [0-9]* bytes mean$" ||
    fail "info $r"
done

# a run with a key
head -c 32 /dev/urandom >"$dir/key"
chmod 600 "$dir/key"
"$coll" --ingest "ipc://$dir/ingest" --cli "ipc://$dir/cli" --survey "ipc://$dir/survey" \
  --metrics off --ucx-port off --db "$dir/store.db" --key "$dir/key" >"$dir/collector.log" 2>&1 &
cpid=$!
"$load" run --collector "ipc://$dir/ingest" --recording "$rec/b50k.mksrec" --ranks 64 --rate 5 \
  --seconds 2 --key "$dir/key" --pid "$cpid" --db "$dir/store.db" --max-p99-ms 2000 \
  --job smoke -f json -o "$dir/report.json"
produced=$(jq '.phases[0].produced' "$dir/report.json")
acked=$(jq '.phases[0].acked' "$dir/report.json")
lost=$(jq '.phases[0].lost' "$dir/report.json")
stored=$(jq '.store.summaries' "$dir/report.json")
mac=$(jq '.mac' "$dir/report.json")
echo "produced $produced, acked $acked, lost $lost, stored $stored, mac $mac"
[ "$mac" = true ] || fail "the report says no MAC"
[ "$produced" -ge 300 ] || fail "only $produced summaries produced by 64 agents at 5/s in 2 s"
[ "$acked" = "$produced" ] || fail "$acked of $produced summaries acknowledged"
[ "$lost" = 0 ] || fail "$lost summaries lost"
[ "$stored" = "$produced" ] || fail "the store holds $stored of $produced"
[ "$(jq '.store.ranks' "$dir/report.json")" = 64 ] || fail "the store does not hold 64 ranks"
grep -q "rejected" "$dir/collector.log" && fail "the collector rejected messages: $(grep rejected "$dir/collector.log" | head -1)"
echo "load smoke: $produced summaries of 64 agents, every one acknowledged and stored"
