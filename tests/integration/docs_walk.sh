#!/usr/bin/env bash
# A new user's walk: every example command line of mkscope in README.md
# ("The CLI at a glance") and docs/cli.md ("Examples") runs as written
# against a live CPU job (mkscope-launch --live, 2 ranks, rank 1 slowed so
# that the README's trigger fires and escalates), in the order the page
# gives them, with mkscope on PATH and MKSCOPE_COLLECTOR set. The pages'
# monitor.bpf.o is the standard count monitor. Each example must exit 0;
# `trace export` may wait (20 s at most) for the escalation the trigger
# added just before asks for; `top` runs until stopped (2 s here); a
# `| dot ...` pipeline runs whole where Graphviz is installed, else the
# mkscope part must print a digraph; exit 5 (collector busy) is retried, as
# the CLI says to. The demo and build lines of the README
# are whole runs of their own (tests/run.sh, deploy/demo.sh), not walked.
source "$(dirname "$0")/lib.sh"
mkdir -p "$dir/bin" "$dir/work"
ln -s "$MKS_CLI_BIN" "$dir/bin/mkscope"
export PATH="$dir/bin:$PATH" MKSCOPE_COLLECTOR="ipc://$dir/live/cli"
cp "$MKS_MONITORS_DIR/count.bpf.o" "$dir/work/monitor.bpf.o"

job="walk$$"
it_jobs+=("$job")
# A small job (2 ranks, a step every 5 ms): the walk is about the examples,
# and the diagnosis of a long job takes longer than the CLI waits on a
# loaded machine.
start "$dir/launch.log" "$launch" --live --ranks 2 --job "$job" --dir "$dir/live" -q \
  --fault queue-oversub:rank=1,magnitude=2500,steps=40-100000 -- --step-interval-us 5000
for _ in $(seq 150); do
  [ "$(mkscope -f json status 2>/dev/null | jq '[.ranks[]? | select(.epochs > 2)] | length' 2>/dev/null)" = 2 ] && break
  sleep 0.2
done
[ "$(mkscope -f json status | jq '[.ranks[] | select(.epochs > 2)] | length')" = 2 ] ||
  fail "the live job did not come up: $(tail -5 "$dir/launch.log")"
# The examples filter on steps up to 30: the job must have stored them.
for _ in $(seq 300); do
  mkscope -f json query 'count(step) where step >= 40' >/dev/null 2>&1 && break
  sleep 0.2
done

# The examples: indented lines starting with "mkscope ", the description
# after a run of spaces dropped.
examples() {
  sed -n "/^$2/,/^[^ ]/p" "$root/$1" | grep '^    mkscope ' | sed -e 's/^    //' -e 's/ \{2,\}[^|]*$//'
}
list=$( (examples README.md '## The CLI at a glance'; examples docs/cli.md '## Examples') )
n=0
while IFS= read -r ex; do
  [ -n "$ex" ] || continue
  n=$((n + 1))
  out="$dir/ex$n.out"
  cd "$dir/work"
  case "$ex" in
    "mkscope top"*)
      timeout 2 bash -c "$ex" >"$out" 2>&1 </dev/null || [ $? = 124 ] || fail "'$ex': $(tail -3 "$out")"
      grep -q RANK "$out" || fail "'$ex' showed no ranks" ;;
    "mkscope trace export"*)
      ok=0
      for _ in $(seq 40); do bash -c "$ex" >"$out" 2>&1 && { ok=1; break; }; sleep 0.5; done
      [ $ok = 1 ] || fail "'$ex' never succeeded: $(tail -3 "$out")" ;;
    *"| dot "*)
      if command -v dot >/dev/null; then
        bash -c "$ex" >"$out" 2>&1 || fail "'$ex': $(tail -3 "$out")"
      else
        rc=0
        for _ in 1 2 3; do rc=0; bash -c "${ex%%|*}" >"$out" 2>&1 || rc=$?; [ $rc = 5 ] || break; done
        [ $rc = 0 ] || fail "'${ex%%|*}' (exit $rc): $(tail -3 "$out")"
        grep -q '^digraph' "$out" || fail "'${ex%%|*}' printed no digraph"
      fi ;;
    *)
      # Exit 5 means "collector busy: retry" (docs/cli.md); a loaded machine
      # sees it on a long diagnosis.
      rc=0
      for _ in 1 2 3; do rc=0; bash -c "$ex" >"$out" 2>&1 || rc=$?; [ $rc = 5 ] || break; done
      [ $rc = 0 ] || fail "'$ex' (exit $rc): $(tail -3 "$out")" ;;
  esac
  cd - >/dev/null
done <<<"$list"
[ "$n" -ge 20 ] || fail "found only $n examples in README.md and docs/cli.md"
[ -s "$dir/work/trace.pftrace" ] && [ -s "$dir/work/trace.json" ] || fail "the trace exports wrote nothing"
echo "ok: $n examples of README.md and docs/cli.md ran against a live 2-rank job"
