#!/usr/bin/env bash
# The systemd units of deploy/systemd, without a running systemd:
#  1. `systemd-analyze verify` accepts both units (the binaries they name
#     pointed at this build); skipped where systemd-analyze is missing.
#  2. Each ExecStart line, expanded as systemd would (%i, %%, $$ and the
#     units' default environment), starts the real program with the
#     arguments it should: the agent instance "llama.70b.3" is job
#     "llama.70b" rank 3, the collector takes its default --db=PATH.
source "$(dirname "$0")/lib.sh"
units="$root/deploy/systemd"

# unit FILE BIN: the unit with /usr/local/bin/BIN replaced by this build's
unit_here() {
  sed "s|/usr/local/bin/$2|$3|" "$units/$1"
}

if command -v systemd-analyze >/dev/null; then
  unit_here mkscope-collector.service mkscope-collector "$MKS_COLLECTOR_BIN" \
    >"$dir/mkscope-collector.service"
  unit_here mkscope-agent@.service mkscope-agent "$MKS_AGENT_BIN" >"$dir/mkscope-agent@it.3.service"
  for u in "$dir/mkscope-collector.service" "$dir/mkscope-agent@it.3.service"; do
    out=$(systemd-analyze verify "$u" 2>&1) || fail "systemd-analyze verify $(basename "$u"): $out"
    [ -z "$out" ] || fail "systemd-analyze verify $(basename "$u") warns: $out"
  done
  echo "systemd-analyze verify: both units clean"
else
  echo "systemd-analyze not found: verify skipped"
fi

# exec_line UNIT INSTANCE BIN STUB: the unit's ExecStart as the shell line
# systemd would run, with the program replaced by STUB
exec_line() {
  grep '^ExecStart=' "$units/$1" | head -n 1 | sed -e 's/^ExecStart=//' \
    -e "s|/usr/local/bin/$3|$4|" -e "s|%i|$2|g" -e 's|%%|%|g' -e 's|\$\$|$|g'
}

# the unit's Environment= defaults, as assignments for env(1)
unit_env() {
  grep '^Environment=' "$units/$1" | sed -e 's/^Environment=//'
}

# wait_started LOG PATTERN PID WHAT: up to 5 s for PATTERN in LOG while PID
# lives; fail with the log when it does not come
wait_started() {
  for _ in $(seq 50); do
    grep -q "$2" "$1" && break
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "$2" "$1" || fail "$4: $(cat "$1")"
}

# a stand-in that prints its arguments one per line
stub="$dir/stub"
printf '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n' >"$stub"
chmod +x "$stub"

# --- the agent: JOB.RANK, the rank after the last dot ----------------------
line=$(exec_line mkscope-agent@.service llama.70b.3 mkscope-agent "$stub")
mapfile -t envs < <(unit_env mkscope-agent@.service)
got=$(env "${envs[@]}" MKSCOPE_AGENT_ARGS="--budget 5000" bash -c "$line" | tr '\n' ' ')
want="--job llama.70b --rank 3 --collector tcp://127.0.0.1:7400 --budget 5000 "
[ "$got" = "$want" ] || fail "agent unit runs: '$got', want '$want'"
# the real agent takes those arguments (it waits for the application)
line=$(exec_line mkscope-agent@.service llama.70b.3 mkscope-agent "$MKS_AGENT_BIN")
start "$dir/agent.log" env "${envs[@]}" MKSCOPE_COLLECTOR_INGEST="ipc://$dir/ingest" \
  MKSCOPE_AGENT_ARGS="--epoch-ms 50 -v" bash -c "$line"
agent=$started
wait_started "$dir/agent.log" "job llama.70b rank 3" "$agent" "the agent started by the unit's line"
kill -TERM -- "-$agent"
echo "agent unit: instance llama.70b.3 is job llama.70b rank 3"

# --- the collector: its default arguments, then the sockets of this test ---
line=$(exec_line mkscope-collector.service "" mkscope-collector "$stub")
mapfile -t envs < <(unit_env mkscope-collector.service)
got=$(env "${envs[@]}" bash -c "$line" | tr '\n' ' ')
want="--db=/var/lib/mkscope/store.db "
[ "$got" = "$want" ] || fail "collector unit runs: '$got', want '$want'"
line=$(exec_line mkscope-collector.service "" mkscope-collector "$MKS_COLLECTOR_BIN")
start "$dir/collector.log" env MKSCOPE_COLLECTOR_ARGS="--db=$dir/store.db --ingest ipc://$dir/ingest --survey ipc://$dir/survey --cli ipc://$dir/cli --metrics off --ucx-port off" \
  bash -c "$line"
collector_pid=$started
wait_started "$dir/collector.log" "db $dir/store.db" "$collector_pid" \
  "the collector started by the unit's line"
cli sql 'SELECT COUNT(*) FROM epochs' >/dev/null || fail "the collector started by the unit's line does not answer"
echo "collector unit: starts with its arguments and answers"
