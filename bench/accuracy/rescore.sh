#!/usr/bin/env bash
# bench/accuracy/rescore.sh: score kept accuracy runs again with another
# diagnosis, offline.  Each run directory bench/accuracy.sh kept (--keep, or
# a wrong answer: OUT/failed/ID, with its store.db and truth.json) is
# diagnosed by `diag_bench --store` (the collector's own diagnosis, as
# `mkscope diagnose --min-steps 3` asks for it), written as the CLI writes
# it (lost ranks, then groups, or one "none"), scored by score.jq; the
# matrix and the targets of those runs are printed as accuracy.sh prints
# them.  A rule change is measured on many stored runs without running
# them again; runs made under other load keep that load in their stores.
#
# usage: bench/accuracy/rescore.sh DIAG_BENCH OUT RUNDIR...
#   DIAG_BENCH  the diag_bench binary of the tree to measure
#   OUT         a new directory: OUT/runs/ID.score, OUT/scores.json
#   RUNDIR      kept run directories (their names are the run ids)
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 out=$2
shift 2
[ -x "$bin" ] || { echo "rescore: $bin is not executable" >&2; exit 1; }
mkdir -p "$out/runs"
for d in "$@"; do
  id=$(basename "$d")
  [ -s "$d/store.db" ] && [ -s "$d/truth.json" ] || { echo "rescore: $d: no store or truth" >&2; continue; }
  # the job name accuracy.sh gave the run
  job=$(echo "acc$id" | tr -c 'A-Za-z0-9_.\n-' '_' | cut -c1-48)
  if ! "$bin" --store "$d/store.db" --job "$job" --min-steps 3 >"$out/runs/$id.answer" \
      2>"$out/runs/$id.err"; then
    echo "rescore: $id: $(cat "$out/runs/$id.err")" >&2
    continue
  fi
  jq -c '((.lost_ranks // []) + (.groups // [])) as $g
         | if ($g | length) > 0 then $g
           else [{cause: "none", reason: .reason, coverage: .coverage}] end' \
    "$out/runs/$id.answer" >"$out/runs/$id.diag"
  jq -n -c --argjson diag "$(cat "$out/runs/$id.diag")" --argjson truth "$(cat "$d/truth.json")" \
    -f "$here/score.jq" | jq -c --arg id "$id" '. + {id: $id}' >"$out/runs/$id.score"
done
files=$(find "$out/runs" -name '*.score' | sort)
[ -n "$files" ] || { echo "rescore: nothing scored" >&2; exit 1; }
# shellcheck disable=SC2086
jq -s . $files >"$out/scores.json"
jq -r -f "$here/report.jq" "$out/scores.json"
echo
jq -r -f "$here/targets.jq" "$out/scores.json"
