# The per-tool table of bench/counter.sh: every tool's scores over the same
# runs (OUT/tools/ID.TOOL.score, each bench/accuracy/score.jq's object plus
# tool, bytes and the full trace's bytes), with the step-time perturbation
# and the time to ask a new question when measured ($m: counter.sh
# --measure's measure.json, or null).  The table comes last.
def pct(a; b): if b == 0 then "-" else ((1000 * a / b | round) / 10 | tostring) + "%" end;
def pad(n): tostring | if length < n then . + (" " * (n - length)) else . end;
def lpad(n): tostring | if length < n then (" " * (n - length)) + . else . end;
def human: if . >= 1048576 then "\((. / 104857.6 | round) / 10) MB"
           elif . >= 1024 then "\((. / 102.4 | round) / 10) KB" else "\(. | round) B" end;
(["mkscope", "trace", "trace_sampled", "counters", "steps"]) as $first
| ({mkscope: "mkscope summaries + wait chains", trace: "native profiler, full trace",
    trace_sampled: "native trace sampled to mkscope's bytes", counters: "fixed counters",
    steps: "step timeline (kernel-level)"}) as $names
| ($m // {}) as $m
| group_by(.tool) | map({key: .[0].tool, value: .}) | from_entries as $by
| ($first + (($by | keys) - $first | sort)) as $order
| [ $order[] | select($by[.] != null) | . as $t | $by[$t] as $s
    | ($s | map(select(.clean | not))) as $F
    | ($s | map(select(.clean))) as $C
    | {tool: $t, label: $names[$t], runs: ($s | length), faulty: ($F | length),
       cause: ($F | map(select(.pred_cause == .truth_cause)) | length),
       culprit: ($F | map(select(.culprit_ok)) | length),
       both: ($F | map(select(.correct)) | length),
       undecided: ($F | map(select(.pred_cause == "undecided" or .pred_cause == "none")) | length),
       fc: ($s | map(select(.false_conf)) | length),
       alarms: ($C | map(select(.false_alarm)) | length), clean: ($C | length),
       bytes: ($s | map(.bytes) | add / length),
       ratio: (($s | map(.bytes) | add) / ([$s[] | .trace_bytes] | add)),
       perturb: $m.perturbation[$t], question: $m.question[$t]} ] as $rows
| ( "== by fault type and mode (cause and culprit right / runs), per tool",
    ( [ $by.mkscope // [] | .[] | select(.clean | not) ] | group_by([.type, .persistent])[]
      | . as $g | ($g[0].type) as $ty | ($g[0].persistent) as $p
      | ($ty | pad(14)) + (if $p then "persistent " else "windowed   " end)
        + ([ $order[] | . as $t | select($by[$t] != null)
             | ($by[$t] | map(select((.clean | not) and .type == $ty and .persistent == $p))) as $x
             | "\($t) \($x | map(select(.correct)) | length)/\($x | length)" | pad(20) ]
           | join("")) ),
    "",
    "== by magnitude (us), per tool",
    ( [ $by.mkscope // [] | .[] | select(.clean | not) ] | group_by([.persistent, .magnitude_us])[]
      | (.[0].persistent) as $p | (.[0].magnitude_us) as $mu
      | (if $p then "persistent " else "windowed   " end) + ($mu | tostring | lpad(7)) + "  "
        + ([ $order[] | . as $t | select($by[$t] != null)
             | ($by[$t] | map(select((.clean | not) and .persistent == $p and .magnitude_us == $mu))) as $x
             | "\($t) \($x | map(select(.correct)) | length)/\($x | length)" | pad(20) ]
           | join("")) ),
    "",
    "== bytes (mkscope's agents at \([$by.mkscope // [] | .[].epoch_ms | select(. != null)] | unique | map(tostring + " ms") | join(", ")) epochs, budget \([$by.mkscope // [] | .[].agent_budget | select(. != null)] | unique | map(if . == 0 then "unlimited" else tostring + " B/s" end) | join(", ")), step detail \([$by.mkscope // [] | .[].step_detail // "default"] | unique | join(", ")))",
    ( $rows[] | . as $r | $by[$r.tool] as $s
      | (.tool | pad(15)) + "\(($s | map(.bytes) | add) / ($s | map(.steps * .ranks) | add) | round) B a step and rank"
        + ( [ $s[] | select(.id | test("\\.long$")) ] as $L
            | if ($L | length) == 0 then ""
              else "; long clean run (\($L[0].steps) steps): \($L | map(.bytes) | add | human), "
                   + pct(($L | map(.bytes) | add) * 1000; ($L | map(.trace_bytes) | add) * 1000) + " of the trace's"
              end ) ),
    "",
    "== per tool: \($rows[0].faulty // 0) faulty and \(($rows[0].runs // 0) - ($rows[0].faulty // 0)) clean runs, the same runs for every tool",
    ("tool" | pad(15)) + ("cause" | lpad(8)) + ("culprit" | lpad(9)) + ("both" | lpad(8))
      + ("undecid." | lpad(9)) + ("false-conf" | lpad(11)) + ("alarms" | lpad(8))
      + ("bytes/run" | lpad(11)) + ("of trace" | lpad(10)) + ("step +%" | lpad(9))
      + ("new question" | lpad(22)),
    ( $rows[]
      | (.tool | pad(15)) + (pct(.cause; .faulty) | lpad(8)) + (pct(.culprit; .faulty) | lpad(9))
        + (pct(.both; .faulty) | lpad(8)) + (pct(.undecided; .faulty) | lpad(9))
        + (pct(.fc; .runs) | lpad(11)) + ("\(.alarms)/\(.clean)" | lpad(8))
        + (.bytes | human | lpad(11)) + (pct(.ratio * 1000; 1000) | lpad(10))
        + ((if .perturb == null then "-" else "\((.perturb * 10 | round) / 10)" end) | lpad(9))
        + ((.question // "-") | lpad(22)) ),
    "",
    "cause: the first group's cause is the injected one; culprit: its rank and class (and a",
    "faulty step); both: the two at once; false-conf: a decided wrong answer (undecided is",
    "not), over all runs; alarms: clean runs with a decided group of 3+ steps; bytes/run:",
    "telemetry the tool moved per run; of trace: against the native full trace of the same",
    "runs; step +%: median step time against hooks compiled out (counter.sh --measure)" )
