"""What a table reads from one run's metrics.jsonl records. Each function raises TableError when the
value it needs was not logged: a table never shows a number the run did not write."""

import math
import re
import statistics

from .runs import TableError

ROUTING_KEY = re.compile(r"^mod\.L(\d+)\.([a-z_]+)/(.+)$")


def is_finite_number(value):
    """A JSON number (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class RunMetrics:
    """The records of one finished run, with the measures the tables use."""

    def __init__(self, name, records, domain=None):
        """domain: the validation domain the tables compare (None: the run's only one)."""
        self.name = name
        self.compared_domain = domain
        self.train = [r for r in records if r["kind"] == "train"]
        self.evals = [r for r in records if r["kind"] == "eval"]
        if not self.train:
            raise TableError(f"{name}: metrics.jsonl has no training records")
        if not self.evals:
            raise TableError(f"{name}: metrics.jsonl has no evaluation records")
        self.final_step = self.evals[-1]["step"]

    def domains(self):
        """The validation domains the evaluations logged (one record per domain and evaluation)."""
        return sorted({key[len("loss/"):] for r in self.evals for key in r if key.startswith("loss/")})

    def domain(self):
        """The compared domain, or the run's only one."""
        logged = self.domains()
        if self.compared_domain is not None:
            if self.compared_domain not in logged:
                raise TableError(f"{self.name}: no evaluation of validation domain '{self.compared_domain}' "
                                 f"(logged: {', '.join(logged) or 'none'})")
            return self.compared_domain
        if len(logged) != 1:
            raise TableError(f"{self.name}: {len(logged)} validation domains logged ({', '.join(logged) or 'none'}); "
                             "the table needs one to compare")
        return logged[0]

    def val_loss(self):
        """The compared domain's loss at the final evaluation."""
        key = f"loss/{self.domain()}"
        final = [r for r in self.evals if r["step"] == self.final_step and key in r]
        if not final:
            raise TableError(f"{self.name}: the final evaluation (step {self.final_step}) has no '{key}' value")
        return self._number(final[-1], key)

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
        evaluation of the compared domain that logged it."""
        domain = self.domain()
        curve = []
        for r in self.evals:
            values = [v for k, v in r.items()
                      if (m := ROUTING_KEY.match(k)) and m.group(2) == measure and m.group(3) == domain]
            if values:
                curve.append((r["step"], statistics.fmean(values)))
        if not curve:
            raise TableError(f"{self.name}: metrics.jsonl holds no mod.L*.{measure} values")
        return curve

    def routing(self, measure):
        return self.routing_curve(measure)[-1][1]

    def _number(self, record, key):
        value = record.get(key)
        if not is_finite_number(value):
            raise TableError(f"{self.name}: step {record['step']} has no finite '{key}' value")
        return float(value)
