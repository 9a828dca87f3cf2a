#!/usr/bin/env python3
"""Plots one fathom run, or several overlaid, from their metrics.jsonl: training and validation loss,
learning rate, gradient norm and tokens/s, one panel each.

  scripts/plot_runs.py RUN [RUN...] --out FILE.png [--title TEXT]

RUN is a run folder (`log.dir`, holding metrics.jsonl) or a metrics.jsonl file. Runs are labelled by
their folder names. Needs Python 3 with matplotlib (Debian: python3-matplotlib).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tables.report import pyplot, save  # noqa: E402
from tables.runs import TableError, read_metrics  # noqa: E402

# (panel title, record kind, key or None for every loss/<domain> key, log scale)
PANELS = [("training loss", "train", "loss", False),
          ("validation loss", "eval", None, False),
          ("learning rate", "train", "lr", False),
          ("gradient norm", "train", "grad_norm", True),
          ("tokens/s", "train", "tokens_per_second", False)]


def metrics_path(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise TableError(f"{run}: no metrics.jsonl (name a run folder, the log.dir of `fathom train`)")
    return path


def label_for(run):
    path = os.path.abspath(run)
    return os.path.basename(os.path.dirname(path) if os.path.isfile(path) else path)


def series(records, kind, key, where):
    """{name: [(step, value)]} of one panel: one series for a key, one per domain for loss/<domain>."""
    out = {}
    for number, r in enumerate(records, 1):
        if r["kind"] != kind:
            continue
        for k, v in r.items():
            wanted = k.startswith("loss/") if key is None else k == key
            if not wanted:
                continue
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise TableError(f"{where}: the {kind} record at step {r['step']} has a non-numeric '{k}' ({v!r})")
            if v is not None:  # fathom writes null for a value that was not finite
                out.setdefault(k[len("loss/"):] if key is None else k, []).append((r["step"], float(v)))
    return out


def plot(runs, out, title=None):
    loaded = []
    for run in runs:
        path = metrics_path(run)
        records = read_metrics(path)
        if not any(r["kind"] == "train" for r in records):
            raise TableError(f"{path}: no training records")
        loaded.append((label_for(run), path, records))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 4), squeeze=False)
    for ax, (name, kind, key, log_scale) in zip(axes[0], PANELS):
        drawn = False
        for i, (label, path, records) in enumerate(loaded):
            for j, (series_name, points) in enumerate(sorted(series(records, kind, key, path).items())):
                steps, values = zip(*points)
                line = "-" if j == 0 else ["--", ":", "-."][(j - 1) % 3]
                text = label if key is not None else f"{label}: {series_name}"
                ax.plot(steps, values, line, color=f"C{i % 10}", marker="o" if kind == "eval" else None,
                        markersize=3, linewidth=1.2, label=text)
                drawn = True
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn:
            if log_scale:
                ax.set_yscale("log")
            if len(loaded) > 1 or key is None:
                ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    if title:
        fig.suptitle(title)
    save(fig, out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run folders (or metrics.jsonl files)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", help="a title over the panels")
    args = ap.parse_args(argv)
    if os.path.isdir(args.out):
        ap.error(f"--out {args.out} is a folder; name the PNG file to write")
    if not args.out.lower().endswith(".png"):
        ap.error(f"--out {args.out}: the figure is a PNG, so its name must end in .png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"plot_runs: error: matplotlib is not installed for {sys.executable} (Debian: apt-get install "
              "python3-matplotlib, then run it with /usr/bin/python3)", file=sys.stderr)
        return 1
    try:
        plot(args.runs, args.out, args.title)
    except TableError as e:
        print(f"plot_runs: error: {e}", file=sys.stderr)
        return 1
    print(f"plot_runs: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
