"""Markdown tables and the PNG figures (means over seeds, with ± std error bars)."""

import os

from . import stats


def fmt(value, digits=4):
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.{digits}f}"


def signed(value, digits=4):
    return f"{value:+.{digits}f}"


def seed_list(seeds):
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def left_out_note(what, folder, seeds, left_out):
    """The sentence a page gives for the run folders (runs.other_seeds) at seeds it does not read: every run
    made is reported, those left out by name. what: 'Runs', 'Chains'; folder: where they are, as the page
    names it."""
    return (f"{what} of this table at other seeds are in {folder} but not on this page (it reads "
            f"{seed_list(seeds)}; --seeds sets how many): {', '.join(left_out)}.")


def markdown_table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def write_markdown(path, title, provenance, sections):
    """sections: lists of lines, separated by blank lines."""
    lines = [f"# {title}", ""] + provenance + [""]
    for section in sections:
        lines += section + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def pyplot():
    """matplotlib's pyplot, drawing to files only."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def mean_curve(curves):
    """(steps, means, stds) over the steps every curve holds; stds are 0 for one curve."""
    maps = [dict(c) for c in curves]
    steps = sorted(set.intersection(*(set(m) for m in maps)))
    means = [stats.mean(m[s] for m in maps) for s in steps]
    stds = [stats.sample_std([m[s] for m in maps]) or 0.0 for s in steps]
    return steps, means, stds


def plot_loss_curves(path, title, rows, routing=None):
    """One colour per row (a rows.Row): the training loss as a thin mean line in a ± std band, the
    validation loss as markers with ± std error bars. With routing (rows again), a second panel draws
    the causal router's accuracy and recall over training."""
    plt = pyplot()
    panels = 2 if routing else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    for i, (label, row) in enumerate(rows):
        color = f"C{i % 10}"
        steps, means, stds = mean_curve(m.train_curve() for m in row.runs.values())
        ax.plot(steps, means, color=color, alpha=0.45, linewidth=1)
        ax.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                        color=color, alpha=0.12, linewidth=0)
        steps, means, stds = mean_curve(m.val_curve() for m in row.runs.values())
        ax.errorbar(steps, means, yerr=stds, color=color, marker="o", linewidth=1.8, capsize=3,
                    label=f"{label} ({len(row.seeds)} seed{'s' if len(row.seeds) > 1 else ''})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (thin: train, markers: validation; mean ± std)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if routing:
        ax = axes[0][1]
        for i, (label, row) in enumerate(routing):
            color = f"C{i % 10}"
            for measure, style in (("accuracy", "-"), ("recall", "--")):
                steps, means, stds = mean_curve(m.routing_curve(measure) for m in row.runs.values())
                ax.errorbar(steps, means, yerr=stds, fmt=style, color=color, marker=".", capsize=2,
                            label=f"{label} {measure}")
        ax.set_xlabel("step")
        ax.set_ylabel("causal router vs top-k (mean over routed layers)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("predictor accuracy (solid) and recall (dashed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, path)


def _zoom(ax, values, errors):
    """Show the differences between bars of a loss, not their distance from zero."""
    lows = [v - e for v, e in zip(values, errors)]
    highs = [v + e for v, e in zip(values, errors)]
    span = max(highs) - min(lows) or abs(max(highs)) * 0.01
    ax.set_ylim(min(lows) - span, max(highs) + span)


def plot_bars(path, title, labels, series, grouped=False, reference=None):
    """Bar charts of per-row values. series: (name, values per label, stds per label or None). Not
    grouped: one panel per series; grouped: one panel, the series side by side per label, with an
    optional (name, value) reference line (the teacher)."""
    plt = pyplot()
    series = [(name, values, errors or [0.0] * len(values)) for name, values, errors in series]
    panels = 1 if grouped else len(series)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    if grouped:
        ax = axes[0][0]
        width = 0.8 / len(series)
        for i, (name, values, errors) in enumerate(series):
            ax.bar([x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))], values, width,
                   yerr=errors, capsize=3, label=name, color=f"C{i % 10}")
        values = [v for _, vs, _ in series for v in vs] + ([reference[1]] if reference else [])
        errors = [e for _, _, es in series for e in es] + ([0.0] if reference else [])
        if reference:
            ax.axhline(reference[1], color="black", linestyle="--", linewidth=1, label=reference[0])
        _zoom(ax, values, errors)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    else:
        for ax, (name, values, errors) in zip(axes[0], series):
            ax.bar(range(len(labels)), values, yerr=errors, capsize=3,
                   color=[f"C{i % 10}" for i in range(len(labels))])
            if min(values) > 0:
                _zoom(ax, values, errors)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_ylabel(name)
            ax.set_title(name, fontsize=10)
            ax.grid(alpha=0.3, axis="y")
        fig.suptitle(title, fontsize=11)
    save(fig, path)
