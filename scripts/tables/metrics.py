"""What a table reads from one run's metrics.jsonl records. Each function raises TableError when the
value it needs was not logged: a table never shows a number the run did not write."""

import math
import re
import statistics

from .runs import TableError

ROUTING_KEY = re.compile(r"^mod\.L(\d+)\.([a-z_]+)/(.+)$")


class RunMetrics:
    """The records of one finished run, with the measures the tables use."""

    def __init__(self, name, records):
        self.name = name
        self.train = [r for r in records if r["kind"] == "train"]
        self.evals = [r for r in records if r["kind"] == "eval"]
        if not self.train:
            raise TableError(f"{name}: metrics.jsonl has no training records")
        if not self.evals:
            raise TableError(f"{name}: metrics.jsonl has no evaluation records")
        self.final_step = self.evals[-1]["step"]

    def domain(self):
        """The first validation domain of the final evaluation (the recipes have one)."""
        for key in self.evals[-1]:
            if key.startswith("loss/"):
                return key[len("loss/"):]
        raise TableError(f"{self.name}: the final evaluation has no loss/<domain> value")

    def val_loss(self):
        return self._number(self.evals[-1], f"loss/{self.domain()}")

    def val_ppl(self):
        return math.exp(self.val_loss())

    def train_loss(self):
        """Mean training loss over the last tenth of the logged steps (at least one record), which
        is steadier than the last record alone."""
        last = self.train[-1]["step"]
        tail = [r for r in self.train if r["step"] >= last - max(1, last // 10)]
        return statistics.fmean(self._number(r, "loss") for r in tail)

    def train_ppl(self):
        return math.exp(self.train_loss())

    def tokens_per_second(self):
        """Median throughput over the logged intervals after the first (which holds start-up)."""
        values = [self._number(r, "tokens_per_second") for r in self.train[1:] or self.train]
        return statistics.median(values)

    def train_curve(self):
        return [(r["step"], self._number(r, "loss")) for r in self.train]

    def val_curve(self):
        key = f"loss/{self.domain()}"
        return [(r["step"], self._number(r, key)) for r in self.evals if key in r]

    def routing_curve(self, measure):
        """(step, mean over routed layers) of a routing measure (accuracy, recall, ...) at each
        evaluation that logged it."""
        curve = []
        for r in self.evals:
            values = [v for k, v in r.items()
                      if (m := ROUTING_KEY.match(k)) and m.group(2) == measure]
            if values:
                curve.append((r["step"], statistics.fmean(values)))
        if not curve:
            raise TableError(f"{self.name}: metrics.jsonl holds no mod.L*.{measure} values")
        return curve

    def routing(self, measure):
        return self.routing_curve(measure)[-1][1]

    def _number(self, record, key):
        value = record.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise TableError(f"{self.name}: step {record['step']} has no finite '{key}' value")
        return float(value)
