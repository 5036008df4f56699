#!/usr/bin/env bash
# Do faults of one magnitude look alike from outside?  Runs mkscope-bench
# with every fault type at one magnitude and a clean baseline side by side,
# the same binary and configuration, repetitions interleaved (each round
# runs the clean job and every type once, in a rotated order) so that
# machine noise hits them alike.  The outer picture is the job's step time:
# per step, the mean over ranks of the results JSON's step_ns (all ranks
# meet at every all-reduce, so each sees the job's step).  Per type it
# prints the mean step time over the faulted steps minus the clean runs'
# mean over the same steps (same seed: the same requests join and leave),
# that as a ratio to the magnitude, the standard error over rounds, the same
# with medians instead of means (robust when other work on the machine
# stalls a few steps by milliseconds), the mean difference outside the
# faulted steps (the injector should cost nothing there; the first 5 steps
# left out), and the spread: the largest type's added time over the
# smallest's.  With --loop on (the default) a clean calibration run comes
# first and every faulted run gets it as --baseline: the fault plan's
# closed loop then scales its delays to the magnitude (docs/bench.md);
# --loop off measures the plan as written.
#
#   bench/faults_alike.sh BENCH_EXE [--backend cpu|cuda] [--size small|medium]
#       [--ranks N] [--magnitude US] [--steps N] [--window A-B] [--reps N]
#       [--fault-rank R] [--types "task-delay ..."] [--out DIR] [--timeout S]
#       [--loop on|off]
#
# Defaults: cpu backend, small (the default model), 4 ranks, 2000 us on
# rank 1 (rank 0 with one rank) in steps 30-79 of 100, 5 rounds.  Types: all
# six; comm-delay needs 2 ranks and is left out with one.  With one rank
# notify-delay delays qkv_proj's releases (there are no sends).  The extra
# type skew-routing is moe-skew at magnitude 0: the skewed routing alone,
# shown as a row (its ratio: its added time over the magnitude) but left out
# of the spread.  The CUDA backend runs one rank per visible GPU (set
# CUDA_VISIBLE_DEVICES).  Every run goes under `timeout` (--timeout, default
# 120 s).  Result JSON and logs
# go to DIR (default a temporary folder, removed); the table also to
# DIR/summary.txt and the numbers to DIR/summary.json.  Exit code 1 if a
# run failed, 2 on bad options.
set -uo pipefail

usage="usage: $0 BENCH_EXE [--backend cpu|cuda] [--size small|medium] [--ranks N] [--magnitude US] [--steps N] [--window A-B] [--reps N] [--fault-rank R] [--types \"...\"] [--out DIR] [--timeout S] [--loop on|off]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
exe=$1
shift
[ -x "$exe" ] || { echo "$0: $exe is not an executable (give the path of mkscope-bench)" >&2; exit 2; }
backend=cpu size=small ranks=4 mag=2000 steps=100 window=30-79 reps=5 frank="" out="" tmo=120
loop=on
types="task-delay moe-skew notify-delay queue-oversub comm-delay tile-starve"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    case $1 in
    --backend) backend=$2 ;;
    --size) size=$2 ;;
    --ranks) ranks=$2 ;;
    --magnitude) mag=$2 ;;
    --steps) steps=$2 ;;
    --window) window=$2 ;;
    --reps) reps=$2 ;;
    --fault-rank) frank=$2 ;;
    --types) types=$2 ;;
    --out) out=$2 ;;
    --timeout) tmo=$2 ;;
    --loop) loop=$2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift 2
done
case "$ranks$mag$steps$reps$tmo$frank" in
*[!0-9]* | '') echo "$0: --ranks, --magnitude, --steps, --reps, --fault-rank, --timeout take numbers" >&2; exit 2 ;;
esac
[[ $window =~ ^([0-9]+)-([0-9]+)$ ]] || { echo "$0: --window is A-B (first and last faulted step)" >&2; exit 2; }
lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
[ "$lo" -le "$hi" ] && [ "$hi" -lt "$steps" ] ||
    { echo "$0: --window $window must lie inside the $steps steps" >&2; exit 2; }
[ "$reps" -ge 1 ] && [ "$ranks" -ge 1 ] || { echo "$0: --reps and --ranks must be at least 1" >&2; exit 2; }
case $backend in cpu | cuda) ;; *) echo "$0: --backend is cpu or cuda" >&2; exit 2 ;; esac
case $loop in on | off) ;; *) echo "$0: --loop is on or off" >&2; exit 2 ;; esac
case $size in
small) model=() ;;
medium) model=(--layers 4 --hidden 1024 --heads 8 --head-dim 64 --experts 16 --ffn 1024 --vocab 4096
    --tiles 32 --batch 8 --max-len 64) ;;
*) echo "$0: --size is small or medium" >&2; exit 2 ;;
esac
[ -n "$frank" ] || frank=$((ranks > 1 ? 1 : 0))
[ "$frank" -lt "$ranks" ] || { echo "$0: --fault-rank $frank: the job has $ranks ranks" >&2; exit 2; }

spec_of() { # the fault spec of a type (its default class unless told otherwise)
    local t=$1 extra=""
    [ "$t" = notify-delay ] && [ "$ranks" -eq 1 ] && extra=",class=qkv_proj"
    if [ "$t" = skew-routing ]; then
        echo "moe-skew:rank=$frank,magnitude=0,steps=$lo-$hi"
        return
    fi
    echo "$t:rank=$frank$extra,magnitude=$mag,steps=$lo-$hi"
}
list=(clean)
for t in $types; do
    case $t in
    task-delay | moe-skew | notify-delay | queue-oversub | tile-starve | skew-routing) list+=("$t") ;;
    comm-delay) [ "$ranks" -gt 1 ] && list+=("$t") ;;
    *) echo "$0: unknown fault type $t" >&2; exit 2 ;;
    esac
done

if [ -n "$out" ]; then
    mkdir -p "$out" || exit 2
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
echo "== $backend, $size, $ranks ranks, $steps steps, faults on rank $frank in steps $lo-$hi," \
    "magnitude $mag us, $reps rounds (load average $load0)"
failed=0
base=()
if [ "$loop" = on ]; then
    if timeout -k 5 "$tmo" "$exe" run --backend "$backend" --ranks "$ranks" --steps "$steps" \
        "${model[@]}" --job "fa$$c" -q --json "$out/calib.json" >"$out/calib.log" 2>&1; then
        base=(--baseline "$out/calib.json")
        echo "closed loop: faulted runs take the clean run calib.json as --baseline"
    else
        echo "   calibration run failed ($(tail -n 1 "$out/calib.log")): the plan as written" >&2
        failed=1
    fi
fi
n=${#list[@]}
for r in $(seq "$reps"); do
    for i in $(seq 0 $((n - 1))); do
        c=${list[$(((i + r - 1) % n))]} # rotated: no type always runs first
        args=()
        [ "$c" != clean ] && args=(--fault "$(spec_of "$c")" "${base[@]}")
        timeout -k 5 "$tmo" "$exe" run --backend "$backend" --ranks "$ranks" --steps "$steps" \
            "${model[@]}" --job "fa$$x$r$i" -q "${args[@]}" --json "$out/$c.$r.json" \
            >"$out/$c.$r.log" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "   $c round $r: exit $rc ($(tail -n 1 "$out/$c.$r.log"))" >&2
            rm -f "$out/$c.$r.json"
            failed=1
        fi
    done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)

python3 - "$out" "$lo" "$hi" "$mag" "$reps" "$load0" "$load1" "${list[@]}" <<'PY' | tee "$out/summary.txt"
import json, math, os, statistics, sys
out, lo, hi, mag, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
load0, load1, names = sys.argv[6], sys.argv[7], sys.argv[8:]

def job_steps(path):
    """The job's step times (us, mean over ranks), the injector's task count."""
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        return None
    ranks = d["ranks"]
    return ([sum(r["step_ns"][s] for r in ranks) / len(ranks) / 1e3
             for s in range(len(ranks[0]["step_ns"]))],
            sum(r.get("faulted_tasks", 0) for r in ranks))

def mean(v):
    return sum(v) / len(v) if v else float("nan")

runs = {c: [job_steps(os.path.join(out, "%s.%d.json" % (c, r))) for r in range(1, reps + 1)]
        for c in names}

def pooled(c, outside=False):
    v = []
    for x in runs[c]:
        if x:
            v += x[0][5:lo] + x[0][hi + 1:] if outside else x[0][lo:hi + 1]
    return v

def round_means(c):
    return [mean(x[0][lo:hi + 1]) if x else None for x in runs[c]]

clean_in = pooled("clean")
if not clean_in:
    print("no clean run completed: nothing to compare")
    sys.exit(0)
clean_out = pooled("clean", True)
base = round_means("clean")
print("clean: %.1f us a step over steps %d-%d (mean; median %.1f; %d rounds)" %
      (mean(clean_in), lo, hi, statistics.median(clean_in), sum(1 for b in base if b is not None)))
print("%-14s %10s %10s %7s %8s %10s %7s %8s %10s" % ("fault", "step_us", "added_us", "ratio", "se_us",
      "med_added", "m_ratio", "tasks", "outside_us"))
rows = {}
for c in names[1:]:
    v = pooled(c)
    if not v:
        print("%-14s   no run completed" % c)
        continue
    added = mean(v) - mean(clean_in)
    med = statistics.median(v) - statistics.median(clean_in)
    # paired with the clean run of the same round where both completed
    diffs = [f - b for f, b in zip(round_means(c), base) if f is not None and b is not None]
    se = float("nan")
    if len(diffs) > 1:
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    o = pooled(c, True)
    outside = mean(o) - mean(clean_out) if o and clean_out else float("nan")
    tasks = next(x[1] for x in runs[c] if x)
    rows[c] = {"step_us": mean(v), "added_us": added, "ratio": added / mag if mag else float("nan"),
               "se_us": se, "median_added_us": med,
               "median_ratio": med / mag if mag else float("nan"), "faulted_tasks": tasks,
               "rounds": len(diffs), "outside_us": outside}
    print("%-14s %10.1f %+10.1f %7.3f %8.1f %+10.1f %7.3f %8d %+10.1f" %
          (c, mean(v), added, rows[c]["ratio"], se, med, rows[c]["median_ratio"], tasks, outside))
spread = {}
faults = [r for c, r in rows.items() if c != "skew-routing"]
for key, label in (("added_us", "mean"), ("median_added_us", "median")):
    a = [r[key] for r in faults]
    if not a:
        continue
    spread[label] = max(a) / min(a) if min(a) > 0 else float("nan")
    print("spread (max/min added, %s): %.3f; ratios %.3f..%.3f" %
          (label, spread[label], min(a) / mag, max(a) / mag))
print("load average %s -> %s" % (load0, load1))
json.dump({"magnitude_us": mag, "window": [lo, hi], "rounds": reps, "clean_step_us": mean(clean_in),
           "faults": rows, "spread": spread, "load": [load0, load1]},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
exit $failed
