#!/usr/bin/python3
"""Plot bench/gpu/overhead.sh's points.csv: each method's step-time overhead
over hooks compiled out against the workload's task events per second (5
per task, at the compiled-out step time), one line per method, a point per
sweep point.

    bench/gpu/overhead_plot.py points.csv docs/overhead.png [TITLE]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METHODS = [("profiler", "native profiler (every task)", "k", "s"),
           ("detached", "mkscope detached", "tab:gray", "o"),
           ("all5", "mkscope, five standard monitors", "tab:blue", "o"),
           ("hist", "mkscope, histogram on every event", "tab:red", "^")]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: overhead_plot.py points.csv out.png [title]")
    rows = list(csv.DictReader(open(sys.argv[1])))
    # a point's x: its workload's rate with hooks compiled out, the same for
    # every method
    xs = {r["point"]: float(r["task_events_per_s"]) for r in rows
          if r["variant"] == "out" and r["task_events_per_s"]}
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for var, label, color, marker in METHODS:
        pts = []
        for r in rows:
            if r["variant"] != var or not r["vs_out_pct"] or r["point"] not in xs:
                continue
            pts.append((xs[r["point"]], float(r["vs_out_pct"]), r["point"]))
        if not pts:
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label)
        for x, y, name in pts:
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=color)
    ax.axhline(0, color="k", lw=0.5)
    ax.axhline(3, color="tab:blue", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("task events per second of the workload, hooks compiled out (5 per task)")
    ax.set_ylabel("step time over hooks compiled out (%)")
    ax.set_title(sys.argv[3] if len(sys.argv) > 3 else "What observing costs, one H200")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
