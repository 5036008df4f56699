#!/usr/bin/env bash
# The Slurm recipe with a stand-in srun (tasks as local processes with
# SLURM_PROCID set): mkscope-slurm-collector makes a key (mode 600) and
# starts the collector with the CLI on loopback; mkscope-srun runs 2 ranks of
# the reference megakernel with an agent each, given the key and the survey
# socket from the env file; then the CLI with the key sees both ranks, a
# survey reaches both agents, the CLI without the key is refused, the CLI
# socket listens on 127.0.0.1 only, and --stop stops the collector.
source "$(dirname "$0")/lib.sh"
command -v ss >/dev/null || { echo "SKIP: ss (iproute2) is missing" >&2; exit 77; }

# srun stand-in: -n N tasks of the command, each with SLURM_PROCID.
mkdir -p "$dir/bin"
cat >"$dir/bin/srun" <<'SRUN'
#!/usr/bin/env bash
n=1
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--ntasks) n=$2; shift 2 ;;
    -N|--nodes) shift 2 ;;
    --*=*) shift ;;
    -*) shift ;;
    *) break ;;
  esac
done
pids=()
for ((i = 0; i < n; i++)); do SLURM_PROCID=$i SLURM_JOB_ID=${SLURM_JOB_ID:-4242} "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
SRUN
chmod +x "$dir/bin/srun"
# A free block of 5 ports (the recipe's ingest, survey, CLI, metrics, UCX).
port=""
for p in $(seq 20000 50 30000); do
  busy=0
  for k in 0 1 2 3 4; do ss -ltn "sport = :$((p + k))" | grep -q LISTEN && busy=1; done
  [ $busy = 0 ] && { port=$p; break; }
done
[ -n "$port" ] || fail "no free block of 5 ports"
cd_dir="$dir/job"
"$root/deploy/slurm/mkscope-slurm-collector" --dir "$cd_dir" --host 127.0.0.1 --port "$port" \
  --collector "$MKS_COLLECTOR_BIN" --no-systemd 2>"$dir/start.log" || fail "collector start: $(cat "$dir/start.log")"
groups+=("$(cat "$cd_dir/collector.pid")")
[ "$(stat -c %a "$cd_dir/key")" = 600 ] || fail "key mode $(stat -c %a "$cd_dir/key"), want 600"
[ "$(stat -c %s "$cd_dir/key")" = 32 ] || fail "key is not 32 bytes"
ss -ltn "sport = :$((port + 2))" | grep -q "127.0.0.1:$((port + 2))" || fail "CLI not on loopback"
if ss -ltn "sport = :$((port + 2))" | grep -v 127.0.0.1 | grep -q LISTEN; then fail "CLI also on another address"; fi
grep -q "^MKSCOPE_KEY=$cd_dir/key$" "$cd_dir/env" || fail "env file names no key"

job=slurm$$
it_jobs+=("$job")
PATH="$dir/bin:$PATH" SLURM_JOB_ID=4242 "$root/deploy/slurm/mkscope-srun" --env "$cd_dir/env" \
  --agent "$MKS_AGENT_BIN" --job "$job" --log-dir "$dir" -n 2 -- \
  sh -c "exec '$MKS_BENCH_BIN' run --ranks 2 --rank \$MKSCOPE_RANK --job \$MKSCOPE_JOB --steps 400 \
         --step-interval-us 3000 --wait-agents 10000 -q" >"$dir/srun.log" 2>&1 &
srun_pid=$!
kcli() { "$MKS_CLI_BIN" --collector "tcp://127.0.0.1:$((port + 2))" --key "$cd_dir/key" "$@"; }
for _ in $(seq 100); do
  [ "$(kcli -f json status 2>/dev/null | jq '[.ranks[]? | select(.agent == "up")] | length' 2>/dev/null)" = 2 ] && break
  sleep 0.1
done
[ "$(kcli -f json status | jq '[.ranks[] | select(.agent == "up")] | length')" = 2 ] ||
  fail "status does not show 2 agents up: $(kcli status 2>&1)"
kcli -f json survey status 1500 >"$dir/survey.json"
[ "$(jq '.answers | length' "$dir/survey.json")" = 2 ] || fail "survey: $(cat "$dir/survey.json")"
if "$MKS_CLI_BIN" --collector "tcp://127.0.0.1:$((port + 2))" --timeout 1000 status >/dev/null 2>&1; then
  fail "the CLI without the key was answered"
fi
wait "$srun_pid" || fail "mkscope-srun failed: $(tail -5 "$dir/srun.log")"
[ -f "$dir/mkscope-agent-$job-1.log" ] || fail "no agent log for rank 1 in --log-dir"
cpid=$(cat "$cd_dir/collector.pid")
"$root/deploy/slurm/mkscope-slurm-collector" --dir "$cd_dir" --stop 2>/dev/null
! kill -0 "$cpid" 2>/dev/null || fail "collector still running after --stop"
echo "ok: key 600, CLI on loopback only and keyed, 2 ranks with agents and survey through mkscope-srun"
