#!/usr/bin/env bash
# mkscope-agent's command line: bad options exit 2 with one line on stderr
# that names the option; --help exits 0.  Nothing here reaches a collector.
set -u
prog=$1
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../cli_expect.sh"

expect 2 "--job and --rank are required" --job j
expect 2 "--job and --rank are required" --rank 0
expect 2 "--job 'a/b'" --job 'a/b' --rank 0
expect 2 "unexpected argument" --job j --rank 0 extra
expect 2 "--buffer-bytes" --job j --rank 0 --buffer-bytes 10
expect 2 "--spool-bytes" --job j --rank 0 --spool-dir "$tmp/s" --spool-bytes x
expect 2 "--spool-spill-only needs --spool-dir" --job j --rank 0 --spool-spill-only
expect 2 "unknown option '--frobnicate'" --job j --rank 0 --frobnicate
expect 2 "unknown option '-x'" --job j --rank 0 -x
expect 2 "--job needs a value" --rank 0 --job
expect 2 "monitor name '../../etc/passwd'" --job j --rank 0 --attach ../../etc/passwd
expect 2 "monitor name ''" --job j --rank 0 --attach latency,,queue
expect 2 "--monitors '/dev/null': not a directory" --job j --rank 0 --monitors /dev/null
expect 2 "--monitors '$tmp/none'" --job j --rank 0 --monitors "$tmp/none"
expect 2 "a job name is" --job "$(printf 'a\nb')" --rank 0
expect 2 "--step-detail 'some': expected all or auto" --job j --rank 0 --step-detail some
expect 2 "--detail-every" --job j --rank 0 --step-detail auto --detail-every -1
expect 2 "--detail-warmup" --job j --rank 0 --detail-warmup x
expect 0 "" --help
grep -q -- "--spool-spill-only" "$tmp/out" || { echo "FAIL: --help lacks --spool-spill-only"; fails=$((fails + 1)); }

[ $fails = 0 ] && echo "agent cli: all passed"
exit $((fails > 0))
