"""A table row over its seeds: one RunMetrics per seed, a measure's mean ± std across them, and the
data-order signature that decides whether two rows can be compared seed by seed."""

from . import stats


class Row:
    def __init__(self, key, runs, order=None):
        """runs: {seed: RunMetrics}; order: the runs' data-order signature (runs.data_order)."""
        if not runs:
            raise ValueError(f"row {key} has no runs")
        self.key = key
        self.runs = dict(sorted(runs.items()))
        self.order = order

    @property
    def seeds(self):
        return list(self.runs)

    def values(self, measure):
        """measure(RunMetrics) for each seed, in seed order."""
        return [measure(m) for m in self.runs.values()]

    def mean(self, measure):
        return stats.mean(self.values(measure))

    def std(self, measure):
        """The sample std across seeds; None with one seed."""
        return stats.sample_std(self.values(measure))

    def cell(self, measure, digits=4):
        """'mean ± std' over the seeds, or the one value."""
        std = self.std(measure)
        text = f"{self.mean(measure):,.{digits}f}"
        return text if std is None else f"{text} ± {std:,.{digits}f}"

    def pairs_with(self, other):
        """Seed-by-seed pairing holds when both rows ran the same seeds on the same data order (with one
        seed too: the pair then has no interval, but it is a pair, not two independent samples)."""
        return self.seeds == other.seeds and self.order == other.order

    def any_run(self):
        return next(iter(self.runs.values()))
