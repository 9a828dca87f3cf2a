"""The statistics behind the tables' verdicts (standard library only): mean and sample std over seeds,
Student-t quantiles, the 95% confidence interval of a mean difference (paired by seed, or Welch's),
the verdict it gives against the paper's sign, and the seeds a resolving interval would need."""

import math
from dataclasses import dataclass

CONFIDENCE = 0.95
REPRODUCED = "reproduced"
CONTRADICTED = "contradicted"
UNRESOLVED = "unresolved"
# seeds_needed gives up beyond this (the page then says "more than" it).
MAX_SEEDS = 1000
# The fewest seeds a verdict is drawn from: an interval over fewer is shown, but leaves the effect unresolved.
MIN_SEEDS = 3


def mean(values):
    values = list(values)
    if not values:
        raise ValueError("the mean of no values")
    return math.fsum(values) / len(values)


def sample_std(values):
    """The sample standard deviation (n - 1 in the denominator); None for fewer than two values."""
    values = list(values)
    if len(values) < 2:
        return None
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def _beta_continued_fraction(a, b, x):
    """The continued fraction of the regularized incomplete beta (modified Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 10000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            return result
    raise ArithmeticError(f"incomplete beta I_{x}({a}, {b}) did not converge")


def incomplete_beta(a, b, x):
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"incomplete beta needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast for x below (a + 1) / (a + b + 2); above it, use I_x(a, b) = 1 - I_{1-x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom (df > 0, not necessarily whole)."""
    if df <= 0:
        raise ValueError(f"Student's t needs df > 0, got {df}")
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The t with P(T <= t) = p, by bisection on t_cdf (monotone in t)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
        if high > 1e12:
            raise ArithmeticError(f"t quantile {p} at df {df} is beyond 1e12")
    for _ in range(200):
        middle = 0.5 * (low + high)
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def critical_t(df):
    """The two-sided 95% critical value t_{0.975, df}."""
    return t_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0, df)


@dataclass(frozen=True)
class Interval:
    """A mean difference (b - a) with its 95% confidence interval; low/high None when there is none
    (fewer than two samples). method: 'paired', 'Welch' or 'one-sample'; df: the t degrees of freedom."""
    difference: float
    low: float | None
    high: float | None
    method: str
    df: float | None
    n: int

    def excludes_zero(self):
        return self.low is not None and (self.low > 0 or self.high < 0)

    def half_width(self):
        return None if self.low is None else (self.high - self.low) / 2.0


def _interval(difference, standard_error, df, method, n):
    if df is None or standard_error is None:
        return Interval(difference, None, None, method, df, n)
    half = critical_t(df) * standard_error if standard_error > 0 else 0.0
    return Interval(difference, difference - half, difference + half, method, df, n)


def paired_interval(b, a):
    """The CI of mean(b_i - a_i) over pairs (the same seed in both rows): t on the differences, df n - 1."""
    if len(b) != len(a):
        raise ValueError(f"paired samples need equal lengths, got {len(b)} and {len(a)}")
    return one_sample_interval([x - y for x, y in zip(b, a)], method="paired")


def one_sample_interval(differences, method="one-sample"):
    """The CI of the mean of `differences` (e.g. a row's values minus a fixed reference), df n - 1."""
    differences = list(differences)
    n = len(differences)
    s = sample_std(differences)
    return _interval(mean(differences), None if s is None else s / math.sqrt(n), n - 1 if n > 1 else None,
                     method, n)


def welch_interval(b, a):
    """The CI of mean(b) - mean(a) for independent samples with unequal variances (Welch's t, the
    Welch-Satterthwaite degrees of freedom)."""
    difference = mean(b) - mean(a)
    sb, sa = sample_std(b), sample_std(a)
    n = min(len(b), len(a))
    if sb is None or sa is None:
        return Interval(difference, None, None, "Welch", None, n)
    vb, va = sb * sb / len(b), sa * sa / len(a)
    if vb + va == 0:
        return Interval(difference, difference, difference, "Welch", None, n)
    df = (vb + va) ** 2 / (vb * vb / (len(b) - 1) + va * va / (len(a) - 1))
    return _interval(difference, math.sqrt(vb + va), df, "Welch", n)


def verdict(interval, paper_sign):
    """reproduced: the CI excludes 0 on the paper's side; contradicted: on the other side; else
    unresolved. A difference without an interval (one seed), or with one over fewer than MIN_SEEDS
    seeds, is unresolved, whatever its sign."""
    if paper_sign not in (-1, 1):
        raise ValueError(f"the paper's sign must be -1 or +1, got {paper_sign}")
    if interval.n < MIN_SEEDS or not interval.excludes_zero():
        return UNRESOLVED
    return REPRODUCED if (interval.difference > 0) == (paper_sign > 0) else CONTRADICTED


def seeds_needed(difference_std, effect_size):
    """The fewest seeds n >= 2 whose 95% CI half-width t_{0.975,n-1} * std / sqrt(n) is below
    effect_size, for a difference whose per-seed std is difference_std; None beyond MAX_SEEDS."""
    if effect_size <= 0:
        raise ValueError(f"the effect size must be positive, got {effect_size}")
    if difference_std < 0:
        raise ValueError(f"a std cannot be negative, got {difference_std}")
    def resolves(n):
        return critical_t(n - 1) * difference_std / math.sqrt(n) < effect_size
    if not resolves(MAX_SEEDS):
        return None
    low, high = 1, MAX_SEEDS  # the half-width falls as n grows: bisect for the first n that resolves
    while high - low > 1:
        middle = (low + high) // 2
        if resolves(middle):
            high = middle
        else:
            low = middle
    return high
