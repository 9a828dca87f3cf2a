"""The effects a page tests: a measured difference with its 95% CI (stats), the paper's sign and size,
the verdict, and whether the seeds run resolve the paper's effect size (else how many would)."""

import math
from dataclasses import dataclass

from . import stats
from .report import markdown_table

# Where the paper gives no loss difference (an accuracy, a curve), a resolving scale must still tell a
# difference of this many nats from 0: the middle of the 0.005-0.02 nats the papers' loss effects span.
DEFAULT_SIZE = 0.01


@dataclass
class Effect:
    """b - a in our units. paper_sign: the sign the paper's comparison has in those units (+1: b is
    larger). size: the paper's effect in our units (None: no resolution check). spread: the per-seed
    std of the difference, from which the seeds a resolving CI needs follow."""
    label: str
    paper: str
    paper_sign: int
    interval: stats.Interval
    spread: float | None
    unit: str = ""
    size: float | None = None

    def verdict(self):
        return stats.verdict(self.interval, self.paper_sign)

    def resolution(self):
        """Whether the CI is narrower than the paper's effect, else the seeds that would make it so."""
        if self.size is None:
            return "-"
        size = f"{self.size:.3g}{' ' + self.unit if self.unit else ''}"
        if self.spread is None:
            return f"one seed: no interval (paper's effect {size})"
        half = self.interval.half_width()
        if half < self.size:
            return f"yes: ±{half:.3g} < {size}"
        needed = stats.seeds_needed(self.spread, self.size)
        if needed is None:
            return f"no: ±{half:.3g} vs {size}; more than {stats.MAX_SEEDS} seeds at this scale, so a larger scale"
        return f"no: ±{half:.3g} vs {size}; {needed} seeds would resolve it"


def compare(label, paper, paper_sign, b, a, measure, unit="", size=None):
    """Row b against row a: paired by seed when they pair (rows.Row.pairs_with), else Welch's t."""
    vb, va = b.values(measure), a.values(measure)
    if b.pairs_with(a):
        interval = stats.paired_interval(vb, va)
        spread = stats.sample_std([x - y for x, y in zip(vb, va)])
    else:
        interval = stats.welch_interval(vb, va)
        sb, sa = stats.sample_std(vb), stats.sample_std(va)
        spread = None if sb is None or sa is None else math.sqrt(sb * sb + sa * sa)
    return Effect(label, paper, paper_sign, interval, spread, unit, size)


def against(label, paper, paper_sign, b, reference, measure, unit="", size=None):
    """Row b against a fixed reference value (one-sample t)."""
    differences = [v - reference for v in b.values(measure)]
    return Effect(label, paper, paper_sign, stats.one_sample_interval(differences), stats.sample_std(differences),
                  unit, size)


def _number(value, digits):
    return f"{value:+,.{digits}f}"


def measured_text(effect):
    i = effect.interval
    digits = 4 if abs(i.difference) < 100 else 0
    text = _number(i.difference, digits) + (f" {effect.unit}" if effect.unit else "")
    if i.low is None:
        return text
    return f"{text} [{_number(i.low, digits)}, {_number(i.high, digits)}]"


def method_text(interval):
    if interval.low is None:
        return f"{interval.method}: no interval"
    df = "" if interval.df is None else f", df {interval.df:.3g}"
    few = f" (too few for a verdict: it needs {stats.MIN_SEEDS})" if interval.n < stats.MIN_SEEDS else ""
    return f"{interval.method}, {interval.n} seeds{df}{few}"


def effects_table(effects):
    rows = [[e.label, e.paper, measured_text(e), method_text(e.interval), f"**{e.verdict()}**", e.resolution()]
            for e in effects]
    return markdown_table(["effect (b - a)", "paper", "measured: mean [95% CI]", "interval", "verdict",
                           "CI narrower than the paper's effect?"], rows,
                          ["---", "---", "---:", "---", "---", "---"])


def summary(effects):
    counts = {v: sum(e.verdict() == v for e in effects)
              for v in (stats.REPRODUCED, stats.CONTRADICTED, stats.UNRESOLVED)}
    return [f"Of {len(effects)} effects: {counts[stats.REPRODUCED]} reproduced, {counts[stats.CONTRADICTED]} "
            f"contradicted, {counts[stats.UNRESOLVED]} unresolved. A verdict needs the 95% confidence interval of "
            f"the difference to exclude 0, over at least {stats.MIN_SEEDS} seeds (paired by seed where both rows ran "
            f"the same seeds on the same data order, else Welch's t); a sign alone gives none."]
