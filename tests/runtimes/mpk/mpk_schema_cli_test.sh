#!/usr/bin/env bash
# mkscope-mpk-schema: the saved graph's classes in text and JSON, the
# schema file, and one-line errors with their exit codes.
#   mpk_schema_cli_test.sh MKSCOPE_MPK_SCHEMA DATA_DIR
set -uo pipefail
bin=$1 data=$2
tmp=$(mktemp -d /tmp/mkscope-mpk-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # NAME RC STRING COMMAND...
    local name=$1 want=$2 s=$3 out rc
    shift 3
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -qF -- "$s" <<<"$out"; then
        echo "FAIL $name: rc $rc (want $want): $out"
        fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}
g=$data/task_graph_qwen3_2l.json
expect text 0 "linear_hopper.attn_in" "$bin" "$g"
expect text-count 0 "52 tasks, 23 events, 12 classes" "$bin" "$g"
expect json 0 '"task_type": "TASK_PAGED_ATTENTION_HOPPER"' "$bin" -f json "$g"
expect schema 0 "12 classes" "$bin" -o "$tmp/s.pb" "$g"
[ -s "$tmp/s.pb" ] || { echo "FAIL schema: no file"; fails=$((fails + 1)); }
expect help 0 "EXAMPLES" "$bin" --help
expect missing 1 "No such file" "$bin" "$tmp/none.json"
echo '{"all_tasks": 3}' >"$tmp/bad.json"
expect not-mpk 1 "expected MPK's task_graph.json" "$bin" "$tmp/bad.json"
expect usage 2 "one TASK_GRAPH.json expected" "$bin"
expect format 2 "-f takes text or json" "$bin" -f yaml "$g"
expect option 2 "bad option" "$bin" -z "$g"
[ "$fails" -eq 0 ] && echo "mpk_schema_cli_test: all checks passed"
exit $((fails > 0))
