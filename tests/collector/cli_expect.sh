#!/usr/bin/env bash
# Runs the mkscope CLI's RUN/EXPECT file against a collector of its own.
#
#   cli_expect.sh --collector BIN --cli BIN --seed BIN --monitors DIR FILE
#
# FILE holds blocks:
#   RUN ARGS...    the mkscope command line (shell words, after "mkscope")
#   EXIT N         expected exit status (required)
#   OUT TEXT       stdout+stderr contains TEXT (repeatable)
#   NOT TEXT       stdout+stderr does not contain TEXT (repeatable)
#   LINES N        output has exactly N lines
#   SEED           (alone) store the cli_seed job in the collector now
# In ARGS, @MON@ is the monitors directory, @DIR@ a scratch directory (with
# a FIFO in it, @DIR@/fifo.bpf.o, that nothing ever writes to) and
# @DEAD@ a CLI URL where no collector listens; a block using @MON@ is
# skipped when the build has no monitor objects.  Every command runs with
# MKSCOPE_COLLECTOR pointing at the test's collector.
set -uo pipefail
while [ $# -gt 1 ]; do
  case "$1" in
    --collector) collector=$2 ;;
    --cli) cli=$2 ;;
    --seed) seed=$2 ;;
    --monitors) monitors=$2 ;;
    *) echo "cli_expect: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
file=$1
dir=$(mktemp -d /tmp/mks-cli-expect.XXXXXX)
"$collector" --ingest "ipc://$dir/ingest" --cli "ipc://$dir/cli" --survey "ipc://$dir/survey" \
  --metrics off --ucx-port off --db "$dir/store.db" >"$dir/collector.log" 2>&1 &
cpid=$!
mkfifo "$dir/fifo.bpf.o"
trap 'kill $cpid 2>/dev/null; wait $cpid 2>/dev/null; rm -rf "$dir"' EXIT
export MKSCOPE_COLLECTOR="ipc://$dir/cli"

fails=0 runs=0 skipped=0 line_no=0 have=0
cmd="" want_exit="" outs=() nots=() lines=""

finish() {
  [ $have = 1 ] || return 0
  have=0
  runs=$((runs + 1))
  local words out rc
  # Builds without the agent module have no monitor objects to attach.
  if [[ "$cmd" == *@MON@* ]] && [ ! -f "$monitors/count.bpf.o" ]; then
    skipped=$((skipped + 1))
    outs=() nots=() lines="" want_exit=""
    return 0
  fi
  words=${cmd//@MON@/$monitors}
  words=${words//@DIR@/$dir}
  words=${words//@DEAD@/ipc://$dir/nobody}
  eval "set -- $words"
  out=$(cd "$dir" && timeout 30 "$cli" "$@" 2>&1)
  rc=$?
  local bad=""
  [ -n "$want_exit" ] || bad="no EXIT given"
  [ -z "$bad" ] && [ "$rc" != "$want_exit" ] && bad="exit $rc, expected $want_exit"
  local t
  for t in "${outs[@]}"; do
    [[ "$out" == *"$t"* ]] || bad="${bad:+$bad; }output lacks '$t'"
  done
  for t in "${nots[@]}"; do
    [[ "$out" == *"$t"* ]] && bad="${bad:+$bad; }output has '$t'"
  done
  if [ -n "$lines" ]; then
    local n
    n=$(printf '%s\n' "$out" | wc -l)
    [ "$n" = "$lines" ] || bad="${bad:+$bad; }$n lines, expected $lines"
  fi
  if [ -n "$bad" ]; then
    fails=$((fails + 1))
    echo "FAIL ($file:$run_line) mkscope $cmd: $bad" >&2
    printf '%s\n' "$out" | head -n 8 | sed 's/^/    | /' >&2
  fi
  outs=() nots=() lines="" want_exit=""
}

for _ in $(seq 50); do [ -S "$dir/cli" ] && break; sleep 0.1; done
while IFS= read -r l || [ -n "$l" ]; do
  line_no=$((line_no + 1))
  case "$l" in
    ''|'#'*) continue ;;
    RUN|RUN\ *) finish; cmd=${l#RUN}; cmd=${cmd# }; run_line=$line_no; have=1 ;;
    EXIT\ *) want_exit=${l#EXIT } ;;
    OUT\ *) outs+=("${l#OUT }") ;;
    NOT\ *) nots+=("${l#NOT }") ;;
    LINES\ *) lines=${l#LINES } ;;
    SEED) finish
          "$seed" "ipc://$dir/ingest" || { echo "FAIL: cli_seed could not store its job" >&2; exit 1; } ;;
    *) echo "cli_expect: $file:$line_no: cannot read '$l'" >&2; exit 2 ;;
  esac
done <"$file"
finish
if [ $skipped -gt 0 ]; then echo "cli_expect: $runs commands, $fails failed, $skipped skipped (no monitor objects)"; else echo "cli_expect: $runs commands, $fails failed"; fi
[ $fails = 0 ]
