#!/usr/bin/python3
"""Plot bench/counter.sh's per-tool scores (OUT/tools.json): left, each
tool's cause-and-culprit accuracy against the telemetry it needed (bytes a
run, log scale), false confidence in the label; right, accuracy by fault
magnitude (windowed and persistent) per tool.

    bench/counter/plot.py OUT/tools.json docs/counter.png
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
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py TOOLS.json OUT.png")
    scores = json.load(open(sys.argv[1]))
    by = defaultdict(list)
    for s in scores:
        by[s["tool"]].append(s)
    tools = [t for t in ORDER if t in by] + sorted(t for t in by if t not in ORDER)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    for t in tools:
        runs = by[t]
        faulty = [s for s in runs if not s["clean"]]
        if not faulty:
            continue
        acc = 100.0 * sum(s["correct"] for s in faulty) / len(faulty)
        fc = 100.0 * sum(s["false_conf"] for s in runs) / len(runs)
        byt = sum(s["bytes"] for s in runs) / len(runs)
        a.scatter([max(byt, 1)], [acc], s=80, color=COLOR.get(t, "black"))
        a.annotate("%s\n%.0f%%, false conf. %.1f%%" % (t, acc, fc), (max(byt, 1), acc),
                   textcoords="offset points", xytext=(6, -14), fontsize=8)
        for persistent, style in ((False, "-"), (True, "--")):
            mags = defaultdict(list)
            for s in faulty:
                if s.get("persistent", False) == persistent:
                    mags[s["magnitude_us"]].append(s["correct"])
            if not mags:
                continue
            xs = sorted(mags)
            ys = [100.0 * sum(mags[x]) / len(mags[x]) for x in xs]
            b.plot([x / 1000 for x in xs], ys, style, marker="o", color=COLOR.get(t, "black"),
                   label="%s %s" % (t, "persistent" if persistent else "windowed"))
    a.set_xscale("log")
    a.set_xlabel("telemetry per run (bytes, log)")
    a.set_ylabel("cause and culprit right (% of faulty runs)")
    a.set_ylim(-5, 110)
    a.axhline(95, color="black", lw=0.5, ls=":")
    a.set_title("accuracy against bytes, same runs")
    b.set_xscale("log")
    b.set_xlabel("fault magnitude (ms per affected step, log)")
    b.set_ylabel("cause and culprit right (%)")
    b.set_ylim(-5, 110)
    b.set_title("by magnitude")
    b.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
