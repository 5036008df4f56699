#!/usr/bin/env bash
# What observing costs on one GPU, side by side in one call: the reference
# megakernel (mkscope-bench --backend cuda, persistent kernel, 1 rank,
# --step-interval-us 2000) with hooks compiled out, compiled in and
# detached, the MPK-style native profiler, each standard monitor alone
# (count latency depwait queue genprog, through an agent at 100 ms epochs),
# all five, and a 30-instruction histogram on every event
# (bench/gpu/hist_all.bpf.c); over a sweep of task sizes (the small model,
# and the medium one with 8, 32 and 64 tiles per operator), in
# interleaved rounds.  Per run: median step of steps 5 onward, tasks and
# events per step, the agent's bytes sent and the coverage the collector
# stored (eligible, lost), the profiler's trace.  Before the runs, the VM's
# conformance cases on the GPU (mkscope-vm-conformance-gpu, with
# MKS_CONFORMANCE_DIR or BIN/../conformance) and the device cost
# benchmark (mkscope-devhooks-cost: ns per event on the worker, the monitor
# warp's events/s per SM, saturated, in step and lanes alone, and its
# loss); the registers, shared
# memory, stack and spills of each build's megakernel and of the monitor
# warp, and the table, printed last.  CSVs: OUT/runs.csv (every run),
# OUT/points.csv (medians per point and variant), OUT/resources.csv.
#
#   bench/gpu/overhead.sh [--out DIR] [--rounds N] [--points "small m8 m32 m64"]
#                         [--main m32] [--budget S] [--timeout S] [--no-cost]
#
# --points: sweep points (small: the bench's default model; mT: the medium
# model of bench/gpu/run.sh with T tiles per operator); every variant runs
# at --main, the sweep's other points run out, detached, profiler, all five
# and the histogram.  Once --budget seconds (default 420) have passed, what
# is left is skipped and the table still comes out.
#
# Binaries: MKS_BIN_DIR=DIR takes prebuilt mkscope-bench{,-nohooks,-prof},
# mkscope-agent, mkscope-collector, mkscope, mkscope-devhooks-cost,
# mkscope-vm-conformance-gpu (see
# bench/gpu/overhead_prep.sh) with MKS_MONITORS_DIR for the monitor
# objects; otherwise the tree is built here (MKS_DEBS, MKS_PROTO_GEN_DIR,
# MKS_PREBUILT_BPF_DIR as for bench/gpu/e2e.sh).  MKS_DEBS also gives the
# runtime libraries (LD_LIBRARY_PATH) of prebuilt binaries.
#
# MPK: once the Mirage MPK runtime is behind the hook ABI, MKS_MPK_RUNNER
# names its runner, a command that takes the same variant words
# (out detached profiler count ... all5 hist) and --json FILE, and prints
# nothing else on success; the script then measures it alike in an `mpk`
# point (see mpk_run below).  Until then the point is reported as not run.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/overhead-out}
rounds=3 points="small m8 m32 m64" main=m32 budget=420 tmo=60 cost=1
usage="usage: $0 [--out DIR] [--rounds N] [--points \"small m8 m32 m64\"] [--main m32] [--budget S] [--timeout S] [--no-cost]"
while [ $# -gt 0 ]; do
    if [ "$1" = --no-cost ]; then cost=0; shift; continue; fi
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    case $1 in
    --out) out=$2 ;;
    --rounds) rounds=$2 ;;
    --points) points=$2 ;;
    --main) main=$2 ;;
    --budget) budget=$2 ;;
    --timeout) tmo=$2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift 2
done
case "$rounds$budget$tmo" in *[!0-9]* | '') echo "$0: numbers expected; $usage" >&2; exit 2 ;; esac
for p in $points $main; do
    case $p in
    small) ;;
    m[0-9]*)
        t=${p#m}
        case $t in *[!0-9]*) echo "$0: point '$p': small or mT (T tiles)" >&2; exit 2 ;; esac
        [ "$t" -ge 1 ] && [ "$t" -le 64 ] ||
            { echo "$0: point '$p': T tiles in 1..64 (the bench's limit)" >&2; exit 2; } ;;
    *) echo "$0: point '$p': small or mT (T tiles)" >&2; exit 2 ;;
    esac
done
case " $points " in *" $main "*) ;; *) echo "$0: --main $main is not among --points" >&2; exit 2 ;; esac

# NVLink multicast stays off: a program using it can take a shared host's
# GPUs out of service.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
backend=${MKS_BENCH_BACKEND:-cuda} # cpu: the script's plumbing on a machine without a GPU
mkdir -p "$out"
out=$(cd "$out" && pwd)
# each run's files in a work directory; OUT gets the tables, the run logs
# as one archive and the monitor warp's machine code (8 files)
work=$(mktemp -d "${TMPDIR:-/tmp}/mkscope-overhead.XXXXXX")
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    >"$work/gpu.txt" 2>&1 || true
echo "GPU: $(head -n1 "$work/gpu.txt")"

# shellcheck source=bench/gpu/debs_prefix.sh
source "$root/bench/gpu/debs_prefix.sh"
mks_debs_prefix mkscope-overhead-prefix || exit 1
bin=${MKS_BIN_DIR:-}
if [ -z "$bin" ]; then
    build=${MKS_OVERHEAD_BUILD:-$root/build-gpu-overhead}
    [ -n "${MKS_PROTO_GEN_DIR:-}" ] && cmake_args+=(-DMKS_PROTO_GEN_DIR="$MKS_PROTO_GEN_DIR")
    [ -n "${MKS_PREBUILT_BPF_DIR:-}" ] && cmake_args+=(-DMKS_PREBUILT_BPF_DIR="$MKS_PREBUILT_BPF_DIR")
    echo "== configure and build ($build)"
    if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMKS_BUILD_TESTS=OFF \
        -DMKS_MODULES="devhooks;comm-ids;proto;query;agent;collector;bench" "${cmake_args[@]}" \
        >"$out/build.log" 2>&1 ||
        ! cmake --build "$build" -j"$(nproc)" --target mkscope-bench mkscope-bench-nohooks \
            mkscope-bench-prof mkscope-agent mkscope-collector mkscope mkscope-devhooks-cost \
            mkscope-vm-conformance-gpu >>"$out/build.log" 2>&1; then
        grep -m 20 -E "error|Error" "$out/build.log"
        exit 1
    fi
    bin=$out/bin
    mkdir -p "$bin"
    for b in bench/mkscope-bench bench/mkscope-bench-nohooks bench/mkscope-bench-prof \
        agent/mkscope-agent collector/mkscope-collector collector/cli/mkscope \
        devhooks/mkscope-devhooks-cost devhooks/mkscope-vm-conformance-gpu; do
        ln -sf "$build/$b" "$bin/"
    done
    export MKS_MONITORS_DIR=${MKS_MONITORS_DIR:-$build/agent/monitors}
    echo "   built in $((SECONDS - t0)) s"
fi
# The runtime libraries for our programs only (not for python3, cuobjdump,
# nvidia-smi, which have the machine's own).
runenv=(env)
[ -n "$prefix_lib" ] && runenv=(env "LD_LIBRARY_PATH=$prefix_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
missing=$(for b in "$bin"/*; do [ -e "$b" ] && "${runenv[@]}" ldd "$b"; done 2>&1 | grep "not found" | sort -u)
[ -z "$missing" ] || { echo "$0: libraries not found: $missing" >&2; exit 1; }
mon=${MKS_MONITORS_DIR:?MKS_MONITORS_DIR: the directory of the monitor objects}
for m in count latency depwait queue genprog hist_all; do
    [ -f "$mon/$m.bpf.o" ] || { echo "$0: $mon/$m.bpf.o missing" >&2; exit 1; }
done

model_of() { # the bench's model arguments of a point
    case $1 in
    small) echo "--steps 100" ;;
    m*) echo "--steps 30 --layers 4 --hidden 1024 --heads 8 --head-dim 64 --experts 16 --ffn 1024" \
        "--vocab 4096 --tiles ${1#m} --batch 8 --max-len 64" ;;
    esac
}
attach_of() { # the agent's --attach list of a variant
    case $1 in
    all5) echo count,latency,depwait,queue,genprog ;;
    hist) echo hist_all ;;
    *) echo "$1" ;;
    esac
}
main_variants="out detached profiler count latency depwait queue genprog all5 hist"
sweep_variants="out detached profiler all5 hist"

echo "point,variant,round,rc,step_us,steps,tasks,eligible,ran,lost,throttled,bytes_sent,trace_bytes,trace_records" \
    >"$out/runs.csv"
nrun=0
# one_run POINT VARIANT ROUND: one run, one line of runs.csv
one_run() {
    local point=$1 var=$2 round=$3 d rc=0 args
    nrun=$((nrun + 1))
    d=$work/r$nrun
    mkdir -p "$d"
    if [ $((SECONDS - t0)) -ge "$budget" ]; then
        echo "$point,$var,$round,skipped,,,,,,,,,," >>"$out/runs.csv"
        return 0
    fi
    # shellcheck disable=SC2207
    args=($(model_of "$point") --step-interval-us 2000)
    local t=$SECONDS job=ov$$x$nrun
    case $var in
    out | detached | profiler)
        local exe=mkscope-bench extra=()
        [ "$var" = out ] && exe=mkscope-bench-nohooks
        [ "$var" = profiler ] && exe=mkscope-bench-prof && extra=(--trace "$d/trace")
        "${runenv[@]}" timeout -k 5 "$tmo" "$bin/$exe" run --backend "$backend" --ranks 1 --job "$job" \
            --json "$d/bench.json" "${args[@]}" "${extra[@]}" >"$d/log" 2>&1
        rc=$?
        ;;
    *)
        local steps=${args[1]}
        "${runenv[@]}" MKS_AGENT_BIN="$bin/mkscope-agent" MKS_COLLECTOR_BIN="$bin/mkscope-collector" \
            MKS_BENCH_BIN="$bin/mkscope-bench" timeout -k 5 "$tmo" \
            "$root/deploy/local/mkscope-launch" --ranks 1 --backend "$backend" --job "$job" --dir "$d" \
            --steps "$steps" --epoch-ms 100 --keep-collector -q \
            --agent-arg --monitors --agent-arg "$mon" --agent-arg --attach \
            --agent-arg "$(attach_of "$var")" -- "${args[@]:2}" >"$d/log" 2>&1
        rc=$?
        if [ -s "$d/collector.pid" ]; then
            "${runenv[@]}" timeout 20 "$bin/mkscope" --collector "ipc://$d/cli" --timeout 5000 -f json status \
                >"$d/status.json" 2>>"$d/log"
            kill -TERM -- "-$(cat "$d/collector.pid")" 2>/dev/null
            sleep 0.2
            kill -KILL -- "-$(cat "$d/collector.pid")" 2>/dev/null
        fi
        ;;
    esac
    python3 - "$d" "$point" "$var" "$round" "$rc" >>"$out/runs.csv" <<'PY'
import glob, json, os, statistics, sys
d, point, var, rnd, rc = sys.argv[1:]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
b = load(os.path.join(d, "bench.json"))
step = steps = tasks = ""
if b and b.get("ranks"):
    r = b["ranks"][0]
    s = r["step_ns"]
    step = "%.2f" % (statistics.median(s[5:] or s) / 1e3)
    steps = str(len(s))
    tasks = str(r.get("tasks", ""))
el = ran = lost = thr = sent = ""
st = load(os.path.join(d, "status.json"))
if st:
    rk = st.get("ranks") or []
    for x in rk:
        c = x.get("coverage") or {}
        el, ran, thr, lost = (str(c.get(k, "")) for k in ("eligible", "ran", "throttled", "lost"))
ag = load(os.path.join(d, "agent-0.json"))
if ag:
    sent = str(ag.get("bytes_sent", ""))
tb = tr = ""
tf = glob.glob(os.path.join(d, "trace.rank*.json"))
if tf:
    tb = str(os.path.getsize(tf[0]))
    t = load(tf[0])
    if t is not None:
        ev = t.get("traceEvents", t) if isinstance(t, dict) else t
        tr = str(len(ev))
print(",".join([point, var, rnd, rc, step, steps, tasks, el, ran, lost, thr, sent, tb, tr]))
PY
    echo "-- $point $var round $round: rc $rc, $((SECONDS - t)) s" | tee -a "$work/runs.log"
    [ "$rc" -eq 0 ] || tail -n 3 "$d/log" | sed 's/^/   /'
    # the per-run files stay small: only the summary goes back
    rm -f "$d/trace".rank*.json "$d"/*.db "$d"/*.sqlite 2>/dev/null
    return 0
}

# mpk_run VARIANT ROUND: the same variant on the MPK runtime (MKS_MPK_RUNNER),
# recorded as point "mpk".  The runner writes a bench-style --json FILE.
mpk_run() {
    local var=$1 round=$2 d
    nrun=$((nrun + 1))
    d=$work/r$nrun
    mkdir -p "$d"
    if [ -z "${MKS_MPK_RUNNER:-}" ] || [ $((SECONDS - t0)) -ge "$budget" ]; then
        echo "mpk,$var,$round,notrun,,,,,,,,,," >>"$out/runs.csv"
        return 0
    fi
    # shellcheck disable=SC2086
    timeout -k 5 "$tmo" $MKS_MPK_RUNNER "$var" --json "$d/bench.json" >"$d/log" 2>&1
    local rc=$?
    python3 - "$d" "$var" "$round" "$rc" >>"$out/runs.csv" <<'PY'
import json, os, statistics, sys
d, var, rnd, rc = sys.argv[1:]
try:
    r = json.load(open(os.path.join(d, "bench.json")))["ranks"][0]
    s = r["step_ns"]
    print("mpk,%s,%s,%s,%.2f,%d,%s,,,,,,," % (var, rnd, rc, statistics.median(s[5:] or s) / 1e3,
                                             len(s), r.get("tasks", "")))
except Exception:
    print("mpk,%s,%s,%s,,,,,,,,,," % (var, rnd, rc))
PY
}

# Resources of each build's megakernel and of the monitor warp, read from
# the binaries while the runs go on (no GPU needed).
(
    echo "build,function,registers,shared_bytes,stack_bytes,local_bytes"
    for exe in mkscope-bench-nohooks mkscope-bench mkscope-bench-prof; do
        cuobjdump -res-usage "$bin/$exe" 2>/dev/null | python3 -c '
import re, sys
exe = sys.argv[1]
fn = None
for line in sys.stdin:
    m = re.search(r"Function (\S+):", line)
    if m:
        fn = m.group(1)
        continue
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
    if m and fn and ("bg_megakernel" in fn or "monitor_warp" in fn or "run_task_hooked" in fn
                     or "dispatch_hooked" in fn):
        r, st, sh, lo = m.groups()
        print("%s,%s,%s,%s,%s,%s" % (exe, fn, r, sh, st, lo))
' "$exe"
    done
    # the monitor warp's machine code, and what of it is indexed
    # branches (BRX) and local-memory traffic (LDL/STL)
    sass=$work/monitor_warp.sass
    cuobjdump -sass -fun mks_dev_monitor_warp "$bin/mkscope-devhooks-cost" >"$sass" 2>/dev/null &&
        echo "mkscope-devhooks-cost,mks_dev_monitor_warp SASS: $(grep -c . "$sass") lines," \
            "BRX $(grep -c 'BRX' "$sass"), LDL $(grep -c 'LDL' "$sass"), STL $(grep -c 'STL' "$sass")," \
            "BSSY $(grep -c 'BSSY' "$sass"),,,," &&
        gzip -c "$sass" >"$out/monitor_warp.sass.gz"
) >"$out/resources.csv" 2>/dev/null &
res_pid=$!

# First what the device code must do and what it costs alone (short: about
# a minute), so the budget for the runs cannot leave them out: the VM's
# conformance on the GPU (every case in the raw VM, the decoded form on one
# thread and in a warp, each answering as the host's VM), then the cost
# benchmark (ns per event on a worker, the monitor warp's events/s per SM).
conf=${MKS_CONFORMANCE_DIR:-$bin/../conformance}
if [ -x "$bin/mkscope-vm-conformance-gpu" ] && [ -d "$conf" ]; then
    echo "== VM conformance on the GPU ($conf)"
    (cd "$work" && MKS_SOURCE_DIR=$root "${runenv[@]}" timeout -k 5 120 \
        "$bin/mkscope-vm-conformance-gpu" "$conf") >"$out/conformance.txt" 2>&1
    echo "   rc $?: $(tail -n1 "$out/conformance.txt")"
else
    echo "== VM conformance on the GPU: not run (no $bin/mkscope-vm-conformance-gpu or $conf)" |
        tee "$out/conformance.txt"
fi
if [ "$cost" = 1 ]; then
    echo "== devhooks cost benchmark (short tasks)"
    "${runenv[@]}" timeout -k 5 150 "$bin/mkscope-devhooks-cost" 10000 64 >"$out/cost.txt" 2>&1 ||
        echo "   cost benchmark rc $?"
    echo "   done at $((SECONDS - t0)) s"
fi

echo "== runs (rounds $rounds, points $points, main $main, budget $budget s)"
for ((round = 1; round <= rounds; round++)); do
    for p in $points; do
        vs=$sweep_variants
        [ "$p" = "$main" ] && vs=$main_variants
        # a rotating order, so no variant always runs first or last
        set -- $vs
        n=$#
        k=$(((round - 1) % n))
        order=("${@:k+1}" "${@:1:k}")
        for v in "${order[@]}"; do one_run "$p" "$v" "$round"; done
    done
    for v in out detached profiler all5 hist; do mpk_run "$v" "$round"; done
done
echo "   runs took $((SECONDS - t0)) s in all"

wait "$res_pid" 2>/dev/null

# the binaries' commit: overhead_prep.sh's, else the tree's
commit=$(head -c 12 "$bin/../commit" 2>/dev/null || git -C "$root" rev-parse --short HEAD 2>/dev/null)
python3 - "$out" "$main" "$(head -n1 "$work/gpu.txt")" "$commit" \
    <<'PY' | tee "$out/summary.txt"
import csv, os, statistics, sys
out, main = sys.argv[1], sys.argv[2]
print("GPU: %s; binaries of %s" % (sys.argv[3], sys.argv[4] or "?"))
rows = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
def num(x):
    try:
        return float(x)
    except Exception:
        return None
# per (point, variant): median over rounds
agg = {}
for r in rows:
    if r["rc"] != "0" or num(r["step_us"]) is None:
        continue
    agg.setdefault((r["point"], r["variant"]), []).append(r)
def med(k, f):
    v = [num(x[f]) for x in agg.get(k, []) if num(x[f]) is not None]
    return statistics.median(v) if v else None
points = []
for r in rows:
    if r["point"] not in points:
        points.append(r["point"])
order = ["out", "detached", "profiler", "count", "latency", "depwait", "queue", "genprog", "all5",
         "hist"]
with open(os.path.join(out, "points.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["point", "variant", "rounds", "step_us", "vs_out_pct", "tasks_per_step",
                "task_events_per_s", "events_per_step", "ns_per_event", "lost", "bytes_sent",
                "trace_bytes", "trace_records"])
    table = []
    for p in points:
        base = med((p, "out"), "step_us")
        for v in order:
            k = (p, v)
            if k not in agg:
                continue
            st = med(k, "step_us")
            steps = med(k, "steps") or 1
            tasks = med(k, "tasks")
            tps = tasks / steps if tasks else None
            evs = (tps * 5 / (st / 1e6)) if tps and st else None  # 5 task events per task
            el = med(k, "eligible")
            eps = el / steps if el else None
            pct = (st / base - 1) * 100 if base else None
            nse = ((st - base) * 1e3 / eps) if base and eps else None
            row = [p, v, len(agg[k]), "%.2f" % st, "" if pct is None else "%+.2f" % pct,
                   "" if tps is None else "%.0f" % tps, "" if evs is None else "%.3g" % evs,
                   "" if eps is None else "%.0f" % eps, "" if nse is None else "%.1f" % nse,
                   med(k, "lost") if med(k, "lost") is not None else "",
                   med(k, "bytes_sent") if med(k, "bytes_sent") is not None else "",
                   med(k, "trace_bytes") if med(k, "trace_bytes") is not None else "",
                   med(k, "trace_records") if med(k, "trace_records") is not None else ""]
            w.writerow(row)
            table.append(row)
print("== overhead: step time (median over rounds of each run's median step, steps 5+), "
      "1 H200, 1 rank, --step-interval-us 2000, agent epochs 100 ms")
hdr = ["point", "variant", "n", "step_us", "vs out", "tasks/step", "task ev/s", "events/step",
       "ns/event", "lost", "bytes sent", "trace bytes", "trace recs"]
allr = [hdr] + [[str(c) for c in r] for r in table]
wd = [max(len(r[i]) for r in allr) for i in range(len(hdr))]
for r in allr:
    print("  ".join(c.ljust(wd[i]) for i, c in enumerate(r)))
# the targets
print("== targets")
def pct(p, v):
    a, b = med((p, v), "step_us"), med((p, "out"), "step_us")
    return (a / b - 1) * 100 if a and b else None
m5 = pct(main, "all5")
print("standard monitors on %s: %s over compiled out (target <= 3%%)" %
      (main, "n/a" if m5 is None else "%+.2f%%" % m5))
for p in points:
    a, pr, d = pct(p, "all5"), pct(p, "profiler"), pct(p, "detached")
    if p == "mpk" and a is None:
        print("mpk: not run (no MKS_MPK_RUNNER: the MPK runtime behind the hook ABI)")
        continue
    if a is None or pr is None or d is None:
        print("%s: incomplete" % p)
        continue
    print("%s: all five %+.2f%% vs profiler %+.2f%% (%s); detached %+.2f%% (%s)" %
          (p, a, pr, "below" if a < pr else "NOT below", d, "ok" if abs(d) <= 0.5 else "over 0.5%"))
for p in points:
    s5, tb = med((p, "all5"), "bytes_sent"), med((p, "profiler"), "trace_bytes")
    recs = med((p, "profiler"), "trace_records")
    if s5 and tb:
        # binary records as the device holds them: 16 bytes each (br_prof_rec)
        print("%s: bytes sent %d vs trace %d bytes JSON (%.3f%%), %s records x 16 B (%s)" %
              (p, s5, tb, 100.0 * s5 / tb, "%d" % recs if recs else "?",
               "%.2f%%" % (100.0 * s5 / (recs * 16)) if recs else "?"))
res = os.path.join(out, "resources.csv")
if os.path.exists(res):
    print("== resources (cuobjdump -res-usage)")
    for line in open(res):
        print("  " + line.rstrip())
conf = os.path.join(out, "conformance.txt")
if os.path.exists(conf):
    lines = [l.rstrip() for l in open(conf) if l.strip()]
    fails = [l for l in lines if l.startswith("FAIL")]
    print("== VM conformance on the GPU: %s" % (lines[-1] if lines else "no output"))
    for l in fails[:10]:
        print("  " + l)
cost = os.path.join(out, "cost.txt")
if os.path.exists(cost):
    print("== devhooks cost benchmark (mkscope-devhooks-cost 10000 64: short tasks; "
          "ns/event on one worker vs compiled out)")
    for line in open(cost):
        w = line.split()
        if (w and w[0] in ("variant", "out", "detached-gate", "raw", "warp", "warp-nop", "warp-drain", "out-again")
                or "saturated" in line or "FAIL" in line or "NOTE" in line):
            print("  " + line.rstrip())
PY
tar -czf "$out/logs.tar.gz" -C "$work" . 2>/dev/null
rm -rf "$work"
echo "results in $out (runs.csv, points.csv, resources.csv, summary.txt, cost.txt, logs.tar.gz)"
