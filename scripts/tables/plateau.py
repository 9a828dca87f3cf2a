"""Whether a run's validation loss has stopped improving: the relative change over its last few
evaluations against a fixed criterion (the distillation tables' teacher must have plateaued, so that
a student's gap is to a teacher that more training would not move)."""

from dataclasses import dataclass

# The last this many evaluations (the first of them against the last) decide it...
PLATEAU_EVALS = 4
# ...and an improvement under this fraction of the loss over them is a plateau.
PLATEAU_CRITERION = 0.005

PLATEAUED = "plateaued"
IMPROVING = "still improving"
TOO_FEW = "too few evaluations to tell"


@dataclass(frozen=True)
class Plateau:
    """The check on one validation curve. change: (last - first) / first over the window (negative:
    the loss fell); best_step / best_loss: the lowest validation loss of the whole curve."""
    verdict: str
    evaluations: int
    first_step: int | None = None
    last_step: int | None = None
    change: float | None = None
    best_step: int | None = None
    best_loss: float | None = None
    final_loss: float | None = None

    def text(self):
        """One line for a page: the numbers, the criterion and the verdict."""
        criterion = f"criterion: an improvement under {PLATEAU_CRITERION * 100:g}% is a plateau"
        if self.verdict == TOO_FEW:
            return (f"{self.evaluations} evaluation(s), the check needs {PLATEAU_EVALS} ({criterion}): "
                    f"**{self.verdict}**")
        line = (f"validation loss changed by {self.change * 100:+.2f}% over the last {PLATEAU_EVALS} evaluations "
                f"(steps {self.first_step}-{self.last_step}; {criterion}): **{self.verdict}**")
        if self.best_step != self.last_step:
            line += (f"; its lowest validation loss was {self.best_loss:.4f} at step {self.best_step}, "
                     f"{self.final_loss - self.best_loss:+.4f} nats from the final one")
        return line


def plateau(curve, evals=PLATEAU_EVALS, criterion=PLATEAU_CRITERION):
    """The plateau check of curve, [(step, validation loss)] in step order."""
    if evals < 2:
        raise ValueError(f"a plateau check compares at least 2 evaluations, got {evals}")
    curve = sorted(curve)
    if len(curve) < evals:
        return Plateau(TOO_FEW, len(curve))
    (first_step, first), (last_step, last) = curve[-evals], curve[-1]
    change = (last - first) / first
    best_step, best = min(curve, key=lambda point: (point[1], point[0]))
    return Plateau(PLATEAUED if -change < criterion else IMPROVING, len(curve), first_step, last_step, change,
                   best_step, best, last)
