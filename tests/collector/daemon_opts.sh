#!/usr/bin/env bash
# mkscope-collector's command line: every bad option value exits 2 with one
# line on stderr naming the option, before any socket is bound or store
# opened; --help exits 0.
set -u
prog=$1
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"
base=(--ingest "ipc://$tmp/i" --cli "ipc://$tmp/c" --survey "ipc://$tmp/s" --metrics off
    --ucx-port off --db "$tmp/db")

expect 2 "--fresh-window" "${base[@]}" --fresh-window -1
expect 2 "--fresh-window" "${base[@]}" --fresh-window nan
expect 2 "--replay-cache" "${base[@]}" --replay-cache 0
expect 2 "--replay-cache" "${base[@]}" --replay-cache 99999999999999999999
expect 2 "--max-epochs" "${base[@]}" --max-epochs -5
expect 2 "--max-age" "${base[@]}" --max-age abc
expect 2 "--max-bytes" "${base[@]}" --max-bytes 1Q
expect 2 "--cli-threads" "${base[@]}" --cli-threads 100000
expect 2 "--request-timeout" "${base[@]}" --request-timeout -1
expect 2 "--trigger-hold-off" "${base[@]}" --trigger-hold-off 1x
expect 2 "unexpected argument" "${base[@]}" extra
# Addresses that cannot be one: usage errors (they were exit 1 after the
# store and the sockets were opened).
expect 2 "--metrics port '99999'" "${base[@]}" --metrics 1.2.3.4:99999
expect 2 "--metrics port ''" "${base[@]}" --metrics 127.0.0.1:
expect 2 "--metrics wants HOST:PORT" "${base[@]}" --metrics :9
expect 2 "--metrics host 'localhost'" "${base[@]}" --metrics localhost:9
expect 2 "--ucx-port wants a port number" "${base[@]}" --ucx-port 70000
expect 2 "--ucx-port wants a port number" "${base[@]}" --ucx-port 99999999999999999999
[ -e "$tmp/db" ] && { echo "FAIL: a usage error opened the store"; fails=$((fails + 1)); }
# Key files: a directory, a device, a FIFO nobody writes to (open blocked).
mkfifo -m 600 "$tmp/fifo"
expect 2 "is a directory" "${base[@]}" --key "$tmp"
expect 2 "not a regular file or a pipe" "${base[@]}" --key /dev/null
expect 2 "found 0 bytes" "${base[@]}" --key "$tmp/fifo"
expect 0 "" --help

[ $fails = 0 ] && echo "collector options: all passed"
exit $((fails > 0))
