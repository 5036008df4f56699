# The counterexample benchmark's targets for mkscope, one line each: PASS or
# FAIL (counter.sh --assert fails on a FAIL of the first two, the accuracy
# asserted in CI); the byte target is measured and printed, never waived.
def ratio(a; b): if b == 0 then 1 else a / b end;
def line(ok; what): (if ok then "PASS " else "FAIL " end) + what;
map(select(.tool == "mkscope")) as $s
| ($s | map(select(.clean | not))) as $F
| ratio($F | map(select(.correct)) | length; $F | length) as $acc
| ratio($F | map(select(.culprit_ok)) | length; $F | length) as $cul
| ratio($s | map(select(.false_conf)) | length; $s | length) as $fc
| (($s | map(.bytes) | add) / ([$s[] | .trace_bytes] | add)) as $b
| [ line($acc >= 0.95 and $cul >= 0.95;
         "mkscope cause and culprit right in \($acc * 1000 | round / 10)% (culprit \($cul * 1000 | round / 10)%) of faulty runs (target 95%)"),
    line($fc <= 0.02; "mkscope false confidence \($fc * 1000 | round / 10)% (target at most 2%)"),
    line($b <= 0.01; "mkscope bytes \($b * 1000 | round / 10)% of the native full trace's (target at most 1%)")
  ] | .[]
