"""Markdown tables, the agrees/disagrees verdicts and the PNG figures."""

import os
from dataclasses import dataclass


@dataclass
class Effect:
    """One direction the paper reports: `measured` is ours (b - a, in our units), `paper_sign` the
    sign the paper's comparison has in the same units (+1: b is larger, -1: b is smaller)."""
    label: str
    paper: str
    paper_sign: int
    measured: float
    unit: str = ""

    def verdict(self):
        if self.measured == 0:
            return "no difference"
        return "agrees" if (self.measured > 0) == (self.paper_sign > 0) else "disagrees"


def fmt(value, digits=4):
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.{digits}f}"


def signed(value, digits=4):
    return f"{value:+.{digits}f}"


def markdown_table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def effects_table(effects):
    rows = [[e.label, e.paper, signed(e.measured) + (f" {e.unit}" if e.unit else ""), f"**{e.verdict()}**"]
            for e in effects]
    return markdown_table(["effect", "paper", "measured", "direction"], rows, ["---", "---", "---:", "---"])


def write_markdown(path, title, provenance, sections):
    """sections: lists of lines, separated by blank lines."""
    lines = [f"# {title}", ""] + provenance + [""]
    for section in sections:
        lines += section + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def plot_loss_curves(path, title, runs, routing=None):
    """One line per row: training loss (thin) and validation loss (markers). With routing (a list of
    (label, RunMetrics)), a second panel draws the causal router's accuracy and recall over training."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if routing else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    for i, (label, metrics) in enumerate(runs):
        color = f"C{i % 10}"
        steps, losses = zip(*metrics.train_curve())
        ax.plot(steps, losses, color=color, alpha=0.45, linewidth=1)
        vsteps, vlosses = zip(*metrics.val_curve())
        ax.plot(vsteps, vlosses, color=color, marker="o", linewidth=1.8, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (thin: train, markers: validation)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if routing:
        ax = axes[0][1]
        for i, (label, metrics) in enumerate(routing):
            color = f"C{i % 10}"
            for measure, style in (("accuracy", "-"), ("recall", "--")):
                steps, values = zip(*metrics.routing_curve(measure))
                ax.plot(steps, values, style, color=color, marker=".", label=f"{label} {measure}")
        ax.set_xlabel("step")
        ax.set_ylabel("causal router vs top-k (mean over routed layers)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("predictor accuracy (solid) and recall (dashed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(path, title, labels, series, grouped=False, reference=None):
    """Bar charts of per-row values. series: (name, values per label). Not grouped: one panel per
    series; grouped: one panel, the series side by side per label, with an optional (name, value)
    reference line (the teacher)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 if grouped else len(series)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    if grouped:
        ax = axes[0][0]
        width = 0.8 / len(series)
        for i, (name, values) in enumerate(series):
            ax.bar([x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))], values, width,
                   label=name, color=f"C{i % 10}")
        if reference:
            ax.axhline(reference[1], color="black", linestyle="--", linewidth=1, label=reference[0])
        lows = [v for _, values in series for v in values] + ([reference[1]] if reference else [])
        span = max(lows) - min(lows) or abs(max(lows)) * 0.01  # show the differences, not the distance from zero
        ax.set_ylim(min(lows) - span, max(lows) + span)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    else:
        for ax, (name, values) in zip(axes[0], series):
            ax.bar(range(len(labels)), values, color=[f"C{i % 10}" for i in range(len(labels))])
            if min(values) > 0:  # a loss: show the differences, not the distance from zero
                span = max(values) - min(values) or abs(max(values)) * 0.01
                ax.set_ylim(min(values) - span, max(values) + span)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_ylabel(name)
            ax.set_title(name, fontsize=10)
            ax.grid(alpha=0.3, axis="y")
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
