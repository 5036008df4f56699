# Scores one run of bench/accuracy.sh: the diagnosis ($diag, the groups that
# `mkscope -f json diagnose` printed, one object each) against the bench's
# ground truth ($truth, written by mkscope-bench --truth from the fault spec
# alone).  Nothing here is shared with the diagnosis.
#
# Faulty run: the first group must name the truth's cause, rank and task
# class (no class for slow-rank), on at least one of the faulty steps.  A
# decided first group that is wrong is false confidence; undecided is not.
# Clean run: any group of 3 or more steps with a decided cause is a false
# alarm (and false confidence).  Per rank: the truth's faulty rank has a
# local cause, every other rank a remote stall; the first group's root is
# the rank it calls local, the ranks of its chain's remote stalls and of its
# `stalled` list the ones it calls remote.
def decided: (.cause // "none") as $c | $c != "undecided" and $c != "none";
($diag | map(select(.cause != "none"))) as $gs
| ($truth.faults[0]) as $f
| ($truth.ranks) as $R
| if $f == null then
    ($gs | map(select(decided and ((.steps | length) >= 3)))) as $bad
    | {clean: true, ranks: $R, steps: $truth.steps,
       pred_cause: (if ($bad | length) > 0 then $bad[0].cause else "none" end),
       false_alarm: (($bad | length) > 0), false_conf: (($bad | length) > 0),
       groups: ($gs | length),
       decided_3plus: ($bad | length)}
  else
    ($gs[0] // {cause: "none"}) as $top
    | ($top.root.rank // -1) as $root
    | ([$top.chain[]? | select(.cause == "remote_stall") | .rank]
       + [$top.stalled[]?.rank] | unique) as $remote
    | {clean: false, ranks: $R, steps: $truth.steps, type: $f.type, truth_cause: $f.cause,
       truth_rank: $f.rank, truth_class: $f.class, magnitude_us: $f.magnitude_us,
       persistent: ($f.persistent // false),
       pred_cause: ($top.cause // "none"), pred_rank: $root,
       pred_class: ($top.root.task_class // null),
       share: ($top.share // null), runner_up: ($top.runner_up.cause // null),
       straggler: ($top.straggler // false),
       rank_ok: ($root == $f.rank),
       class_ok: ($f.class == null or ($top.root.task_class // null) == $f.class),
       steps_ok: ([$top.steps[]? | select(. >= $f.steps[0] and . <= $f.steps[1] + 1)]
                  | length > 0)}
    | .culprit_ok = (.rank_ok and .class_ok and .steps_ok)
    | .correct = (.culprit_ok and .pred_cause == .truth_cause)
    | .false_conf = (($top | decided) and (.correct | not))
    | .per_rank = [range(0; $R) as $r
                   | {rank: $r, truth: (if $r == $f.rank then "local" else "remote" end),
                      pred: (if $r == $root then "local"
                             elif ($remote | index($r)) != null then "remote"
                             else "none" end)}]
  end
