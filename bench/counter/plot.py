#!/usr/bin/python3
"""Plot bench/counter.sh's per-tool scores (OUT/tools.json): left, each
tool's cause-and-culprit accuracy against the telemetry it needed (bytes a
run, log scale), false confidence in the label; middle, accuracy by fault
magnitude (windowed and persistent) per tool; right, with --scale,
bench/counter/scale.sh's bytes a step and rank against the tasks a step
runs.  Several score files (counter.sh at different agent epochs over the
same plan) are drawn together, mkscope labelled by its epoch.

    bench/counter/plot.py OUT/tools.json docs/counter.png
    bench/counter/plot.py E5/tools.json E100/tools.json --scale S/scale.json docs/counter.png
"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["mkscope", "trace", "trace_sampled", "counters", "steps"]
COLOR = {"mkscope": "tab:red", "trace": "tab:blue", "trace_sampled": "tab:cyan",
         "counters": "tab:green", "steps": "tab:gray"}


def main():
    args = sys.argv[1:]
    scale = None
    if "--scale" in args:
        i = args.index("--scale")
        if i + 1 >= len(args):
            sys.exit("plot.py: --scale wants scale.sh's scale.json")
        scale = json.load(open(args[i + 1]))
        del args[i:i + 2]
    if len(args) < 2:
        sys.exit("usage: plot.py TOOLS.json [TOOLS.json ...] [--scale SCALE.json] OUT.png")
    files, png = args[:-1], args[-1]
    by = defaultdict(list)
    def setting(s):
        b = s.get("agent_budget", 0)
        return "%d ms%s" % (s.get("epoch_ms", 5), ", %d B/s" % b if b else "")

    settings = []
    for f in files:
        for s in json.load(open(f)):
            if s["tool"] == "mkscope" and setting(s) not in settings:
                settings.append(setting(s))
    for f in files:
        for s in json.load(open(f)):
            t = s["tool"]
            if len(files) > 1 and t != "mkscope" and f != files[0]:
                continue  # the other tools once: the same plan, the first file's runs
            if t == "mkscope" and len(settings) > 1:
                t = "mkscope " + setting(s)
            by[t].append(s)
    tools = [t for t in ORDER if t in by] + sorted(t for t in by if t not in ORDER)
    fig, axes = plt.subplots(1, 3 if scale else 2, figsize=(17 if scale else 12, 4.6))
    a, b = axes[0], axes[1]
    for t in tools:
        runs = by[t]
        faulty = [s for s in runs if not s["clean"]]
        if not faulty:
            continue
        color = COLOR.get(t.split(" ")[0], "black")
        if t.startswith("mkscope "):
            color = ("tab:red", "tab:orange", "tab:purple", "tab:brown")[
                settings.index(t[len("mkscope "):]) % 4]
        acc = 100.0 * sum(s["correct"] for s in faulty) / len(faulty)
        fc = 100.0 * sum(s["false_conf"] for s in runs) / len(runs)
        byt = sum(s["bytes"] for s in runs) / len(runs)
        a.scatter([max(byt, 1)], [acc], s=80, color=color,
                  label="%s: %.0f%%, false conf. %.1f%%" % (t, acc, fc))
        for persistent, style in ((False, "-"), (True, "--")):
            mags = defaultdict(list)
            for s in faulty:
                if s.get("persistent", False) == persistent:
                    mags[s["magnitude_us"]].append(s["correct"])
            if not mags:
                continue
            xs = sorted(mags)
            ys = [100.0 * sum(mags[x]) / len(mags[x]) for x in xs]
            b.plot([x / 1000 for x in xs], ys, style, marker="o", color=color,
                   label="%s %s" % (t, "persistent" if persistent else "windowed"))
    if scale:
        c = axes[2]
        rows = sorted(scale, key=lambda r: r["tasks_per_step"])
        xs = [r["tasks_per_step"] for r in rows]
        n = [r["ranks"] * r["steps"] for r in rows]
        for key, label, color in (("trace", "native full trace", "tab:blue"),
                                  ("mkscope", "mkscope (%d ms epochs)" % rows[0]["epoch_ms"],
                                   "tab:red"),
                                  ("counters", "fixed counters", "tab:green")):
            # the trace grows with the tasks; mkscope's summaries with the
            # layers (a remote wait and release row per all-reduce and
            # peer), not the tiles: points, not a line through both
            c.plot(xs, [r[key] / k for r, k in zip(rows, n)], marker="o", color=color,
                   label=label, ls="-" if key == "trace" else "none")
        c.plot(xs, [r["trace"] / k / 100 for r, k in zip(rows, n)], ":", color="tab:blue",
               label="1% of the full trace")
        for r, x in zip(rows, xs):
            c.annotate("%dx%d" % (r["layers"], r["tiles"]), (x, r["mkscope"] / (r["ranks"] * r["steps"])),
                       textcoords="offset points", xytext=(3, 5), fontsize=7)
        c.set_xscale("log")
        c.set_yscale("log")
        c.set_xlabel("tasks a step and rank (layers x tiles, log)")
        c.set_ylabel("bytes a step and rank (log)")
        c.set_title("telemetry against graph size (clean runs)")
        c.legend(fontsize=7)
    a.set_xscale("log")
    a.set_xlabel("telemetry per run (bytes, log)")
    a.set_ylabel("cause and culprit right (% of faulty runs)")
    a.set_ylim(-5, 110)
    a.axhline(95, color="black", lw=0.5, ls=":")
    a.set_title("accuracy against bytes, same runs")
    a.legend(fontsize=7, loc="center left")
    b.set_xscale("log")
    b.set_xlabel("fault magnitude (ms per affected step, log)")
    b.set_ylabel("cause and culprit right (%)")
    b.set_ylim(-5, 110)
    b.set_title("by magnitude")
    b.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
