#!/usr/bin/python3
"""plots.py — the comparison report's plots, from report.json and samples.json in DIR:

  s1_latency_cdf.svg   S1 acquire+release latency CDF per backend (log x)
  s2_throughput.svg    S2 cycles/s against clients, per backend
  s3_handoff.svg       S3 handoff p50 against waiters, per backend (first critical-section size)

usage: /usr/bin/python3 plots.py DIR   (Debian's python3-matplotlib, Agg backend; exit status 1 on
any failure, with the reason on stderr, so the report can say the plots are missing and why)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402


def integer_ticks(ax, values):
    """Log-2 x axis labelled with the measured points (1, 4, 16 …), not powers of two."""
    if values:
        ax.set_xticks(sorted(set(values)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())


def s1_cdf(report, samples, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = 0
    for name, values in sorted(samples.get("s1", {}).items()):
        if not values:
            continue
        n = len(values)
        ys = [(i + 1) / n for i in range(n)]
        ax.plot(values, ys, label=f"{name} (n={n})")
        drawn += 1
    ax.set_xscale("log")
    ax.set_xlabel("acquire+release latency (µs, log scale)")
    ax.set_ylabel("fraction of cycles ≤ x")
    ax.set_title("S1 uncontended acquire+release: latency CDF")
    ax.grid(True, which="both", alpha=0.3)
    if drawn:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def s2_throughput(report, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = []
    for t in report["targets"]:
        points = [p for p in t.get("s2", []) if p.get("cycles_per_s") is not None]
        if points:
            ax.plot([p["clients"] for p in points], [p["cycles_per_s"] for p in points], marker="o", label=t["name"])
            xs += [p["clients"] for p in points]
    ax.set_xscale("log", base=2)
    integer_ticks(ax, xs)
    ax.set_yscale("log")
    ax.set_xlabel("clients (processes), distinct lock names")
    ax.set_ylabel("acquire+release cycles/s (log scale)")
    ax.set_title("S2 throughput vs clients")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def s3_handoff(report, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = []
    for t in report["targets"]:
        points = t.get("s3", [])
        if not points:
            continue
        first_cs = points[0]["critical_us"]
        points = [p for p in points if p["critical_us"] == first_cs and p["handoff"].get("p50_us") is not None]
        if points:
            ax.plot([p["waiters"] for p in points], [p["handoff"]["p50_us"] for p in points], marker="o",
                    label=f"{t['name']} (cs {first_cs} µs)")
            xs += [p["waiters"] for p in points]
    ax.axhline(1000, color="grey", linestyle="--", linewidth=1, label="target: 1 ms")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    integer_ticks(ax, xs)
    ax.set_xlabel("waiters on one name")
    ax.set_ylabel("handoff p50 (µs, log scale)\nrelease → another process's acquire returns")
    ax.set_title("S3 handoff vs waiters")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plots.py DIR")
    directory = sys.argv[1]
    with open(os.path.join(directory, "report.json")) as f:
        report = json.load(f)
    with open(os.path.join(directory, "samples.json")) as f:
        samples = json.load(f)
    s1_cdf(report, samples, os.path.join(directory, "s1_latency_cdf.svg"))
    s2_throughput(report, os.path.join(directory, "s2_throughput.svg"))
    s3_handoff(report, os.path.join(directory, "s3_handoff.svg"))


if __name__ == "__main__":
    main()
