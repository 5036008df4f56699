# The targets of the accuracy matrix, one line each, PASS or FAIL
# (bench/accuracy.sh --assert fails on any FAIL).
def ratio(a; b): if b == 0 then 1 else a / b end;
def line(ok; what): (if ok then "PASS " else "FAIL " end) + what;
. as $all
| ($all | map(select(.clean | not))) as $F
| ($all | map(select(.clean))) as $C
| ratio($F | map(select(.correct)) | length; $F | length) as $acc
| ratio($all | map(select(.false_conf)) | length; $all | length) as $fc
| ([$F[] | .per_rank[]] | group_by(.rank) | map(. as $x
    | {rank: $x[0].rank,
       rp: ratio($x | map(select(.pred == "remote" and .truth == "remote")) | length;
                 $x | map(select(.pred == "remote")) | length),
       rr: ratio($x | map(select(.pred == "remote" and .truth == "remote")) | length;
                 $x | map(select(.truth == "remote")) | length),
       lp: ratio($x | map(select(.pred == "local" and .truth == "local")) | length;
                 $x | map(select(.pred == "local")) | length),
       lr: ratio($x | map(select(.pred == "local" and .truth == "local")) | length;
                 $x | map(select(.truth == "local")) | length)})) as $pr
| [ line($acc >= 0.95; "cause and culprit right in \($acc * 1000 | round / 10)% of faulty runs (target 95%)"),
    line($fc <= 0.02; "false confidence \($fc * 1000 | round / 10)% (target at most 2%)"),
    line(($C | map(select(.false_alarm)) | length) == 0;
         "clean runs naming a cause for 3+ steps: \($C | map(select(.false_alarm)) | length) (target 0)"),
    ($pr[] | line(.rp >= 0.95 and .rr >= 0.95 and .lp >= 0.95 and .lr >= 0.95;
       "rank \(.rank): remote precision \(.rp * 1000 | round / 10)% recall \(.rr * 1000 | round / 10)%, local precision \(.lp * 1000 | round / 10)% recall \(.lr * 1000 | round / 10)% (target 95%)"))
  ] | .[]
