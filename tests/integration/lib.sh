# Shared by the integration tests: binaries from the command line, a private
# temp dir with ipc:// sockets (tests run in parallel), process groups that
# are always stopped, and a check that nothing of ours is left running.
#   source lib.sh --agent A --collector C --cli M --bench B --countcheck K --monitors D
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
launch="$root/deploy/local/mkscope-launch"

while [ $# -gt 0 ]; do
  case "$1" in
    --agent) export MKS_AGENT_BIN=$2 ;;
    --collector) export MKS_COLLECTOR_BIN=$2 ;;
    --cli) MKS_CLI_BIN=$2 ;;
    --bench) export MKS_BENCH_BIN=$2 ;;
    --countcheck) MKS_COUNTCHECK=$2 ;;
    --monitors) export MKS_MONITORS_DIR=$2 ;;
    --build) MKS_BUILD_DIR=$2 ;;
    --proxy) MKS_PROXY_BIN=$2 ;;
    *) echo "$(basename "$0"): unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done

dir=$(mktemp -d "/tmp/mks-it-$(basename "$0" .sh).XXXXXX")
groups=()
it_jobs=() # jobs whose /dev/shm objects (control blocks, bench segment) the test made
it_cleanup() {
  local rc=$? p
  trap - EXIT
  for p in "${groups[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for _ in $(seq 30); do
    local alive=0
    for p in "${groups[@]}"; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${groups[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
  # Programs stopped by a signal remove their shared memory themselves; what
  # is left (a process killed outright) is removed here and named.
  local j left=()
  for j in "${it_jobs[@]}"; do
    for p in /dev/shm/mkscope."$j".* /dev/shm/mksbench."$j"; do
      [ -e "$p" ] && { left+=("${p#/dev/shm/}"); rm -f "$p"; }
    done
  done
  [ ${#left[@]} -eq 0 ] || echo "note: removed ${#left[@]} shared memory objects left behind: ${left[*]}" >&2
  if pgrep -f "$dir" >/dev/null; then
    echo "FAIL: processes left behind:" >&2
    pgrep -af "$dir" >&2
    pkill -KILL -f "$dir" || true
    rc=1
  fi
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    for f in "$dir"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  fi
  rm -rf "$dir"
  exit $rc
}
trap it_cleanup EXIT

# start LOG CMD...: a process group of its own; its pid in $started
start() {
  local log=$1; shift
  setsid "$@" >>"$log" 2>&1 </dev/null &
  started=$!
  groups+=($started)
}

start_collector() {
  start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
    --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics off --db "$dir/store.db" \
    --ucx-port 0
  collector_pid=$started
}

cli() { "$MKS_CLI_BIN" --collector "ipc://$dir/cli" "$@"; }

# bench_argv JOB ARGS...: the command line of mkscope-bench run into the
# array bench_cmd; each rank waits until its agent has attached, so that
# counts cover the whole run
bench_argv() {
  local job=$1; shift
  it_jobs+=("$job")
  bench_cmd=("$MKS_BENCH_BIN" run --job "$job" --wait-agents 10000 "$@")
}

fail() { echo "FAIL: $*" >&2; exit 1; }
