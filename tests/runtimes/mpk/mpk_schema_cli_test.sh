#!/usr/bin/env bash
# mkscope-mpk-schema: the saved graph's classes in text and JSON, the
# schema file, and one-line errors with their exit codes (tests/cli_expect.sh).
#   mpk_schema_cli_test.sh MKSCOPE_MPK_SCHEMA DATA_DIR
set -uo pipefail
prog=$1 data=$2
# shellcheck source=tests/cli_expect.sh
source "$(dirname "$0")/../../cli_expect.sh"
out_has() { # NEEDLE: the last run's stdout holds it
    grep -qF -- "$1" "$tmp/out" || { echo "FAIL: stdout lacks '$1'"; fails=$((fails + 1)); }
}
g=$data/task_graph_qwen3_2l.json
expect 0 "" "$g"
out_has "52 tasks, 23 events, 12 classes"
out_has "linear_hopper.attn_in"
expect 0 "" -f json "$g"
out_has '"task_type": "TASK_PAGED_ATTENTION_HOPPER"'
expect 0 "" -o "$tmp/s.pb" "$g"
[ -s "$tmp/s.pb" ] || { echo "FAIL: -o wrote no schema"; fails=$((fails + 1)); }
expect 0 "" --help
out_has "EXAMPLES"
expect 1 "No such file" "$tmp/none.json"
echo '{"all_tasks": 3}' >"$tmp/bad.json"
expect 1 "expected MPK's task_graph.json" "$tmp/bad.json"
expect 2 "one TASK_GRAPH.json expected"
expect 2 "-f takes text or json" -f yaml "$g"
expect 2 "bad option" -z "$g"
[ "$fails" -eq 0 ] && echo "mpk_schema_cli_test: all checks passed"
exit $((fails > 0))
