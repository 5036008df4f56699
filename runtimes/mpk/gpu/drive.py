"""The MPK runs of runtimes/mpk/gpu/run.sh on one GPU, and the table.

Starts every MPK process at once (serve.py: model, kernel compile, init in
parallel), then serves in interleaved rounds, one launch at a time:
  plain   the patched tree without mkscope's flags (MPK as it was)
  mks     hook sites compiled in: detached (no agent) and attached (an agent
          with the standard monitors, attached before the launch)
  prof    MPK's own --profiling build (a profiler tensor)
at batch 1 and 8; then, on the batch-8 hooked kernel, one launch during which
monitors are replaced, all detached and attached again (no relaunch), a
launch per fault type with the diagnosis, and the counts the collector
learned against MPK's own (iterations x tasks per iteration of the graph).
The fault plan is the ground truth: it is written to truth.json for the
judge below and never given to the collector.  The table comes last.
"""
import argparse, json, os, re, shutil, signal, sqlite3, statistics, subprocess, sys, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--bin", required=True, help="mkscope build folder")
ap.add_argument("--monitors", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--seq", type=int, default=512)
ap.add_argument("--groups", type=int, default=4, help="request groups per launch")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--batches", default="1,8")
ap.add_argument("--budget", type=int, default=900, help="seconds for everything after the builds")
a = ap.parse_args()
T0 = time.time()
out = os.path.abspath(a.out)
os.makedirs(out, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(a.bin, "agent/mkscope-agent")
COLL = os.path.join(a.bin, "collector/mkscope-collector")
CLI = os.path.join(a.bin, "collector/cli/mkscope")
FLAGS = open(os.path.join(a.bin, "runtimes/mpk/mkscope-mpk-flags")).read().strip()
MON = "latency,depwait,queue,genprog,count"
# task_assign, task_start, task_end, gen_advance: attached before a launch
WAIT_MASK = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 9)
log = open(os.path.join(out, "drive.log"), "a")
OURS = dict(os.environ)
if os.environ.get("MKS_DEPS_LIB"):
    OURS["LD_LIBRARY_PATH"] = os.environ["MKS_DEPS_LIB"] + ":" + os.environ.get("LD_LIBRARY_PATH", "")


def say(*x):
    s = " ".join(str(v) for v in x)
    print(s, flush=True)
    log.write(s + "\n")
    log.flush()


def left():
    return a.budget - (time.time() - T0)


WALL = {}  # batch -> wall time of the uninstrumented build's first launch


def run_timeout(batch):
    """How long a launch may take before it counts as hung: six times the
    uninstrumented launch of the same batch and 15 s more (60 s before one
    is known), never past the budget."""
    t = 6 * WALL[batch] + 15 if batch in WALL else 60
    return max(10, min(t, left() - 20))


class Proc:
    def __init__(self, name, batch, mks=False, prof=False):
        self.name, self.batch, self.mks, self.prof = name, batch, mks, prof
        self.dir = os.path.join(out, name)
        os.makedirs(self.dir, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("MKS_MPK_NVCC_FLAGS", None)
        if mks:
            env.update(MKS_MPK_NVCC_FLAGS=FLAGS, MKS_MPK_JOB=name,
                       MKS_MPK_REPORT=os.path.join(self.dir, "report.jsonl"),
                       MKS_MPK_CONTROL=os.path.join(self.dir, "control"))
        requests = batch * (1 if prof else a.groups)
        serve = os.environ.get("MKS_MPK_SERVE", os.path.join(here, "serve.py"))  # tests: a stand-in
        cmd = [sys.executable, serve, "--name", name, "--batch",
               str(batch), "--layers", str(a.layers), "--seq", str(a.seq), "--out", self.dir,
               "--requests", str(batch * a.groups * (a.seq - 1) if prof else requests)]
        if prof:
            cmd.append("--profiling")
        self.err = open(os.path.join(self.dir, "serve.log"), "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, env=env)
        self.ready = None
        self.agent = None
        self.coll = None
        self.tags = []  # launch n (1-based) = tags[n - 1]
        self.exit = None
        self.dead = False

    def line(self, timeout):
        """The next protocol line; None on timeout or when the process ended."""
        while True:
            box = []
            t = threading.Thread(target=lambda: box.append(self.p.stdout.readline()))
            t.daemon = True
            t.start()
            t.join(timeout)
            if not box or box[0] == "":  # timeout, or end of file: the process is gone
                return None
            if box[0].strip():
                return box[0].strip()

    def wait_ready(self, timeout):
        l = self.line(timeout)
        if l and l.startswith("ready"):
            self.ready = l
            return True
        self.exit = self.p.poll()
        return False

    def run(self, tag, control=None, timeout=None):
        if self.dead:
            return None
        if timeout is None:
            timeout = run_timeout(self.batch)
        if self.mks:
            with open(os.path.join(self.dir, "control"), "w") as f:
                f.write(control or "faults -\n")
        t = time.time()
        self.tags.append(tag)
        self.p.stdin.write("run %s\n" % tag)
        self.p.stdin.flush()
        l = self.line(timeout)
        if not l or not l.startswith("done"):
            say("  %s %s: no answer in %.0f s (%s)" % (self.name, tag, timeout, l))
            self.hung(tag)
            return None
        _, tg, ms, tok = l.split()
        r = {"ms": float(ms), "tokens": int(tok), "wall": time.time() - t}
        if not self.mks and not self.prof:
            WALL.setdefault(self.batch, r["wall"])
        if self.mks:  # the library writes the launch's report when its monitors end
            for _ in range(100):
                if len(self.reports()) >= len(self.tags):
                    break
                time.sleep(0.05)
            reps = self.reports()
            if len(reps) >= len(self.tags):
                r["iterations"] = reps[len(self.tags) - 1]["iterations"]
        return r

    def hung(self, tag):
        """A launch that did not end: what the GPU runs (cuda-gdb attached to
        the process), the process's own log, then the process is killed so
        that the other variants go on."""
        self.dead = True
        gdb = shutil.which("cuda-gdb") or "/usr/local/cuda/bin/cuda-gdb"
        if os.path.exists(gdb) and self.p.poll() is None:
            try:
                r = subprocess.run([gdb, "-p", str(self.p.pid), "-batch", "-ex", "info cuda kernels",
                                    "-ex", "info cuda blocks", "-ex", "info cuda sms",
                                    "-ex", "thread apply all bt 12"],
                                   capture_output=True, text=True, timeout=60)
                g = (r.stdout + r.stderr).splitlines()
                keep = [x for x in g if not x.startswith("[New Thread") and x.strip()]
                open(os.path.join(self.dir, "hung-%s.gdb.txt" % tag), "w").write("\n".join(g))
                say("  %s %s: cuda-gdb (first 60 lines of %d):\n    %s" %
                    (self.name, tag, len(keep), "\n    ".join(keep[:60])))
            except Exception as e:
                say("  %s %s: cuda-gdb: %s" % (self.name, tag, e))
        self.p.kill()
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            pass
        self.err.flush()
        tail = open(os.path.join(self.dir, "serve.log"), errors="replace").read()[-2500:]
        say("  %s: killed; its log ends:\n    %s" % (self.name, tail.replace("\n", "\n    ")))

    def reports(self):
        p = os.path.join(self.dir, "report.jsonl")
        if not os.path.exists(p):
            return []
        return [json.loads(x) for x in open(p) if x.strip()]

    # ---- collector and agent ----
    def start_collector(self, sub):
        d = os.path.join(self.dir, sub)
        os.makedirs(d, exist_ok=True)
        self.cdir = d
        self.coll = subprocess.Popen(
            [COLL, "--ingest", "ipc://%s/ingest" % d, "--survey", "ipc://%s/survey" % d, "--cli",
             "ipc://%s/cli" % d, "--metrics", "off", "--db", "%s/store.db" % d, "--ucx-port", "0"],
            stdout=open(d + "/collector.log", "w"), stderr=subprocess.STDOUT, env=OURS)
        time.sleep(0.3)

    def start_agent(self, attach=MON):
        d = self.cdir
        self.agent = subprocess.Popen(
            [AGENT, "--job", self.name, "--rank", "0", "--collector", "ipc://%s/ingest" % d,
             "--survey", "ipc://%s/survey" % d, "--epoch-ms", "20", "--monitors", a.monitors,
             "--attach", attach, "--stats", d + "/agent-stats.json"],
            stdout=open(d + "/agent.log", "a"), stderr=subprocess.STDOUT, env=OURS)

    def stop_agent(self):
        if self.agent:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
            self.agent = None
            time.sleep(0.2)

    def cli(self, *args, fmt="json", timeout=30):
        t = time.time()
        r = subprocess.run([CLI, "--collector", "ipc://%s/cli" % self.cdir, "--timeout", "10000",
                            "-f", fmt] + list(args), capture_output=True, text=True,
                           timeout=timeout, env=OURS)
        return r.returncode, r.stdout, r.stderr, time.time() - t

    def stop_collector(self):
        if self.coll:
            self.coll.terminate()
            try:
                self.coll.wait(10)
            except subprocess.TimeoutExpired:
                self.coll.kill()
            self.coll = None

    def quit(self):
        self.stop_agent()
        self.stop_collector()
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(60)
        except Exception:
            self.p.kill()


batches = [int(b) for b in a.batches.split(",")]
procs = {}
for b in batches:
    procs["plain%d" % b] = Proc("plain%d" % b, b)
    procs["mks%d" % b] = Proc("mks%d" % b, b, mks=True)
B8 = max(batches)
procs["prof%d" % B8] = Proc("prof%d" % B8, B8, prof=True)
say("== %d MPK processes: model, kernel compile, init (in parallel)" % len(procs))
for n, p in procs.items():
    ok = p.wait_ready(max(60, left()))
    say("  %s: %s" % (n, p.ready if ok else "FAILED (exit %s; %s/serve.log)" % (p.exit, p.dir)))
    if not ok:
        p.err.flush()
        say(open(os.path.join(p.dir, "serve.log")).read()[-3000:])
live = {n: p for n, p in procs.items() if p.ready}
# what each kernel needs of an SM (registers, shared memory, local memory),
# before anything is launched: a kernel that does not fit never starts
cuobj = shutil.which("cuobjdump")
for n, p in live.items():
    so = [os.path.join(p.dir, "build", f) for f in os.listdir(os.path.join(p.dir, "build"))
          if f.endswith(".so")] if os.path.isdir(os.path.join(p.dir, "build")) else []
    if so and cuobj:
        r = subprocess.run([cuobj, "-res-usage", so[0]], capture_output=True, text=True)
        res = [x.strip() for x in (r.stdout + r.stderr).splitlines()
               if "Function" in x or "REG:" in x]
        open(os.path.join(out, "%s.res.txt" % n), "w").write(r.stdout + r.stderr)
        kern = [res[i] + " " + res[i + 1] for i in range(len(res) - 1)
                if "kernel" in res[i] and "REG:" in res[i + 1]]
        say("  %s resources: %s" % (n, "; ".join(kern)[:600]))
res = {}  # (variant, batch) -> list of runs


def rec(key, r):
    if r:
        res.setdefault(key, []).append(r)


for b in batches:
    m = live.get("mks%d" % b)
    if m:
        m.start_collector("rounds")
say("== rounds (one launch each, %d requests of %d tokens a batch slot)" % (a.groups, a.seq))
for rd in range(a.rounds):
    if left() < 60 and rd > 0:
        say("  budget: rounds stop at %d" % rd)
        break
    for b in batches:
        if "plain%d" % b in live:
            rec(("plain", b), live["plain%d" % b].run("r%d" % rd))
        m = live.get("mks%d" % b)
        if m:
            rec(("detached", b), m.run("r%d-det" % rd))
            m.start_agent()
            rec(("attached", b), m.run("r%d-att" % rd, "faults -\nwait %d 20000\n" % WAIT_MASK))
            m.stop_agent()
        if b == B8 and "prof%d" % B8 in live:
            rec(("prof", b), live["prof%d" % B8].run("r%d" % rd))
    say("  round %d: %s" % (rd, {"%s%d" % k: round(v[-1]["ms"], 1) for k, v in res.items()}))

# ---- counts: the attached rounds against MPK's own count ----
counts = {}
for b in batches:
    m = live.get("mks%d" % b)
    if not m:
        continue
    rc, o, e, _ = m.cli("query", "count(task) by class")
    reps = m.reports()
    att = [r for r in reps if r["launch"] <= len(m.tags) and m.tags[r["launch"] - 1].endswith("-att")]
    mpk = {}
    for r in att:
        for c in r["classes"]:
            mpk[c["name"]] = mpk.get(c["name"], 0) + c["executed"]
    got = {}
    try:
        for row in json.loads(o).get("rows", []):
            got[row.get("class")] = row.get("count") or row.get("count(task)")
    except Exception:
        pass
    diff = {k: (mpk.get(k), got.get(k)) for k in set(mpk) | set(got) if mpk.get(k) != got.get(k)}
    rc2, st, _, _ = m.cli("status")
    counts[b] = {"classes": len(mpk), "equal": not diff and bool(mpk), "diff": diff,
                 "query_rc": rc, "iterations": [r["iterations"] for r in reps]}
    with open(os.path.join(m.dir, "counts.json"), "w") as f:
        json.dump({"mpk": mpk, "collector": got, "status": st, "query": o, "err": e}, f, indent=1)
    say("  counts batch %d: %s" % (b, "equal" if counts[b]["equal"] else "DIFFER %s" % diff))
    m.stop_collector()

# ---- live: replace, detach all, attach again, in one launch ----
livev = {}
m = live.get("mks%d" % B8)
if m and left() > 45:
    say("== live: one launch, monitors replaced, detached, attached again")
    m.start_collector("live")
    m.start_agent()
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", m.run("live", "faults -\nwait %d 20000\n"
                                                                   % WAIT_MASK)))
    th.start()
    time.sleep(0.5)
    cmds = []

    def do(*args):
        t = time.time()
        rc, o, e, dt = m.cli(*args)
        cmds.append({"cmd": " ".join(args), "rc": rc, "s": round(dt, 3), "t_host_ns": int(t * 1e9),
                     "err": e.strip()[-300:]})
        say("  %s: rc %d, %.0f ms" % (" ".join(args), rc, dt * 1000))

    do("attach", "--builtin", "latency", "--name", "latency_b", "--replace", "latency")
    time.sleep(0.3)
    for n in ("latency_b", "depwait", "queue", "genprog", "count"):
        do("detach", n)
    time.sleep(0.3)
    for n in MON.split(","):
        do("attach", "--builtin", n)
    th.join(300)
    m.stop_agent()
    rc, st, _, _ = m.cli("status")
    rep = m.reports()[-1] if m.reports() else {}
    # steps the genprog monitor saw: every step entirely inside an attached
    # window must hold every task of the iteration, no more, no less
    per_iter = sum(c["per_iter"] for c in rep.get("classes", []))
    steps = {}
    try:
        db = sqlite3.connect(os.path.join(m.cdir, "store.db"))
        for s, n in db.execute("SELECT step, SUM(tasks) FROM steps GROUP BY step"):
            steps[s] = n
    except Exception as ex:
        say("  store: %s" % ex)
    full = sum(1 for n in steps.values() if n == per_iter)
    over = sum(1 for n in steps.values() if n > per_iter)
    livev = {"run": box.get("r"), "cmds": cmds, "per_iter": per_iter, "steps_seen": len(steps),
             "steps_full": full, "steps_over": over, "iterations": rep.get("iterations"),
             "offset_ns": rep.get("clock_offset_ns")}
    # attach latency: from the re-attach's reply to the first step every
    # worker counted (device clock via the offset measured at init)
    try:
        reatt = [c for c in cmds if c["cmd"].startswith("attach --builtin genprog")][0]
        t_dev = reatt["t_host_ns"] + int(reatt["s"] * 1e9) - rep["clock_offset_ns"]
        rows = db.execute("SELECT step, MIN(t_begin_dev), SUM(tasks) FROM steps GROUP BY step"
                          " ORDER BY step").fetchall()
        firsts = [r for r in rows if r[2] == per_iter and r[1] and r[1] >= t_dev - 50_000_000]
        if firsts:
            livev["reattach_to_full_step_ms"] = (firsts[0][1] - t_dev) / 1e6
    except Exception as ex:
        livev["latency_err"] = str(ex)
    with open(os.path.join(m.dir, "live.json"), "w") as f:
        json.dump(dict(livev, status=st), f, indent=1)
    m.stop_collector()

# ---- faults: the diagnosis names task type and cause ----
CAUSE = {"task-delay": "slow_task", "notify-delay": "notify_delay"}
faults = []
if m and left() > 60:
    graph = json.load(open(os.path.join(m.dir, "task_graph_rank0.json")))
    sch = subprocess.run([os.path.join(a.bin, "runtimes/mpk/mkscope-mpk-schema"), "-f", "json",
                          os.path.join(m.dir, "task_graph_rank0.json")], capture_output=True,
                         text=True, env=OURS)
    classes = {c["name"]: c for c in json.loads(sch.stdout)["classes"]}
    it = (m.reports()[-1]["iterations"] if m.reports() else a.seq)
    lo = it // 2
    silu = [n for n in classes if n.startswith("silu_mul")][0]
    qkv = [n for n in classes if n.endswith(".attn_in")][0]
    # notify-delay: the event the middle layer's QKV projection tiles release
    tasks = graph["all_tasks"]
    evs, prev = [], None
    for t in tasks[1:]:
        key = (t["task_type"], (t.get("outputs") or [{}])[0].get("base_ptr"))
        if key != prev and key[1] == "attn_in":
            evs.append(t["trigger_event"] & 0xffffffff)
        prev = key
    ev = evs[len(evs) // 2] if evs else 1
    plan = [("task-delay", "class=%s" % silu, 20000, silu),
            ("notify-delay", "event=%d" % ev, 200000, qkv)]
    for kind, key, ns, cls in plan:
        if left() < 40:
            break
        sub = "fault-" + kind
        m.start_collector(sub)
        spec = "%s:%s,steps=%d-%d,ns=%d" % (kind, key, lo, lo + 4, ns)
        truth = {"faults": [{"type": kind, "rank": 0, "class": cls, "steps": [lo, lo + 4],
                             "magnitude_ns": ns, "spec": spec}]}
        json.dump(truth, open(os.path.join(m.cdir, "truth.json"), "w"))  # the judge's only
        m.start_agent()
        r = m.run(sub, "faults %s\nwait %d 20000\n" % (spec, WAIT_MASK))
        m.stop_agent()
        rc, dj, de, _ = m.cli("diagnose", "--min-steps", "3")
        _, dt, _, _ = m.cli("diagnose", fmt="text")
        open(os.path.join(m.cdir, "diag.json"), "w").write(dj)
        open(os.path.join(m.cdir, "diag.txt"), "w").write(dt)
        groups = []
        for l in dj.splitlines():
            try:
                groups.append(json.loads(l))
            except Exception:
                pass
        named = sum(1 for g in groups if g.get("cause") == CAUSE[kind]
                    and g.get("root", {}).get("task_class") == cls
                    for s in g.get("steps", []) if lo <= s <= lo + 5)
        big = max(groups, key=lambda g: len(g.get("steps", [])), default={})
        verdict = "ok" if named >= 3 else "FAIL: %d fault steps named %s %s" % (named, CAUSE[kind], cls)
        faults.append({"fault": kind, "class": cls, "steps": "%d-%d" % (lo, lo + 4),
                       "verdict": verdict, "largest": "%s %s (%d st)" % (
                           big.get("cause"), big.get("root", {}).get("task_class"),
                           len(big.get("steps", []))), "ms": r and r["ms"]})
        say("  %s: %s" % (kind, verdict))
        m.stop_collector()

# ---- machine code of the worker loop: plain against hooked ----
sass = {}
cuobj = shutil.which("cuobjdump")
for n in ("plain%d" % B8, "mks%d" % B8):
    p = live.get(n)
    if not p or not cuobj:
        continue
    so = [os.path.join(p.dir, "build", f) for f in os.listdir(os.path.join(p.dir, "build"))
          if f.endswith(".so")]
    if so:
        r = subprocess.run([cuobj, "-sass", "-fun",
                            "_Z13worker_kernelN6mirage7runtime13RuntimeConfigE", so[0]],
                           capture_output=True, text=True)
        open(os.path.join(out, "%s.sass" % n), "w").write(r.stdout)
        ins = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", l).split(";")[0].strip()
               for l in r.stdout.splitlines() if re.match(r"^\s+/\*[0-9a-f]{4}\*/", l)]
        sass[n] = ins
if len(sass) == 2:
    import difflib
    op = lambda v: [re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] if x else "" for x in v]
    x, y = op(sass["plain%d" % B8]), op(sass["mks%d" % B8])
    sm = difflib.SequenceMatcher(None, x, y, autojunk=False)
    sass_cmp = {"plain": len(x), "mks": len(y), "equal": sum(b.size for b in sm.get_matching_blocks())}
else:
    sass_cmp = {}

for p in procs.values():
    p.quit()

# ---- the table ----
def med(v):
    return statistics.median(v) if v else float("nan")


rows = []
for b in batches:
    it = None
    mp = live.get("mks%d" % b)
    if mp and mp.reports():
        it = mp.reports()[0]["iterations"]
    base = med([r["ms"] for r in res.get(("plain", b), [])])
    for v in ("plain", "detached", "attached", "prof"):
        runs = res.get((v, b), [])
        if not runs:
            continue
        ms = med([r["ms"] for r in runs])
        spread = (max(r["ms"] for r in runs) - min(r["ms"] for r in runs)) if len(runs) > 1 else 0
        if v == "prof":
            per = ms / (a.groups * (a.seq - 1))  # one fresh request group per iteration
        else:
            per = ms / it if it else float("nan")
        rows.append((v, b, len(runs), "%.1f" % ms, "%.1f" % spread, "%.4f" % per,
                     "%+.2f%%" % (100 * (ms / base - 1)) if base == base and v != "prof" else
                     "%+.2f%%/step" % (100 * (per / (base / it) - 1)) if it and base == base else "-"))
summary = {"rows": rows, "counts": counts, "live": livev, "faults": faults, "sass": sass_cmp,
           "layers": a.layers, "seq": a.seq, "groups": a.groups}
json.dump(summary, open(os.path.join(out, "results.json"), "w"), indent=1, default=str)
say("")
say("== MPK with mkscope on one GPU: Qwen3-8B shapes, %d layers, random weights, offline "
    "serving, %d requests of %d tokens per batch slot" % (a.layers, a.groups, a.seq))
hdr = ("variant", "batch", "launches", "launch_ms", "spread_ms", "ms_per_step", "vs_plain")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr] + rows:
    say("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)))
for b, c in counts.items():
    say("counts batch %d (attached launches, %d classes): %s" % (
        b, c["classes"], "equal to MPK's" if c["equal"] else "DIFFER %s" % c["diff"]))
if livev:
    say("live (one launch, %s iterations): %s; steps seen %d, with every task %d, over %d; "
        "re-attach to first full step %s ms" % (
            livev.get("iterations"), ", ".join("%s rc %d %.0f ms" % (c["cmd"], c["rc"], c["s"] * 1e3)
                                               for c in livev["cmds"]),
            livev["steps_seen"], livev["steps_full"], livev["steps_over"],
            "%.2f" % livev["reattach_to_full_step_ms"] if "reattach_to_full_step_ms" in livev else "-"))
for f in faults:
    say("fault %s on %s steps %s: %s (largest group: %s)" % (f["fault"], f["class"], f["steps"],
                                                           f["verdict"], f["largest"]))
if sass_cmp:
    say("worker_kernel SASS: plain %d instructions, hooked %d, %d in common (both loops inline)"
        % (sass_cmp["plain"], sass_cmp["mks"], sass_cmp["equal"]))
say("took %.0f s" % (time.time() - T0))
