# shellcheck shell=bash
# Sourced by the command-line tests: expect CODE NEEDLE ARGS... runs $prog
# (set by the caller) with ARGS and checks its exit code, that stderr holds
# NEEDLE, and that an exit 2 (bad usage) says so in exactly one line.
# Failures are counted in $fails; $tmp holds out/err of the last run.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect() {
    local code=$1 needle=$2
    shift 2
    timeout 60 "${prog:?the caller sets prog}" "$@" >"$tmp/out" 2>"$tmp/err"
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
