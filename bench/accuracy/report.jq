# The matrix of bench/accuracy.sh from every run's score (score.jq): the
# confusion matrix (truth cause x the first group's cause), culprit
# accuracy, the false-confidence rate, per-rank precision and recall of
# remote stall versus local cause, the clean runs, and the targets.
def pct(a; b): if b == 0 then "-" else ((1000 * a / b | round) / 10 | tostring) + "%" end;
def ratio(a; b): if b == 0 then 1 else a / b end;
def pad(n): tostring | if length < n then . + (" " * (n - length)) else . end;
def lpad(n): tostring | if length < n then (" " * (n - length)) + . else . end;
. as $all
| ($all | map(select(.clean | not))) as $F
| ($all | map(select(.clean))) as $C
| (["local_imbalance", "notify_delay", "slow_rank", "slow_task", "slow_transfer", "none"]) as $rows
| (["local_imbalance", "notify_delay", "slow_rank", "slow_task", "slow_transfer",
    "remote_stall", "undecided", "none"]) as $cols
| ($F | map(select(.correct)) | length) as $ok
| ($F | map(select(.culprit_ok)) | length) as $cul
| ($all | map(select(.false_conf)) | length) as $fc
| [ "== accuracy matrix: \($F | length) faulty runs, \($C | length) clean runs",
    "",
    "confusion (rows: injected cause; columns: the first group's cause)",
    ("" | pad(16)) + ($cols | map(.[0:10] | lpad(11)) | join("")),
    ( $rows[] as $r
      | ($all | map(select((if .clean then "none" else .truth_cause end) == $r))) as $in
      | select(($in | length) > 0)
      | ($r | pad(16)) + ($cols | map(. as $c | $in | map(select(.pred_cause == $c)) | length
                                      | lpad(11)) | join("")) ),
    "",
    "by fault type (cause and culprit right / runs)",
    ( $F | group_by(.type)[] | . as $g
      | ($g[0].type | pad(16))
        + ([false, true] | map(. as $p | $g | map(select(.persistent == $p)) as $x
             | "\(if $p then "persistent" else "windowed" end) \($x | map(select(.correct)) | length)/\($x | length)"
             | pad(22)) | join(""))
        + "culprit \($g | map(select(.culprit_ok)) | length)/\($g | length)" ),
    "",
    "by ranks",
    ( $F | group_by(.ranks)[] | "  \(.[0].ranks) ranks: \(map(select(.correct)) | length)/\(length) right, \(map(select(.false_conf)) | length) confident and wrong" ),
    "",
    "by magnitude (us) and mode",
    ( $F | group_by([.persistent, .magnitude_us])[] | "  \(if .[0].persistent then "persistent" else "windowed  " end) \(.[0].magnitude_us | lpad(7)): \(map(select(.correct)) | length)/\(length)" ),
    "",
    "clean runs",
    ( $C | group_by([.ranks, .steps])[] | "  \(.[0].ranks) ranks, \(.[0].steps) steps: \(length) runs, \(map(select(.false_alarm)) | length) with a cause named for 3+ steps" ),
    "",
    "remote stall vs local cause, per rank (precision / recall)",
    ( [$F[] | .per_rank[]] | group_by(.rank)[] | . as $x
      | ($x | map(select(.pred == "remote")) | length) as $pr
      | ($x | map(select(.truth == "remote")) | length) as $tr
      | ($x | map(select(.pred == "remote" and .truth == "remote")) | length) as $rr
      | ($x | map(select(.pred == "local")) | length) as $pl
      | ($x | map(select(.truth == "local")) | length) as $tl
      | ($x | map(select(.pred == "local" and .truth == "local")) | length) as $ll
      | "  rank \($x[0].rank | lpad(2)): remote \(pct($rr; $pr) | lpad(6)) / \(pct($rr; $tr) | lpad(6))   local \(pct($ll; $pl) | lpad(6)) / \(pct($ll; $tl) | lpad(6))" ),
    "",
    "cause and culprit right: \(pct($ok; $F | length)) (\($ok)/\($F | length))",
    "culprit (rank, class) right: \(pct($cul; $F | length)) (\($cul)/\($F | length))",
    "false confidence: \(pct($fc; $all | length)) (\($fc)/\($all | length); undecided is not)",
    "clean runs naming a cause for 3+ steps: \($C | map(select(.false_alarm)) | length)/\($C | length)"
  ] | .[]
