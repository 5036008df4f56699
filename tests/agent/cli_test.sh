#!/usr/bin/env bash
# mkscope-agent's command line: bad options exit 2 with one line on stderr
# that names the option; --help exits 0.  Nothing here reaches a collector.
set -u
agent=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect() { # expect CODE NEEDLE ARGS...
    local code=$1 needle=$2
    shift 2
    timeout 10 "$agent" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$code" ]; then
        echo "FAIL: '$*' exited $rc, want $code: $(cat "$tmp/err")"
        fails=$((fails + 1))
    elif [ -n "$needle" ] && ! grep -q -- "$needle" "$tmp/err"; then
        echo "FAIL: '$*' stderr lacks '$needle': $(cat "$tmp/err")"
        fails=$((fails + 1))
    elif [ "$code" = 2 ] && [ "$(wc -l <"$tmp/err")" != 1 ]; then
        echo "FAIL: '$*' error is not one line: $(cat "$tmp/err")"
        fails=$((fails + 1))
    fi
}

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
expect 0 "" --help
grep -q -- "--spool-spill-only" "$tmp/out" || { echo "FAIL: --help lacks --spool-spill-only"; fails=$((fails + 1)); }

[ $fails = 0 ] && echo "agent cli: all passed"
exit $((fails > 0))
