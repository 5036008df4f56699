#!/usr/bin/env bash
# Build mkscope-bench's CUDA backend on a GPU machine and run, on 1 and 2
# GPUs (one rank per GPU):
#   check    every build variant on the small default model with --check
#            (tokens against the CPU reference);
#   fault    every fault type on the small model with --check and --truth
#            (the truth file must name the fault, the injector must have
#            changed tasks);
#   time     the build variants on a larger model (--size), step times;
#   ftime    every fault type on the larger model, the step time added
#            inside the fault window.
# Variants: persistent megakernel with hooks compiled out, compiled in and
# detached, the native task profiler; kernel-per-operator with NCCL
# all-reduce; its CUDA Graph.
#
#   bench/gpu/run.sh [--steps N] [--ranks "1 2"] [--size small|medium|large]
#                    [--out DIR] [--budget S] [--timeout S] [--only PHASES]
#
# Every GPU process runs under `timeout` (--timeout, default 60 s); once
# --budget seconds (default 480) have passed the remaining runs are skipped,
# so the summary table (printed last, also DIR/summary.txt) always comes out.
# Full logs, result and truth JSON per run go to DIR (default $OUT, else
# ./bench-gpu-out).
# Env: CMAKE_PREFIX_PATH for dependencies unpacked into a prefix (jansson,
#      libbpf for devhooks), NCCL_HOME if NCCL is not found by CMake,
#      MKS_GPU_BUILD for the build directory, MKS_BENCH_BACKEND=cpu to try
#      the script's plumbing on a machine without a GPU (2 ranks assumed).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/bench-gpu-out}
steps=100
ranks_list="1 2"
size=medium
budget=480
tmo=60
only="check fault time ftime"
usage="usage: $0 [--steps N] [--ranks \"1 2\"] [--size small|medium|large] [--out DIR] [--budget S] [--timeout S] [--only \"check fault time ftime\"]"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    case $1 in
    --steps) steps=$2 ;;
    --ranks) ranks_list=$2 ;;
    --size) size=$2 ;;
    --out) out=$2 ;;
    --budget) budget=$2 ;;
    --timeout) tmo=$2 ;;
    --only) only=$2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift 2
done
case $size in
small) model="" ;;
medium) model="--layers 4 --hidden 1024 --heads 8 --head-dim 64 --experts 16 --ffn 1024 --vocab 4096 --tiles 32 --batch 8 --max-len 64" ;;
large) model="--layers 8 --hidden 4096 --heads 16 --head-dim 64 --experts 64 --ffn 2048 --vocab 16384 --tiles 64 --batch 16 --max-len 128" ;;
*) echo "$0: --size must be small, medium or large" >&2; exit 2 ;;
esac
# NVLink multicast stays off: a program using it can take a shared host's
# GPUs out of service.
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
: >"$out/runs.tsv"
build=${MKS_GPU_BUILD:-$root/build-gpu-bench}
t0=$SECONDS

{
    nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
    nvidia-smi topo -m
} >"$out/gpus.txt" 2>&1 || true
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
backend=${MKS_BENCH_BACKEND:-cuda}
[ "$backend" = cpu ] && ngpu=2
echo "GPUs: $ngpu ($(head -n1 "$out/gpus.txt"))"

echo "== configure and build ($build)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMKS_BUILD_TESTS=OFF \
    -DMKS_MODULES="devhooks;comm-ids;bench" >"$out/build.log" 2>&1; then
    tail -n 30 "$out/build.log"
    exit 1
fi
# one target at a time: a variant that fails to build leaves the others
for t in mkscope-bench-nohooks mkscope-bench mkscope-bench-prof; do
    cmake --build "$build" -j"$(nproc)" --target "$t" >>"$out/build.log" 2>&1 ||
        echo "   build of $t FAILED (build.log)"
done
grep -q "NCCL.*NOTFOUND" "$out/build.log" && echo "   NCCL not found: per-op and graph will fail"
echo "   built in $((SECONDS - t0)) s"
bin=$build/bench
nrun=0
hung=""

# run PHASE NAME R EXE ARGS...: one mkscope-bench run, recorded in runs.tsv
run() {
    local phase=$1 name=$2 R=$3 exe=$4 rc
    shift 4
    if [ $((SECONDS - t0)) -ge "$budget" ]; then
        printf '%s\t%s\t%s\t%s\n' "$phase" "$name" "$R" skipped >>"$out/runs.tsv"
        return 0
    fi
    # a mode that hung once on R ranks is not tried again there, in any build
    # (each hang costs --timeout)
    local key mode
    mode=$(printf '%s\n' "$@" | grep -A1 -x -- --cuda-mode | tail -n1)
    key="${mode:-persistent}/$R"
    case " $hung " in *" $key "*)
        printf '%s\t%s\t%s\t%s\n' "$phase" "$name" "$R" "skipped" >>"$out/runs.tsv"
        return 0 ;;
    esac
    if [ ! -x "$bin/$exe" ]; then
        printf '%s\t%s\t%s\t%s\n' "$phase" "$name" "$R" nobuild >>"$out/runs.tsv"
        return 0
    fi
    local vis=()
    [ "$R" -eq 1 ] && vis=(env CUDA_VISIBLE_DEVICES=0)
    local t=$SECONDS
    nrun=$((nrun + 1)) # a job name per run: a killed run may leave its shared memory
    "${vis[@]}" timeout -k 5 "$tmo" "$bin/$exe" run --backend "$backend" --ranks "$R" \
        --job "gb$$x$nrun" \
        --json "$out/$name.json" "$@" >"$out/$name.log" 2>&1
    rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && hung="$hung $key"
    printf '%s\t%s\t%s\t%s\n' "$phase" "$name" "$R" "$rc" >>"$out/runs.tsv"
    echo "-- $name: rc $rc, $((SECONDS - t)) s"
    [ "$rc" -eq 0 ] || tail -n 3 "$out/$name.log" | sed 's/^/   /'
    return 0
}

faults_for() { # the fault specs for R ranks (notify-delay on a local class with one rank)
    local R=$1
    echo "task-delay:rank=0,class=o_proj"
    echo "moe-skew:rank=0"
    if [ "$R" -gt 1 ]; then echo "notify-delay:rank=1"; else echo "notify-delay:rank=0,class=qkv_proj"; fi
    echo "queue-oversub:rank=0,class=qkv_proj"
    echo "tile-starve:rank=0,class=qkv_proj,tile=1"
    [ "$R" -gt 1 ] && echo "comm-delay:rank=1,gen=1"
    return 0
}

variants() { # variants PHASE PREFIX R ARGS...
    local phase=$1 p=$2 R=$3
    shift 3
    run "$phase" "${p}_nohooks" "$R" mkscope-bench-nohooks "$@"
    run "$phase" "${p}_detached" "$R" mkscope-bench "$@"
    if [ "$phase" = check ]; then
        run "$phase" "${p}_profiler" "$R" mkscope-bench-prof --trace "$out/${p}_trace" "$@"
    else
        run "$phase" "${p}_profiler" "$R" mkscope-bench-prof "$@"
    fi
    run "$phase" "${p}_per_op" "$R" mkscope-bench-nohooks --cuda-mode per-op "$@"
    run "$phase" "${p}_graph" "$R" mkscope-bench-nohooks --cuda-mode graph "$@"
}

usable=""
for R in $ranks_list; do
    if [ "$R" -gt "$ngpu" ]; then
        echo "skipping $R ranks: $ngpu GPU(s)"
    else
        usable="$usable $R"
    fi
done
has() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }

for R in $usable; do
    if has check; then
        variants check "c_r$R" "$R" --steps 40 --check
        # shellcheck disable=SC2086
        [ -n "$model" ] && run check "c_r${R}_${size}" "$R" mkscope-bench --steps 12 $model --check
    fi
    if has fault; then
        while read -r f; do
            name="f_r${R}_${f%%:*}"
            run fault "$name" "$R" mkscope-bench --steps 40 --check \
                --fault "$f,magnitude=1000,steps=10-29" --truth "$out/$name.truth.json"
        done < <(faults_for "$R")
    fi
done
for R in $usable; do
    # shellcheck disable=SC2086
    has time && variants time "t_r$R" "$R" --steps "$steps" $model
done
for R in $usable; do
    if has ftime; then
        while read -r f; do
            # shellcheck disable=SC2086
            run ftime "ft_r${R}_${f%%:*}" "$R" mkscope-bench --steps 60 $model \
                --fault "$f,magnitude=1000,steps=20-39"
        done < <(faults_for "$R")
    fi
done
echo "   runs took $((SECONDS - t0)) s in all"

python3 - "$out" "$size" "$steps" <<'PY' | tee "$out/summary.txt"
import json, os, re, statistics, sys
out, size, steps = sys.argv[1], sys.argv[2], sys.argv[3]

def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None

def med(v):
    return statistics.median(v) if v else float("nan")

rows = []
for line in open(os.path.join(out, "runs.tsv")):
    phase, name, R, rc = line.rstrip("\n").split("\t")
    d = load(os.path.join(out, name + ".json"))
    log = ""
    try:
        log = open(os.path.join(out, name + ".log")).read()
    except Exception:
        pass
    status = {"0": "ok", "124": "TIMEOUT", "137": "KILLED", "skipped": "skipped",
              "nobuild": "not built"}.get(rc, "rc " + rc)
    step = added = tps = ""
    faulted = ""
    if d and d.get("ranks"):
        ranks = d["ranks"]
        # median over ranks of each rank's median step, first 5 steps left out
        step = "%.1f" % max(med(r["step_ns"][5:] or r["step_ns"]) / 1e3 for r in ranks)
        tps = "%.3g" % (sum(r.get("tasks_per_s", 0) for r in ranks) / len(ranks))
        faulted = str(sum(r.get("faulted_tasks", 0) for r in ranks))
        if phase in ("fault", "ftime"):
            lo, hi = (10, 29) if phase == "fault" else (20, 39)
            inside = [max(r["step_ns"][s] for r in ranks) for s in range(lo, hi + 1)]
            outside = [max(r["step_ns"][s] for r in ranks)
                       for s in range(5, len(ranks[0]["step_ns"])) if not lo <= s <= hi]
            added = "%+.1f" % ((med(inside) - med(outside)) / 1e3)
    check = "-"
    if "check: tokens match" in log:
        check = "match"
    else:
        m = re.search(r"(\d+) of (\d+) tokens differ", log)
        if m:
            check = "%s/%s differ" % m.groups()
    truth = "-"
    if phase == "fault":
        t = load(os.path.join(out, name + ".truth.json"))
        want = name.split("_", 2)[2]
        ok = bool(t and t.get("faults") and t["faults"][0].get("type") == want)
        truth = ("names " + want) if ok else "WRONG"
    rows.append((phase, name, R, status, step, added, tps, check, truth, faulted))

hdr = ("phase", "run", "R", "status", "step_us", "added_us", "tasks/s", "check", "truth",
       "faulted")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
print("== summary (size %s for time/ftime, %s steps; step_us: slowest rank's median step, "
      "first 5 left out; added_us: median step in the fault window minus outside)" % (size, steps))
for r in [hdr] + rows:
    print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)))
bad = [r[1] for r in rows if r[3] != "ok" or "differ" in r[7] or r[8] == "WRONG"
       or (r[0] == "fault" and r[9] in ("", "0"))]
print("RESULT: %s" % ("all runs ok" if not bad else "problems in " + " ".join(bad)))
PY
echo "results in $out"
