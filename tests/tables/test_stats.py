"""Known-answer checks of scripts/tables/stats.py (standard library only, so any python3 runs it):
Student-t quantiles against textbook values, a paired and a Welch interval worked by hand, each
verdict, the seeds a resolving interval needs, and the plateau check of a validation curve.
Usage: python3 tests/tables/test_stats.py"""

import math
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

from tables import plateau, stats  # noqa: E402


def t_density(t, df):
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) * \
        (1 + t * t / df) ** (-(df + 1) / 2)


def simpson(f, a, b, n=4000):
    h = (b - a) / n
    return h / 3 * (f(a) + f(b) + sum((4 if k % 2 else 2) * f(a + k * h) for k in range(1, n)))


class StudentT(unittest.TestCase):
    def test_textbook_quantiles(self):
        self.assertAlmostEqual(stats.critical_t(2), 4.302653, places=6)
        self.assertAlmostEqual(stats.critical_t(10), 2.228139, places=6)
        self.assertAlmostEqual(stats.critical_t(1), 12.706205, places=5)
        self.assertAlmostEqual(stats.critical_t(30), 2.042272, places=6)
        self.assertAlmostEqual(stats.t_quantile(0.95, 5), 2.015048, places=6)
        self.assertAlmostEqual(stats.t_quantile(0.025, 2), -4.302653, places=6)

    def test_fractional_df_matches_the_integrated_density(self):
        # Welch's df is not whole: the quantile must hold 47.5% of the mass between 0 and it.
        df = 3.234718826405868
        q = stats.critical_t(df)
        self.assertAlmostEqual(simpson(lambda t: t_density(t, df), 0.0, q), 0.475, places=9)
        self.assertTrue(stats.critical_t(4) < q < stats.critical_t(3))

    def test_cdf_and_incomplete_beta(self):
        self.assertAlmostEqual(stats.t_cdf(0.0, 7), 0.5, places=12)
        self.assertAlmostEqual(stats.t_cdf(1.0, 1), 0.75, places=12)  # Cauchy: 1/2 + atan(1)/pi
        self.assertAlmostEqual(stats.incomplete_beta(2, 3, 0.4), 0.5248, places=12)  # 1 - (0.6^4 + 4*0.4*0.6^3)
        with self.assertRaisesRegex(ValueError, "df > 0"):
            stats.t_cdf(1.0, 0)
        with self.assertRaisesRegex(ValueError, "0 < p < 1"):
            stats.t_quantile(1.0, 3)


class Intervals(unittest.TestCase):
    def test_mean_and_sample_std(self):
        self.assertAlmostEqual(stats.mean([1, 2, 3, 4]), 2.5)
        self.assertAlmostEqual(stats.sample_std([1, 2, 3, 4]), math.sqrt(5 / 3))
        self.assertIsNone(stats.sample_std([3.0]))
        with self.assertRaisesRegex(ValueError, "no values"):
            stats.mean([])

    def test_paired_interval_by_hand(self):
        # d = b - a = (-0.10, -0.12, -0.11): mean -0.11, s_d = 0.01, se = 0.01 / sqrt(3),
        # half-width = 4.302653 * 0.0057735 = 0.0248414
        i = stats.paired_interval([3.0, 3.08, 3.19], [3.1, 3.2, 3.3])
        self.assertEqual((i.method, i.df, i.n), ("paired", 2, 3))
        self.assertAlmostEqual(i.difference, -0.11, places=12)
        self.assertAlmostEqual(i.low, -0.1348414, places=6)
        self.assertAlmostEqual(i.high, -0.0851586, places=6)
        with self.assertRaisesRegex(ValueError, "equal lengths"):
            stats.paired_interval([1.0, 2.0], [1.0])

    def test_welch_interval_by_hand(self):
        # b = 1..4: mean 2.5, s^2 = 5/3; a = 3, 5, 7: mean 5, s^2 = 4. se^2 = 5/12 + 4/3 = 1.75;
        # df = 1.75^2 / ((5/12)^2 / 3 + (4/3)^2 / 2) = 3.2347188; t = 3.0557127 -> half-width 4.0423280
        i = stats.welch_interval([1, 2, 3, 4], [3, 5, 7])
        self.assertEqual(i.method, "Welch")
        self.assertAlmostEqual(i.df, 3.2347188, places=6)
        self.assertAlmostEqual(i.difference, -2.5)
        self.assertAlmostEqual(i.low, -6.542328, places=5)
        self.assertAlmostEqual(i.high, 1.542328, places=5)

    def test_one_seed_gives_no_interval(self):
        i = stats.paired_interval([3.0], [3.2])
        self.assertIsNone(i.low)
        self.assertFalse(i.excludes_zero())
        self.assertIsNone(stats.welch_interval([3.0], [3.2, 3.3]).low)


class Verdicts(unittest.TestCase):
    def test_each_verdict(self):
        lower = stats.paired_interval([3.0, 3.08, 3.19], [3.1, 3.2, 3.3])  # CI [-0.135, -0.085]
        self.assertEqual(stats.verdict(lower, -1), stats.REPRODUCED)
        self.assertEqual(stats.verdict(lower, 1), stats.CONTRADICTED)
        # the same sign, but d = (-0.1, -0.2, -0.1): CI [-0.277, +0.010] holds 0
        spread = stats.paired_interval([3.0, 3.1, 3.2], [3.1, 3.3, 3.3])
        self.assertLess(spread.difference, 0)
        self.assertEqual(stats.verdict(spread, -1), stats.UNRESOLVED)

    def test_a_sign_alone_is_never_a_verdict(self):
        one_seed = stats.paired_interval([3.0], [3.5])
        self.assertEqual(stats.verdict(one_seed, -1), stats.UNRESOLVED)
        self.assertEqual(stats.verdict(one_seed, 1), stats.UNRESOLVED)
        with self.assertRaisesRegex(ValueError, "-1 or \\+1"):
            stats.verdict(one_seed, 0)

    def test_two_seeds_are_too_few_for_a_verdict(self):
        # d = (-0.1, -0.1): a point interval at -0.1 excludes 0, but over 2 seeds it decides nothing
        two = stats.paired_interval([3.0, 3.01], [3.1, 3.11])
        self.assertTrue(two.excludes_zero())
        self.assertEqual(two.n, 2)
        self.assertEqual(stats.verdict(two, -1), stats.UNRESOLVED)
        self.assertEqual(stats.verdict(two, 1), stats.UNRESOLVED)
        self.assertEqual(stats.verdict(stats.welch_interval([3.0, 3.0], [3.5, 3.5, 3.5]), -1), stats.UNRESOLVED)
        three = stats.paired_interval([3.0, 3.01, 3.02], [3.1, 3.11, 3.12])
        self.assertEqual(stats.verdict(three, -1), stats.REPRODUCED)


class SeedsNeeded(unittest.TestCase):
    def test_seeds_for_a_resolving_interval(self):
        # 0.047 nats of noise against a 0.02 effect: n = 24 gives 2.068658 * 0.047 / sqrt(24) = 0.01985,
        # n = 23 gives 2.073873 * 0.047 / sqrt(23) = 0.02032.
        self.assertEqual(stats.seeds_needed(0.047, 0.02), 24)
        self.assertEqual(stats.seeds_needed(0.0, 0.01), 2)
        self.assertIsNone(stats.seeds_needed(1.0, 0.001))
        with self.assertRaisesRegex(ValueError, "effect size must be positive"):
            stats.seeds_needed(0.01, 0.0)
        with self.assertRaisesRegex(ValueError, "cannot be negative"):
            stats.seeds_needed(-0.01, 0.02)


class Plateau(unittest.TestCase):
    def test_the_last_four_evaluations_decide(self):
        # 3.05 -> 3.00 over steps 2500-4000: (3.00 - 3.05) / 3.05 = -1.64%, an improvement above 0.5%
        curve = [(500, 4.0), (1000, 3.5), (1500, 3.2), (2000, 3.1), (2500, 3.05), (3000, 3.02), (3500, 3.01),
                 (4000, 3.0)]
        check = plateau.plateau(curve)
        self.assertEqual(check.verdict, plateau.IMPROVING)
        self.assertAlmostEqual(check.change, -0.05 / 3.05)
        self.assertEqual((check.first_step, check.last_step, check.evaluations), (2500, 4000, 8))
        self.assertIn("changed by -1.64% over the last 4 evaluations (steps 2500-4000", check.text())
        self.assertNotIn("lowest", check.text())
        # 3.012 -> 3.000: -0.398%, under the criterion
        curve[4] = (2500, 3.012)
        self.assertEqual(plateau.plateau(curve).verdict, plateau.PLATEAUED)
        # the same points in any order
        self.assertEqual(plateau.plateau(list(reversed(curve))).change, plateau.plateau(curve).change)

    def test_a_rising_loss_has_plateaued_past_its_best(self):
        check = plateau.plateau([(1, 3.5), (2, 3.2), (3, 3.0), (4, 2.99), (5, 3.01), (6, 3.03)])
        self.assertEqual(check.verdict, plateau.PLATEAUED)
        self.assertAlmostEqual(check.change, 0.01)  # 3.00 -> 3.03
        self.assertEqual((check.best_step, check.best_loss), (4, 2.99))
        self.assertIn("changed by +1.00%", check.text())
        self.assertIn("its lowest validation loss was 2.9900 at step 4, +0.0400 nats from the final one", check.text())

    def test_too_few_evaluations(self):
        check = plateau.plateau([(50, 3.5), (100, 3.0)])
        self.assertEqual(check.verdict, plateau.TOO_FEW)
        self.assertIn("2 evaluation(s), the check needs 4", check.text())
        with self.assertRaisesRegex(ValueError, "at least 2 evaluations"):
            plateau.plateau([(1, 3.0)], evals=1)


if __name__ == "__main__":
    unittest.main()
