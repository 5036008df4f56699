"""A stand-in for runtimes/mpk/gpu/serve.py (no GPU, no MPK): answers the
driver's protocol the way serve.py does, with MPK's prints on stdout, a
saved task graph, and for hooked variants a per-launch report line as
libmkscope_mpk writes it, so that mpk_drive_test.sh runs the driver's
rounds, counts, live and fault phases and its table on a CPU."""
import argparse, json, os, shutil, sys, time

p = argparse.ArgumentParser()
for o in ("--name", "--out"):
    p.add_argument(o)
for o in ("--batch", "--requests", "--layers", "--seq", "--workers"):
    p.add_argument(o, type=int, default=0)
p.add_argument("--profiling", action="store_true")
a = p.parse_args()
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
print("sm_cnt:  132\n", flush=True)  # MPK's own prints (and a blank line) go to the log
here = os.path.dirname(os.path.abspath(__file__))
shutil.copy(os.path.join(here, "data", "task_graph_qwen3_2l.json"),
            os.path.join(a.out, "task_graph_rank0.json"))
print("ready %s stand-in" % a.name, file=proto)
n = 0
for line in sys.stdin:
    c = line.split()
    if not c or c[0] == "quit":
        break
    n += 1
    time.sleep(0.1)
    # MKS_FAKE_MPK_HANG=NAME:TAG: that launch never ends (a hung kernel)
    if os.environ.get("MKS_FAKE_MPK_HANG") == "%s:%s" % (a.name, c[1] if len(c) > 1 else "-"):
        while True:
            time.sleep(1)
    rep = os.environ.get("MKS_MPK_REPORT")
    if rep:
        with open(rep, "a") as f:
            f.write(json.dumps({"job": a.name, "launch": n, "iterations": 100, "clock_offset_ns": 0,
                                "classes": [{"id": 0, "name": "begin_task_graph", "per_iter": 1,
                                             "task_type": "TASK_BEGIN_TASK_GRAPH",
                                             "executed": 100}]}) + "\n")
    print("done %s %.3f %d" % (c[1], 100.0 + n, 800), file=proto)
print("bye", file=proto)
