"""Checks of scripts/tables.py: the gathering, seeds and verdict logic on fabricated metrics, the failure
messages, pack and merge, and one table end to end at tiny scale on the CPU.
Usage: python3 tests/tables/test_tables.py FATHOM_BINARY   (exit 77: skipped, no matplotlib or PyYAML)"""

import json
import math
import os
import subprocess
import sys
import tempfile
import types
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

from tables.metrics import RunMetrics  # noqa: E402
from tables.rows import Row  # noqa: E402
from tables.runs import TableError, is_complete, read_metrics, recipe_value, run_dir_for, train  # noqa: E402
from tables.scales import scale_sets  # noqa: E402
from tables.training import train_rows  # noqa: E402
from tables.training_tables import Context, DslaStates, ModRouting  # noqa: E402
from tables import distill_runs  # noqa: E402
from tables.distill_chains import CHAINS, chain_dir, random_order  # noqa: E402
from tables.distill_results import DistillResult, attention_layers  # noqa: E402
from tables.distill_tables import DslaConversion, DslaOrder  # noqa: E402
from tables.records import device_time_line, provenance_lines, summarize  # noqa: E402
from tables.settings import differences  # noqa: E402

FATHOM = None


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def write_metrics(folder, records):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def fabricated(val_loss, final_step=100):
    train = [{"kind": "train", "step": s, "loss": 5.0 - s / 100, "tokens_per_second": 1000.0 + s}
             for s in range(10, final_step + 1, 10)]
    evals = [{"kind": "eval", "step": 50, "loss/moby_dick": val_loss + 0.5,
              "mod.L1.accuracy/moby_dick": 0.8, "mod.L3.accuracy/moby_dick": 0.9,
              "mod.L1.recall/moby_dick": 0.2, "mod.L3.recall/moby_dick": 0.4},
             {"kind": "eval", "step": final_step, "loss/moby_dick": val_loss,
              "mod.L1.accuracy/moby_dick": 0.9, "mod.L3.accuracy/moby_dick": 1.0,
              "mod.L1.recall/moby_dick": 0.5, "mod.L3.recall/moby_dick": 0.7}]
    return train + evals


class Gathering(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "run")

    def tearDown(self):
        self.tmp.cleanup()

    def test_measures_come_from_the_records(self):
        write_metrics(self.dir, fabricated(3.25))
        m = RunMetrics("r", read_metrics(os.path.join(self.dir, "metrics.jsonl")))
        self.assertAlmostEqual(m.val_loss(), 3.25)
        # last tenth of 100 steps: the records at steps 90 and 100 (losses 4.1 and 4.0)
        self.assertAlmostEqual(m.train_loss(), 4.05)
        self.assertAlmostEqual(m.routing("accuracy"), 0.95)
        self.assertEqual(m.routing_curve("recall"), [(50, 0.30000000000000004), (100, 0.6)])
        self.assertEqual(m.tokens_per_second(), 1060.0)

    def test_completion_needs_the_final_evaluation(self):
        write_metrics(self.dir, fabricated(3.0, final_step=100))
        self.assertTrue(is_complete(self.dir, 100))
        self.assertFalse(is_complete(self.dir, 200))
        write_metrics(self.dir, fabricated(3.0)[:-1])  # killed before the final evaluation
        self.assertFalse(is_complete(self.dir, 100))

    def test_a_missing_value_is_an_error_not_a_number(self):
        records = fabricated(3.0)
        del records[-1]["loss/moby_dick"]
        records[-1]["loss/other"] = float("nan")
        write_metrics(self.dir, records)
        m = RunMetrics("r", read_metrics(os.path.join(self.dir, "metrics.jsonl")), "other")
        with self.assertRaisesRegex(TableError, "no finite 'loss/other'"):
            m.val_loss()
        dense = RunMetrics("dense", [{k: v for k, v in r.items() if not k.startswith("mod.")} for r in fabricated(3.0)])
        with self.assertRaisesRegex(TableError, "no mod.L\\*.accuracy"):
            dense.routing("accuracy")

    def test_malformed_metrics_name_the_line(self):
        write_metrics(self.dir, [fabricated(3.0)[0], "{not json"])
        with self.assertRaisesRegex(TableError, "metrics.jsonl:2: not JSON"):
            read_metrics(os.path.join(self.dir, "metrics.jsonl"))
        with self.assertRaisesRegex(TableError, "no evaluation records"):
            RunMetrics("r", fabricated(3.0)[:-2])

    def test_a_run_with_several_domains_needs_the_compared_one(self):
        records = fabricated(3.0)
        records.append({"kind": "eval", "step": 100, "loss/technical": 4.5})
        with self.assertRaisesRegex(TableError, "2 validation domains logged \\(moby_dick, technical\\)"):
            RunMetrics("r", records).val_loss()
        self.assertAlmostEqual(RunMetrics("r", records, "technical").val_loss(), 4.5)
        self.assertAlmostEqual(RunMetrics("r", records, "moby_dick").routing("accuracy"), 0.95)
        with self.assertRaisesRegex(TableError, "no evaluation of validation domain 'wiki'"):
            RunMetrics("r", records, "wiki").val_loss()

    def test_table_effects_are_intervals_over_seeds(self):
        def row(key, losses):
            return Row(key, {seed: RunMetrics(key, fabricated(v)) for seed, v in enumerate(losses, 1)}, ("same",))
        rows = {"attention": row("attention", [3.0, 3.1, 3.05]), "1state": row("1state", [3.4, 3.5, 3.45]),
                "2state": row("2state", [3.29, 3.42, 3.36])}
        sections, effects = DslaStates().sections(rows, Context("small"))
        # 2 - 1 state: d = (-0.11, -0.08, -0.09), paired: mean -0.0933, CI -0.0933 +- 4.3027 * 0.01528 / sqrt 3
        self.assertEqual(effects[0].interval.method, "paired")
        self.assertAlmostEqual(effects[0].interval.difference, -0.28 / 3)
        self.assertAlmostEqual(effects[0].interval.half_width(), 4.302653 * math.sqrt(7 / 3) / 100 / math.sqrt(3),
                               places=6)
        self.assertEqual([e.verdict() for e in effects], ["reproduced", "reproduced"])
        text = "\n".join(sum(sections, []))
        self.assertIn("| hybrid, 2 states | 81.19 | 3.3567 ± 0.0651 |", text)
        self.assertIn("**reproduced**", text)
        self.assertIn("no: ±0.0379 vs 0.01 nats; 12 seeds would resolve it", text)
        # rows on different data orders are not paired: Welch
        rows["1state"].order = ("other",)
        _, effects = DslaStates().sections(rows, Context("small"))
        self.assertEqual(effects[0].interval.method, "Welch")

    def test_one_seed_is_unresolved_whatever_the_sign(self):
        rows = {k: Row(k, {1: RunMetrics(k, fabricated(v))}) for k, v in
                (("attention", 3.0), ("1state", 3.4), ("2state", 3.2))}
        sections, effects = DslaStates().sections(rows, Context("tiny"))
        self.assertEqual([e.verdict() for e in effects], ["unresolved", "unresolved"])
        self.assertIn("one seed: no interval", "\n".join(sum(sections, [])))

    def test_throughput_only_for_runs_alone_on_the_device(self):
        rows = {k: Row(k, {s: RunMetrics(k, fabricated(3.0 + s / 100)) for s in (1, 2)}, ("same",))
                for k in ("dense", "c12_identity", "c12_sigmoid", "c12_isoflop", "c50", "c12_random")}
        alone, effects = ModRouting().sections(rows, Context("small", alone=True))
        shared, fewer = ModRouting().sections(rows, Context("small", alone=False))
        self.assertIn("ours tokens/s", alone[0][0])
        self.assertNotIn("tokens/s", "\n".join(shared[0] + shared[1]))
        self.assertIn("Throughput is left out", "\n".join(shared[2]))
        self.assertEqual(len(effects), len(fewer) + 1)


def write_chain(folder, teacher_loss, losses, layers, kv_saved=(256000, 512000), named=(True, True)):
    """A fabricated distill.json (the layout `fathom distill` writes) with one model per entry of losses:
    M_k converts the first k of layers."""
    os.makedirs(folder, exist_ok=True)
    models = [{"k": k + 1, "layers": layers[:k + 1], "fraction": (k + 1) / len(layers), "named": named[k],
               "checkpoint": f"{folder}/M_{k + 1}",
               "validation": {"moby_dick": {"loss": loss, "ppl": math.exp(loss), "teacher_loss": teacher_loss,
                                            "teacher_ppl": math.exp(teacher_loss)}},
               "kv_bytes_saved_per_1k_tokens": kv_saved[k], "decode_tokens_per_second": 100.0}
              for k, loss in enumerate(losses)]
    data = {"teacher": {"validation": {"moby_dick": {"loss": teacher_loss, "ppl": math.exp(teacher_loss)}},
                        "kv_bytes_per_1k_tokens": 1024000, "decode_tokens_per_second": 200.0}, "models": models}
    with open(os.path.join(folder, "distill.json"), "w") as f:
        json.dump(data, f)
    with open(os.path.join(folder, "order.json"), "w") as f:
        json.dump({"order": "entropy", "layers": [{"rank": i + 1, "layer": l} for i, l in enumerate(layers)]}, f)
    return folder


def teacher_records(val_curve):
    """A teacher's metrics.jsonl records: a training record at each evaluation, then the evaluation."""
    records = []
    for step, loss in val_curve:
        records += [{"kind": "train", "step": step, "loss": loss - 0.2, "tokens_per_second": 1000.0},
                    {"kind": "eval", "step": step, "loss/moby_dick": loss}]
    return records


def write_chains(out, teacher_curve, chains, kv_saved=(256000, 512000), remeasured=0.0):
    """A fabricated runs/dsla-distill: the teacher's metrics, and chains {key: {seed: (25% loss, 50% loss,
    order)}} converting 2 and 4 of 8 layers, all of this teacher (each chain measuring its loss `remeasured`
    nats above the teacher's own final evaluation)."""
    write_metrics(os.path.join(out, "runs", "dsla-distill", "teacher"), teacher_records(teacher_curve))
    teacher_loss = teacher_curve[-1][1] + remeasured
    for key, by_seed in chains.items():
        for seed, (lo, hi, order) in by_seed.items():
            folder = chain_dir(out, key, seed)
            write_chain(folder, teacher_loss, [lo, hi], order, kv_saved, (True, True))
            # M_2 and M_4 of 8 layers: rewrite k so the named models convert 25% and 50%
            with open(os.path.join(folder, "distill.json")) as f:
                data = json.load(f)
            for model, k in zip(data["models"], (2, 4)):
                model.update({"k": k, "layers": order[:k], "fraction": k / len(order)})
            with open(os.path.join(folder, "distill.json"), "w") as f:
                json.dump(data, f)


H200_RECORD = {"command": "scripts/tables.py dsla-conversion --scale reference", "commit": "3ab89bc",
               "date": "2026-12-04 21:12 UTC", "device": "NVIDIA H200 (training on the GPU)", "jobs": 1,
               "seconds": 120.0}
CPU_RECORD = {"command": "scripts/tables.py dsla-conversion --scale reference", "commit": "72da655",
              "date": "2026-12-05 09:00 UTC", "device": "CPU only (x86_64, 2 cores)", "jobs": 1, "seconds": 300.0}


class Provenance(unittest.TestCase):
    """A page credits each device and commit with the runs its records say were made on or from it."""

    def test_one_device_and_commit_is_one_line_each(self):
        info = summarize([H200_RECORD, dict(H200_RECORD, seconds=60.0), H200_RECORD])
        self.assertEqual(provenance_lines(info), ["- commit: 3ab89bc: all 3 runs",
                                                  "- device: NVIDIA H200 (training on the GPU): all 3 runs"])
        self.assertAlmostEqual(info["minutes"], 5.0)
        self.assertEqual(info["date"], "2026-12-04 21:12 UTC")

    def test_runs_of_several_machines_are_credited_to_each(self):
        # most on the H200, one finished on a CPU from a later commit
        info = summarize([H200_RECORD, H200_RECORD, CPU_RECORD, H200_RECORD])
        self.assertEqual(provenance_lines(info), [
            "- commits (the runs made from each):", "  - 3ab89bc: 3 runs", "  - 72da655: 1 run",
            "- devices (the runs made on each, and their minutes of training):",
            "  - NVIDIA H200 (training on the GPU): 3 runs, 6.0 minutes",
            "  - CPU only (x86_64, 2 cores): 1 run, 5.0 minutes"])
        self.assertEqual(info["date"], "2026-12-04 21:12 UTC to 2026-12-05 09:00 UTC")
        self.assertAlmostEqual(info["minutes"], 11.0)


    def test_device_time_counts_runs_that_shared_a_device_once(self):
        alone = summarize([H200_RECORD, dict(H200_RECORD, seconds=60.0), H200_RECORD])
        self.assertEqual(device_time_line(alone), "- device time: 5.0 minutes of training over all runs")
        # two runs of 2 minutes four at a time, one of 2 minutes alone: 6 minutes of training, 3 of the device
        shared = summarize([dict(H200_RECORD, jobs=4), dict(H200_RECORD, jobs=4), H200_RECORD])
        self.assertAlmostEqual(shared["shared_minutes"], 3.0)
        self.assertEqual(device_time_line(shared),
                         "- device time: 6.0 minutes of training over all runs; up to 4 shared a device at once, so "
                         "the devices were busy about 3.0 minutes (each run's minutes over the runs sharing its "
                         "device)")


T975_DF2 = 4.302653  # Student's t, two-sided 95%, 2 degrees of freedom


def hand_interval(differences):
    """mean and 95% half-width of three per-seed differences, computed by hand."""
    m = sum(differences) / 3
    sd = math.sqrt(sum((d - m) ** 2 for d in differences) / 2)
    return m, T975_DF2 * sd / math.sqrt(3)


class DistillGathering(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def chain(self, key, *args, **kwargs):
        return DistillResult(write_chain(os.path.join(self.tmp.name, key), *args, **kwargs))

    def test_models_are_read_per_fraction(self):
        r = self.chain("entropy", 3.0, [3.1, 3.3], [2, 0, 1, 3])
        self.assertEqual(r.domain, "moby_dick")
        self.assertAlmostEqual(r.at(0.25).loss, 3.1)
        self.assertEqual(r.at(0.5).layers, [2, 0])
        self.assertEqual(r.at(0.5).kv_saved, 512000)
        self.assertAlmostEqual(r.at(0.5).gap(), 0.3)
        self.assertEqual(attention_layers(r.dir), [2, 0, 1, 3])

    def test_random_orders_are_fixed_shuffles_one_per_seed(self):
        order = random_order([3, 0, 2, 1], 1)
        self.assertEqual(sorted(order), [0, 1, 2, 3])
        self.assertEqual(order, random_order([0, 1, 2, 3], 1))
        shuffles = [random_order(range(8), seed) for seed in (1, 2, 3)]
        self.assertEqual(len({tuple(s) for s in shuffles}), 3)  # the reference teacher's 8 layers: 3 distinct
        self.assertEqual(len({tuple(sorted(s[:4])) for s in shuffles}), 3)  # ...converting 3 distinct halves
        self.assertEqual(random_order(range(8), 1), random_order(range(8), 1))

    def test_an_incomplete_or_malformed_chain_is_an_error(self):
        folder = os.path.join(self.tmp.name, "c")
        with self.assertRaisesRegex(TableError, "no distill.json"):
            DistillResult(folder)
        self.assertFalse(distill_runs.is_complete(folder))
        write_chain(folder, 3.0, [3.1], [0, 1, 2, 3])
        with self.assertRaisesRegex(TableError, "1 named models, expected one per fraction"):
            DistillResult(folder)
        self.assertFalse(distill_runs.is_complete(folder))  # stopped after M_1: resumed, never read
        # 8 layers converted 1 to 4: the intermediate M_1 and M_3 are skipped
        write_chain(folder, 3.0, [3.05, 3.1, 3.2, 3.3], list(range(8)), kv_saved=(1, 2, 3, 4),
                    named=(False, True, False, True))
        self.assertEqual((DistillResult(folder).at(0.25).k, DistillResult(folder).at(0.5).k), (2, 4))
        self.assertTrue(distill_runs.is_complete(folder))
        # named models that are not 25% and 50% of the layers (distill.layers [0.25, 0.75]): not this table's
        write_chain(folder, 3.0, [3.1, 3.2, 3.3], [0, 1, 2, 3], kv_saved=(1, 2, 3), named=(True, False, True))
        with self.assertRaisesRegex(TableError, "M_3 converts 3 of 4 layers, but 50% of them is 2: the chain was "
                                                "distilled with other distill.layers"):
            DistillResult(folder)
        write_chain(folder, 3.0, [3.1, float("nan")], [0, 1, 2, 3])
        with self.assertRaisesRegex(TableError, "validation.moby_dick.loss: not a finite number"):
            DistillResult(folder)
        # earlier fathom wrote a diverged model's loss as printf does: reported as diverged, not as a file that is not
        # JSON, and the chain is finished (distilling it again would read the same numbers back)
        path = os.path.join(folder, "distill.json")
        with open(path) as f:
            text = f.read()
        write_text(path, text.replace("NaN", "-nan"))
        self.assertIn(": -nan,", text.replace("NaN", "-nan"))
        with self.assertRaisesRegex(TableError, r"models\[1\].validation.moby_dick.loss: not a finite number "
                                                r"\(nan\): M_2 diverged"):
            DistillResult(folder)
        self.assertTrue(distill_runs.is_complete(folder))
        # as fathom writes it now: null
        write_text(path, text.replace("NaN", "null"))
        with self.assertRaisesRegex(TableError, r"models\[1\].validation.moby_dick.loss: not a finite number "
                                                r"\(None\): M_2 diverged"):
            DistillResult(folder)
        self.assertTrue(distill_runs.is_complete(folder))
        with open(os.path.join(folder, "distill.json"), "w") as f:
            f.write("{")
        with self.assertRaisesRegex(TableError, "distill.json: not JSON"):
            DistillResult(folder)
        self.assertFalse(distill_runs.is_complete(folder))

    def test_distill_sets_name_the_teacher_order_seed_and_chain(self):
        sets = distill_runs.distill_sets("tiny", None, {"train.threads": 2}, "/t/teacher", [3, 1, 0, 2], 2,
                                         CHAINS["entropy-1state"].sets)
        self.assertEqual(sets["distill.teacher"], "checkpoint:/t/teacher")
        self.assertEqual(sets["distill.order"], "[3, 1, 0, 2]")
        self.assertEqual(sets["distill.layers"], "[0.25, 0.5]")
        self.assertEqual(sets["train.seed"], 2)
        self.assertEqual(sets["dsla.states"], 1)
        self.assertEqual(sets["train.threads"], 2)
        self.assertNotIn("train.steps", sets)
        self.assertEqual(distill_runs.distill_sets("reference", None, {}, "/t", "entropy")["model.n_layers"], 8)
        self.assertEqual(sets["train.schedule.warmup_steps"], 2)  # tiny: 2 of 20 steps per layer

    def test_a_chain_warms_up_for_a_twentieth_of_each_layer(self):
        # reference: 500 steps per layer warm up for 25, not the 100 of the scale's 2,000-step training runs
        sets = distill_runs.distill_sets("reference", None, {}, "/t", "entropy")
        self.assertEqual((sets["distill.steps_per_layer"], sets["train.schedule.warmup_steps"]), (500, 25))
        self.assertEqual(distill_runs.distill_sets("reference", 1000, {}, "/t", "entropy")
                         ["train.schedule.warmup_steps"], 50)
        self.assertNotIn("train.schedule.warmup_steps", distill_runs.distill_sets("small", None, {}, "/t", "entropy"))

    def test_one_state_chains_take_the_recipes_loss_without_gate_cos(self):
        recipe = recipe_value(os.path.join(REPO, distill_runs.DISTILL_RECIPE), "distill.loss")
        self.assertEqual(recipe.replace(", gate_cos: 0.1", ""), CHAINS["entropy-1state"].sets["distill.loss"])

    def test_the_reference_teacher_evaluates_every_500_steps(self):
        sets = distill_runs.teacher_sets("reference", None, {})
        self.assertEqual((sets["train.steps"], sets["eval.every"], sets["checkpoint.every"]), (8000, 500, 500))
        self.assertEqual(distill_runs.teacher_run("reference").sets["model.n_layers"], 8)
        self.assertEqual(distill_runs.teacher_sets("reference", 1000, {})["eval.every"], 250)  # too short: 4 evals
        self.assertEqual(distill_runs.teacher_sets("reference", None, {"eval.every": 100})["eval.every"], 100)
        self.assertEqual(distill_runs.teacher_sets("tiny", None, {})["eval.every"], 75)


# Three seeds of every chain, 8 layers (25% = 2, 50% = 4), a teacher ending at 3.0.
PLATEAUED_CURVE = [(500, 4.0), (1000, 3.5), (1500, 3.2), (2000, 3.1), (2500, 3.01), (3000, 3.005), (3500, 3.002),
                   (4000, 3.0)]
IMPROVING_CURVE = [(500, 4.0), (1000, 3.5), (1500, 3.2), (2000, 3.1), (2500, 3.05), (3000, 3.02), (3500, 3.01),
                   (4000, 3.0)]
LOSSES = {  # key: [(25%, 50%) per seed 1, 2, 3]
    "entropy": [(3.10, 3.20), (3.12, 3.25), (3.11, 3.21)],
    "entropy-1state": [(3.15, 3.30), (3.16, 3.28), (3.18, 3.33)],
    "sensitivity": [(3.09, 3.23), (3.12, 3.27), (3.10, 3.24)],
    "random": [(3.15, 3.30), (3.14, 3.20), (3.18, 3.35)],
}


def ranked_orders(seed):
    """The entropy and sensitivity orders of the fabricated chains: at seed 1 the same first two layers
    as shuffle 1, in the other order; at seeds 2 and 3, a set no shuffle begins with."""
    shuffle = random_order(range(8), 1)
    if seed == 1:
        return [shuffle[1], shuffle[0]] + shuffle[2:]
    return [7, 6, 5, 4, 3, 2, 1, 0] if seed == 2 else [0, 7, 1, 6, 2, 5, 3, 4]


def fabricated_chains(keys=tuple(LOSSES), seeds=(1, 2, 3)):
    return {key: {s: (*LOSSES[key][s - 1], random_order(range(8), s) if key == "random" else ranked_orders(s))
                  for s in seeds} for key in keys}


class DistillTablesFromSeeds(unittest.TestCase):
    """The distillation pages from fabricated chains at three seeds: their rows, effects, CIs, verdicts,
    pairing and teacher check are what a hand computation gives."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def read(self, table, seeds=(1, 2, 3)):
        return table.read(self.out, REPO, "tiny", {}, list(seeds))

    def test_conversion_rows_and_effects(self):
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains())
        table = DslaConversion()
        sections, effects = table.sections(self.read(table))
        self.assertEqual([e.interval.method for e in effects], ["paired", "one-sample", "paired", "paired"])
        expected = [hand_interval([0.10, 0.13, 0.10]),     # 50% - 25%, 2 states
                    hand_interval([0.10, 0.12, 0.11]),     # 25% - the teacher's 3.0
                    hand_interval([-0.05, -0.04, -0.07]),  # 2 - 1 state at 25%
                    hand_interval([-0.10, -0.03, -0.12])]  # 2 - 1 state at 50%
        for effect, (mean, half) in zip(effects, expected):
            self.assertAlmostEqual(effect.interval.difference, mean)
            self.assertAlmostEqual(effect.interval.half_width(), half, places=5)
        # 0.11 +- 0.0430, 0.11 +- 0.0248, -0.0533 +- 0.0379 exclude 0 on the paper's side; -0.0833 +- 0.1174 does not
        self.assertEqual([e.verdict() for e in effects], ["reproduced", "reproduced", "reproduced", "unresolved"])
        text = "\n".join(sum(sections, []))
        self.assertIn("| teacher | - | - | 8.79 | 4.13 | 3.0000 |", text)
        self.assertIn(f"| DSLA 25% | 2 | 2: {ranked_orders(1)[0]}, {ranked_orders(1)[1]} (seed 1); 7, 6 (seed 2); "
                      f"0, 7 (seed 3) | 9.26 | 4.14 | 3.1100 ± 0.0100 |", text)
        self.assertIn("| DSLA 50% | 1 | 4: ", text)
        self.assertIn("| - | - | 3.3033 ± 0.0252 |", text)  # 1 state: no paper PPL in Table 1
        self.assertIn("0.1100 ± 0.0100 |", text)  # the gap to the teacher
        self.assertIn("512,000 (50%)", text)
        self.assertIn("plateau check: validation loss changed by -0.33% over the last 4 evaluations (steps "
                      "2500-4000; criterion: an improvement under 0.5% is a plateau): **plateaued**", text)

    def test_the_gap_to_the_teacher_is_to_the_teacher_each_chain_measured(self):
        # the chains measure the teacher at 3.0015 (within the tolerance of its own 3.0): the effect is the
        # students' gaps to 3.0015, the gap column's mean, not their distance from 3.0
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains(("entropy", "entropy-1state")), remeasured=0.0015)
        table = DslaConversion()
        sections, effects = table.sections(self.read(table))
        teacher = effects[1]
        self.assertEqual(teacher.interval.method, "one-sample")
        mean, half = hand_interval([3.10 - 3.0015, 3.12 - 3.0015, 3.11 - 3.0015])
        self.assertAlmostEqual(teacher.interval.difference, mean)
        self.assertAlmostEqual(teacher.interval.half_width(), half, places=5)
        self.assertIn("0.1085 ± 0.0100 |", "\n".join(sum(sections, [])))  # the gap column: the same mean

    def test_order_rows_effects_and_same_layer_notes(self):
        write_chains(self.out, IMPROVING_CURVE, fabricated_chains())
        table = DslaOrder()
        results = self.read(table)
        self.assertEqual(results.shuffles, {s: random_order(range(8), s) for s in (1, 2, 3)})
        sections, effects = table.sections(results)
        self.assertEqual([e.label.split(" (")[0] for e in effects],
                         ["entropy - random order, 25% converted", "sensitivity - random order, 25% converted",
                          "entropy - random order, 50% converted", "sensitivity - random order, 50% converted",
                          "entropy - sensitivity order, 25% converted", "entropy - sensitivity order, 50% converted"])
        self.assertTrue(all(e.interval.method == "paired" for e in effects))
        e, s, r = ([v[i] for v in LOSSES[k]] for k, i in (("entropy", 1), ("sensitivity", 1), ("random", 1)))
        mean, half = hand_interval([a - b for a, b in zip(e, s)])  # -0.03, -0.02, -0.03
        self.assertAlmostEqual(effects[5].interval.difference, mean)
        self.assertAlmostEqual(effects[5].interval.half_width(), half, places=5)
        # entropy beats sensitivity at 50% by -0.0267 +- 0.0143: the proxy does at least as well as the order it
        # stands in for, as the paper claims; only an entropy order measurably worse would contradict it
        self.assertEqual(effects[5].verdict(), "reproduced")
        mean, half = hand_interval([a - b for a, b in zip(e, r)])  # -0.10, +0.05, -0.14
        self.assertAlmostEqual(effects[2].interval.difference, mean)
        self.assertEqual(effects[2].verdict(), "unresolved")
        text = "\n".join(sum(sections, []))
        self.assertIn("**still improving**", text)
        self.assertIn("The teacher is still improving", text)
        self.assertIn(f"- seed 2: random.Random(2508): {', '.join(map(str, random_order(range(8), 2)))}", text)
        self.assertIn("Same layers at 25%: entropy (lowest first) converts the same set as the random shuffle at "
                      "seed 1", text)
        self.assertIn("Same layers at 25%: sensitivity (lowest loss first)", text)
        self.assertNotIn("the order is the same too", text)

    def test_one_seed_gives_rows_without_intervals(self):
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains(seeds=(1,)))
        table = DslaConversion()
        sections, effects = table.sections(self.read(table, (1,)))
        self.assertEqual({e.verdict() for e in effects}, {"unresolved"})
        # the chains of seed 1 still pair (the same batches): a pair without an interval, not Welch's t
        self.assertEqual([e.interval.method for e in effects], ["paired", "one-sample", "paired", "paired"])
        self.assertIn("| paired: no interval |", "\n".join(sum(sections, [])))
        self.assertIn("| DSLA 25% | 2 | 2: ", "\n".join(sum(sections, [])))

    def test_chains_at_other_seeds_are_named_not_dropped_silently(self):
        chains = fabricated_chains(("entropy", "entropy-1state"))
        for key in chains:
            chains[key][4] = chains[key][1]
        write_chains(self.out, PLATEAUED_CURVE, chains)
        os.makedirs(chain_dir(self.out, "sensitivity", 5))  # another table's chain: not this page's
        table = DslaConversion()
        results = self.read(table)
        self.assertEqual(results.seeds, [1, 2, 3])
        text = "\n".join(sum(table.sections(results)[0], []))
        self.assertIn("Chains of this table at other seeds are in runs/dsla-distill but not on this page (it reads "
                      "seeds 1, 2, 3; --seeds sets how many): entropy/seed-4, entropy-1state/seed-4.", text)

    def test_each_device_is_credited_with_the_chains_made_on_it(self):
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains(("entropy", "entropy-1state")))
        write_text(os.path.join(self.out, "runs", "dsla-distill", "teacher", "measured_by.json"),
                   json.dumps(dict(H200_RECORD, seconds=600)))
        for key in ("entropy", "entropy-1state"):
            for seed in (1, 2, 3):
                record = CPU_RECORD if (key, seed) == ("entropy-1state", 3) else H200_RECORD
                write_text(os.path.join(chain_dir(self.out, key, seed), "measured_by.json"), json.dumps(record))
        os.remove(os.path.join(chain_dir(self.out, "entropy", 2), "measured_by.json"))  # a chain of earlier tables.py
        info = summarize(self.read(DslaConversion()).records)
        self.assertEqual(provenance_lines(info), [
            "- commits (the runs made from each):", "  - 3ab89bc: 5 runs", "  - 72da655: 1 run",
            "  - not recorded (no measured_by.json): 1 run",
            "- devices (the runs made on each, and their minutes of training):",
            "  - NVIDIA H200 (training on the GPU): 5 runs, 18.0 minutes",
            "  - CPU only (x86_64, 2 cores): 1 run, 5.0 minutes", "  - not recorded (no measured_by.json): 1 run"])
        self.assertAlmostEqual(info["minutes"], 23.0)

    def test_a_missing_seed_is_an_error_naming_the_chain(self):
        chains = fabricated_chains()
        del chains["entropy-1state"][2]
        write_chains(self.out, PLATEAUED_CURVE, chains)
        with self.assertRaisesRegex(TableError, "entropy-1state/seed-2/distill.json: no distill.json"):
            self.read(DslaConversion())

    def test_a_chain_of_another_teacher_is_an_error(self):
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains())
        write_metrics(os.path.join(self.out, "runs", "dsla-distill", "teacher"),
                      teacher_records(PLATEAUED_CURVE[:-1] + [(4000, 3.01)]))
        with self.assertRaisesRegex(TableError, "entropy/seed-1 was distilled from another teacher: it measured the "
                                                "teacher's validation loss as 3.000000, and .* ends at 3.010000"):
            self.read(DslaConversion())

    def test_a_chain_of_another_seed_is_an_error(self):
        write_chains(self.out, PLATEAUED_CURVE, fabricated_chains())
        write_text(os.path.join(chain_dir(self.out, "entropy", 1), "recipe.yaml"), "train:\n  seed: 1\n")
        self.read(DslaConversion())  # seed-1 distilled at train.seed 1
        write_text(os.path.join(chain_dir(self.out, "entropy", 2), "recipe.yaml"),
                   "name: x\ntrain:\n  device: auto\n  seed: 1\n")
        with self.assertRaisesRegex(TableError, "entropy/seed-2: distilled at train.seed 1 \\(its recipe.yaml\\), "
                                                "not 2"):
            self.read(DslaConversion())

    def test_a_random_chain_of_another_shuffle_is_an_error(self):
        chains = fabricated_chains()
        chains["random"][3] = (3.1, 3.2, random_order(range(8), 4))
        write_chains(self.out, PLATEAUED_CURVE, chains)
        with self.assertRaisesRegex(TableError, "random/seed-3: its 25% model converted layers .* but shuffle 3 "
                                                "starts .* distilled with another order"):
            self.read(DslaOrder())

    def test_a_chain_of_the_one_seed_layout_is_refused(self):
        write_chain(os.path.join(self.out, "runs", "dsla-distill", "entropy"), 3.0, [3.1, 3.2], [0, 1, 2, 3])
        with self.assertRaisesRegex(TableError, "earlier one-seed layout"):
            distill_runs.distill("/bin/false", REPO, self.out, "entropy", 1, {}, lambda _: None)


def resolved_recipe(steps=20, states=2, loss="{ce: 1, gate_cos: 0.1, layer_align: 1, logit_kl: 1}", seed=1,
                    threads=1, order="entropy", eval_every=0, distill=True):
    """A recipe.yaml as fathom writes it into a run or chain folder (fully resolved, in its layout), with the
    keys the tiny scale sets (distill.steps_per_layer is written as train.steps)."""
    text = f"""# fathom recipe, fully resolved (every key explicit)

name: quickstart-distill
model:
  d_model: 64
  n_layers: 4
  n_heads: 4
  n_kv_heads: 2
  ffn_hidden: 128
  norm_eps: 1e-06
  layers:
    []
dsla:
  states: {states}
  gamma: layer
data:
  tokenizer: data/tokenizers/quickstart-4k.json
  train:
    - data/corpus/quickstart/train
  validation:
    moby_dick:
      - data/corpus/quickstart/validation/moby_dick.txt
  documents: lines
train:
  device: auto
  seed: {seed}
  batch_size: 4
  seq_len: 64
  steps: {steps}
  threads: {threads}
  loss: {{ce: 1, z_loss: 1e-05}}
  schedule:
    type: cosine
    warmup_steps: {2 if distill else 5}
eval:
  every: {eval_every}
  batches: 4
checkpoint:
  every: 50
  keep_last: 2
"""
    if distill:
        text += f"""distill:
  teacher: checkpoint:/elsewhere/runs/dsla-distill/teacher
  order:
    - {order}
  layers:
    - "0.25"
    - "0.5"
  loss: {loss}
  calibration_batches: 1
"""
    return text + "log:\n  every: 3\n  dir: /elsewhere/run\n"


ONE_STATE_LOSS_WRITTEN = "{ce: 1, layer_align: 1, logit_kl: 1}"


class ChainSettings(unittest.TestCase):
    """A finished (or started) chain or teacher made with other settings than the table gives it now is refused,
    naming the folder, the key and both values; keys a machine varies (threads, device) are not compared."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name
        self.teacher = os.path.join(self.out, "runs", "dsla-distill", "teacher")
        write_metrics(self.teacher, teacher_records([(75, 4.0), (150, 3.5), (225, 3.2), (300, 3.0)]))

    def tearDown(self):
        self.tmp.cleanup()

    def chain(self, key, seed=1, finished=True, **recipe):
        folder = chain_dir(self.out, key, seed)
        if finished:
            write_chain(folder, 3.0, [3.1, 3.2], [2, 0, 1, 3])
        else:
            os.makedirs(folder)
        write_text(os.path.join(folder, "recipe.yaml"), resolved_recipe(seed=seed, **recipe))
        return folder

    def sets(self, key, steps_per_layer=None, extra=None, seed=1):
        return distill_runs.distill_sets("tiny", steps_per_layer, extra or {}, self.teacher, CHAINS[key].order, seed,
                                         CHAINS[key].sets)

    def distill(self, key, sets, seed=1):
        return distill_runs.distill("/bin/false", REPO, self.out, key, seed, sets, lambda _: None)

    def test_a_chain_made_with_the_same_settings_is_reused(self):
        folder = self.chain("entropy")
        self.assertEqual(self.distill("entropy", self.sets("entropy")), (folder, False))
        # threads and device vary per machine: not compared
        self.assertEqual(self.distill("entropy", self.sets("entropy", extra={"train.threads": 16,
                                                                             "train.device": "cpu"})), (folder, False))
        one = self.chain("entropy-1state", states=1, loss=ONE_STATE_LOSS_WRITTEN)
        self.assertEqual(self.distill("entropy-1state", self.sets("entropy-1state")), (one, False))
        # values compared by meaning: a --set's flow text against fathom's block lists and mappings
        self.assertEqual(differences(folder, {"data.validation": "{moby_dick: [data/corpus/quickstart/validation/"
                                                                 "moby_dick.txt]}",
                                              "data.train": "[data/corpus/quickstart/train]", "model.norm_eps": 1e-6,
                                              "distill.layers": "[0.25, 0.5]", "model.layers": "[]"}), [])
        self.assertEqual(differences(folder, {"data.train": "[data/other]", "model.n_layers": 8}),
                         [("data.train", "[data/corpus/quickstart/train]", "[data/other]"),
                          ("model.n_layers", "4", "8")])

    def test_other_steps_per_layer_is_refused_naming_both_values(self):
        folder = self.chain("entropy", steps=20)
        with self.assertRaises(TableError) as e:
            self.distill("entropy", self.sets("entropy", steps_per_layer=40))
        message = str(e.exception)
        self.assertIn(f"{folder} was distilled with other settings than the table gives it now:\n"
                      "  distill.steps_per_layer: 20 (its recipe.yaml) but 40 now\n", message)
        self.assertIn(f"Remove {folder} to distill it again with these settings, or run with the settings it was "
                      "made with (--set distill.steps_per_layer=20).", message)

    def test_another_loss_or_state_count_is_refused(self):
        # a 1-state chain made with the 2-state loss and states
        folder = self.chain("entropy-1state")
        with self.assertRaisesRegex(TableError, "dsla.states: 2 \\(its recipe.yaml\\) but 1 now\n  distill.loss: "
                                                "\\{ce: 1, gate_cos: 0.1, layer_align: 1, logit_kl: 1\\} \\(its "
                                                f"recipe.yaml\\) but {{ce: 1.0, logit_kl: 1.0, layer_align: 1.0}} "
                                                f"now\nRemove {folder} to distill it again with these settings.$"):
            self.distill("entropy-1state", self.sets("entropy-1state"))
        # an entropy chain takes the recipe's states and loss: one made with 1 state is not it
        self.chain("entropy", states=1, loss=ONE_STATE_LOSS_WRITTEN)
        with self.assertRaisesRegex(TableError, "dsla.states: 1 \\(its recipe.yaml\\) but 2 now\n  distill.loss: "):
            self.distill("entropy", self.sets("entropy"))

    def test_a_started_chain_of_other_settings_is_refused_before_any_chain_runs(self):
        # fathom's --resume takes a new train.steps: the chain would mix both lengths
        self.chain("entropy", seed=1)
        started = self.chain("entropy", seed=2, finished=False, steps=10)
        work = [("entropy", s, self.sets("entropy", seed=s)) for s in (1, 2)]
        with self.assertRaisesRegex(TableError, f"{started} was distilled with .*\n  distill.steps_per_layer: 10 "):
            distill_runs.distill_all("/bin/false", REPO, self.out, work, 1, lambda _: None)
        self.assertFalse(os.path.exists(started + ".log"))  # refused before fathom ran

    def test_a_teacher_of_other_steps_is_refused(self):
        # 600 steps evaluated every 150: it has an evaluation at step 300, so it passed for the 300-step teacher
        write_metrics(self.teacher, teacher_records([(150, 4.0), (300, 3.5), (450, 3.2), (600, 3.0)]))
        write_text(os.path.join(self.teacher, "recipe.yaml"), resolved_recipe(600, eval_every=150, distill=False))
        with self.assertRaises(TableError) as e:
            distill_runs.train_teacher("/bin/false", REPO, self.out, "tiny", None, {}, lambda _: None)
        self.assertIn(f"{self.teacher} was trained with other settings than the table gives it now:\n"
                      "  train.steps: 600 (its recipe.yaml) but 300 now\n"
                      "  eval.every: 150 (its recipe.yaml) but 75 now\n", str(e.exception))
        self.assertIn("or run with the settings it was made with (--steps 600 --set eval.every=150).", str(e.exception))
        self.assertEqual(distill_runs.train_teacher("/bin/false", REPO, self.out, "tiny", 600, {}, lambda _: None),
                         (self.teacher, False))
        # the chains' own --set (distill.*) is not the teacher's
        self.assertNotIn("distill.steps_per_layer", distill_runs.teacher_sets("tiny", None,
                                                                              {"distill.steps_per_layer": 5}))



class TrainingRunSettings(unittest.TestCase):
    """A training table's finished or started run made with other settings than the table gives it now is
    refused as a chain is: a run of more steps that evaluated at this table's last step would pass as complete."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name
        self.table = DslaStates()
        self.run = self.table.runs("tiny")[0].at_seed(1)
        self.folder = run_dir_for(self.out, self.table.name, self.run)

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, steps=None):
        return train("/bin/false", REPO, self.out, self.table.name, self.run, scale_sets("tiny", steps, {}),
                     lambda _: None)

    def test_a_longer_run_is_refused_not_taken_as_complete(self):
        # 120 steps evaluated every 30: it has an evaluation at step 60, the tiny table's last step
        write_metrics(self.folder, fabricated(3.0, 120) + [{"kind": "eval", "step": 60, "loss/moby_dick": 3.2}])
        write_text(os.path.join(self.folder, "recipe.yaml"), resolved_recipe(120, eval_every=30, distill=False))
        self.assertTrue(is_complete(self.folder, 60))
        with self.assertRaises(TableError) as e:
            self.train()
        self.assertIn(f"{self.folder} was trained with other settings than the table gives it now:\n"
                      "  train.steps: 120 (its recipe.yaml) but 60 now\n"
                      "  eval.every: 30 (its recipe.yaml) but 15 now\n", str(e.exception))
        self.assertIn(f"Remove {self.folder} to train it again with these settings, or run with the settings it "
                      "was made with (--steps 120 --set eval.every=30).", str(e.exception))
        # asked for its own length it is reused; its checkpoint cadence (50, keep 2) is not compared
        self.assertEqual(self.train(120), (self.folder, False))

    def test_a_longer_run_is_refused_where_the_recipe_gives_the_steps(self):
        # the small scale sets no steps: the recipe's 2,000 are compared with a 4,000-step run's
        write_metrics(self.folder, fabricated(3.0, 4000) + [{"kind": "eval", "step": 2000, "loss/moby_dick": 3.2}])
        write_text(os.path.join(self.folder, "recipe.yaml"), resolved_recipe(4000, eval_every=500, distill=False))
        with self.assertRaisesRegex(TableError, "train.steps: 4000 \\(its recipe.yaml\\) but 2000 now\n"):
            train("/bin/false", REPO, self.out, self.table.name, self.run, scale_sets("small", None, {}),
                  lambda _: None)

    def test_a_started_run_of_another_width_is_refused_before_it_resumes(self):
        os.makedirs(os.path.join(self.folder, "checkpoints"))
        write_text(os.path.join(self.folder, "checkpoints", "latest"), "step_00000015\n")
        write_text(os.path.join(self.folder, "recipe.yaml"),
                   resolved_recipe(60, eval_every=15, distill=False).replace("d_model: 64", "d_model: 96"))
        with self.assertRaisesRegex(TableError, "model.d_model: 96 \\(its recipe.yaml\\) but 64 now\n.*--set "
                                                "model.d_model=96"):
            self.train()
        self.assertFalse(os.path.exists(self.folder + ".log"))  # refused before fathom ran

    def test_a_run_that_never_reached_a_checkpoint_starts_again(self):
        # fathom writes recipe.yaml as a run starts: one stopped before its first checkpoint is not refused
        os.makedirs(self.folder)
        write_text(os.path.join(self.folder, "recipe.yaml"),
                   resolved_recipe(60, eval_every=15, distill=False).replace("d_model: 64", "d_model: 96"))
        with self.assertRaisesRegex(TableError, "run dsla-states/.*failed|exited"):
            self.train()  # /bin/false stands in for fathom: reaching it is what is tested
        self.assertTrue(os.path.exists(self.folder + ".log"))

    def test_a_table_refuses_before_any_of_its_runs_trains(self):
        other = run_dir_for(self.out, self.table.name, self.table.runs("tiny")[2].at_seed(1))
        write_metrics(other, fabricated(3.0, 120) + [{"kind": "eval", "step": 60, "loss/moby_dick": 3.2}])
        write_text(os.path.join(other, "recipe.yaml"), resolved_recipe(120, eval_every=30, distill=False))
        args = types.SimpleNamespace(scale="tiny", steps=None, extra={}, out=self.out, seeds=1, jobs=1)
        with self.assertRaisesRegex(TableError, f"{other} was trained with other settings"):
            train_rows(self.table, None, args, "/bin/false", REPO, lambda _: None)
        self.assertFalse(os.path.exists(self.folder + ".log"))  # the first row's run never started

FAKE_FATHOM = """#!%s
# Stands in for fathom: logs its arguments, then writes what a finished run or chain leaves.
import json, math, os, sys
sys.path.insert(0, %r)
from test_tables import fabricated, write_chain, write_metrics
args = sys.argv[1:]
sets = dict(value.split("=", 1) for flag, value in zip(args, args[1:]) if flag == "--set")
line = args[:1] + [a for a in args if a.startswith("--resume")] + [sets.get("distill.order", "")]
if args[0] == "distill":
    line += ["seed=" + sets["train.seed"]] + (["states=" + sets["dsla.states"]] if "dsla.states" in sets else [])
with open(os.environ["FAKE_FATHOM_LOG"], "a") as f:
    f.write(" ".join(line).strip() + "\\n")
if args[0] == "train":
    # A loss that depends on the row (its recipe) and the seed, as a real run's would.
    recipe = os.path.basename(args[1])
    loss = 3.0 + sum(map(ord, recipe)) %% 13 / 50 + int(sets.get("train.seed", 0)) * 0.01
    write_metrics(sets["log.dir"], fabricated(loss, int(sets["train.steps"])))
else:
    # The teacher as its metrics end; students a little above it, by seed and state count.
    with open(os.path.join(sets["distill.teacher"].split(":", 1)[1], "metrics.jsonl")) as f:
        teacher = [json.loads(l) for l in f if '"eval"' in l][-1]["loss/moby_dick"]
    order = json.loads(sets["distill.order"]) if sets["distill.order"].startswith("[") else [2, 0, 1, 3]
    loss = teacher + 0.1 + int(sets["train.seed"]) * 0.01 + (0.05 if sets.get("dsla.states") == "1" else 0.0)
    write_chain(sets["log.dir"], teacher, [loss, loss + 0.1], order)
"""


class DistillLaunching(unittest.TestCase):
    def test_chains_share_the_teacher_skip_complete_ones_and_resume_started_ones(self):
        with tempfile.TemporaryDirectory() as out:
            fake = make_fake_fathom(out)
            log = os.path.join(out, "calls")
            env = dict(os.environ, FAKE_FATHOM_LOG=log)
            runs = os.path.join(out, "runs", "dsla-distill")
            os.makedirs(os.path.join(runs, "sensitivity", "seed-1", "M_1"))  # a chain stopped in its first layer
            write_text(os.path.join(runs, "sensitivity", "seed-1", "recipe.yaml"), "name: x\n")
            # a chain stopped while it ranked the layers: its recipe written, no model begun
            os.makedirs(os.path.join(runs, "entropy", "seed-1"))
            write_text(os.path.join(runs, "entropy", "seed-1", "recipe.yaml"), "name: x\n")
            write_text(os.path.join(runs, "entropy", "seed-1.log"), "the first part of the chain\n")

            def calls():
                with open(log) as f:
                    return f.read().splitlines()

            def tables(*args):
                return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), *args, "--scale",
                                       "tiny", "--out", out, "--fathom", fake], capture_output=True, text=True, env=env)
            r = tables("dsla-order")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            shuffle = "[" + ", ".join(map(str, random_order([0, 1, 2, 3], 1))) + "]"
            self.assertEqual(calls(), ["train", "distill --resume entropy seed=1",
                                       "distill --resume sensitivity seed=1", f"distill {shuffle} seed=1"])
            with open(os.path.join(runs, "entropy", "seed-1.log")) as f:
                self.assertTrue(f.read().startswith("the first part of the chain\n"))  # resumed: the log goes on
            with open(os.path.join(out, "dsla-order.md")) as f:
                md = f.read()
            self.assertIn("| random (shuffle i at seed i) | not reported |", md)
            self.assertIn("- seed 1: random.Random(2507): " + shuffle[1:-1], md)
            self.assertIn("too few evaluations to tell", md)  # the fake teacher evaluates twice
            self.assertTrue(os.path.isfile(os.path.join(out, "dsla-distill-teacher.png")))
            r = tables("dsla-conversion", "--seeds", "2")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # the teacher and entropy seed 1 reused; entropy seed 2 and both 1-state chains new
            self.assertEqual(sorted(calls()[4:]), ["distill entropy seed=1 states=1", "distill entropy seed=2",
                                                   "distill entropy seed=2 states=1"])
            self.assertEqual(r.stdout.count("complete, skipped"), 2, r.stdout)
            with open(os.path.join(out, "dsla-conversion.md")) as f:
                md = f.read()
            self.assertIn("- seeds: 1, 2 (train.seed of each chain", md)
            # every student moves by 0.01 per seed: the paired differences are constant, a point CI that
            # excludes 0, but 2 seeds are too few for a verdict
            self.assertIn("paired, 2 seeds, df 1 (too few for a verdict: it needs 3)", md)
            self.assertNotRegex(md, r"\*\*(reproduced|contradicted)\*\*")
            self.assertIn("runs/dsla-distill/{entropy,entropy-1state}/seed-N", md)
            # A teacher trained again after the chains: they are stale, and the table says so.
            metrics = os.path.join(runs, "teacher", "metrics.jsonl")
            later = os.path.getmtime(os.path.join(runs, "entropy", "seed-1", "distill.json")) + 10
            os.utime(metrics, (later, later))
            r = tables("dsla-conversion")
            self.assertEqual(r.returncode, 1)
            self.assertIn("was distilled from an earlier teacher", r.stderr)


def make_fake_fathom(folder):
    fake = os.path.join(folder, "fathom")
    with open(fake, "w") as f:
        f.write(FAKE_FATHOM % (sys.executable, os.path.dirname(os.path.abspath(__file__))))
    os.chmod(fake, 0o755)
    return fake


class SeededTables(unittest.TestCase):
    """Seeds, resuming, pack and merge, on a stand-in fathom (no training: fast)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fake = make_fake_fathom(self.tmp.name)
        self.calls = os.path.join(self.tmp.name, "calls")
        self.env = dict(os.environ, FAKE_FATHOM_LOG=self.calls)

    def tearDown(self):
        self.tmp.cleanup()

    def tables(self, *args):
        return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), *args,
                               *(["--fathom", self.fake] if args[0] not in ("pack", "merge") else [])],
                              capture_output=True, text=True, env=self.env, cwd=REPO)

    def out(self, name):
        return os.path.join(self.tmp.name, name)

    def test_rows_run_at_every_seed_and_pages_show_intervals(self):
        r = self.tables("dsla-states", "--scale", "tiny", "--seeds", "3", "--out", self.out("a"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for key in ("attention", "1state", "2state"):
            for seed in (1, 2, 3):
                run = self.out(f"a/runs/dsla-states/{key}/seed-{seed}")
                self.assertTrue(os.path.isfile(os.path.join(run, "measured_by.json")), run)
                with open(run + ".log") as f:
                    self.assertIn(f"train.seed={seed}", f.read())
        with open(self.out("a/dsla-states.md")) as f:
            md = f.read()
        self.assertIn("- seeds: 1, 2, 3 (train.seed)", md)
        self.assertIn("std of all attention (teacher-like baseline)'s validation loss is 0.0100 nats over 3", md)
        # every row moves by 0.01 per seed: the paired differences have no spread, so their CI is a point
        self.assertIn("paired, 3 seeds, df 2", md)
        self.assertRegex(md, r"\*\*(reproduced|contradicted)\*\*")
        self.assertNotRegex(md, "agrees|disagrees")
        self.assertIn("Of 2 effects:", md)

    def test_runs_at_other_seeds_are_named_not_dropped_silently(self):
        out = self.out("s")
        self.assertEqual(self.tables("dsla-states", "--scale", "tiny", "--seeds", "3", "--out", out).returncode, 0)
        os.makedirs(os.path.join(out, "runs", "dsla-states", "retired-row", "seed-7"))  # no row of this table
        r = self.tables("dsla-states", "--scale", "tiny", "--seeds", "2", "--out", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "dsla-states.md")) as f:
            md = f.read()
        self.assertIn("- seeds: 1, 2 (train.seed)", md)
        self.assertIn("- Runs of this table at other seeds are in runs/dsla-states but not on this page (it reads "
                      "seeds 1, 2; --seeds sets how many): attention/seed-3, 1state/seed-3, 2state/seed-3.\n", md)
        self.assertNotIn("retired-row", md)
        r = self.tables("dsla-states", "--scale", "tiny", "--seeds", "3", "--out", out)
        with open(os.path.join(out, "dsla-states.md")) as f:
            self.assertNotIn("at other seeds", f.read())

    def test_a_page_credits_each_device_with_its_runs(self):
        out = self.out("d")
        self.assertEqual(self.tables("dsla-states", "--scale", "tiny", "--seeds", "2", "--out", out).returncode, 0)
        # one run finished on another machine from another commit (merged from its archive)
        write_text(os.path.join(out, "runs", "dsla-states", "2state", "seed-2", "measured_by.json"),
                   json.dumps(dict(CPU_RECORD, device="NVIDIA X (training on the GPU)", seed=2)))
        r = self.tables("dsla-states", "--scale", "tiny", "--seeds", "2", "--out", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "dsla-states.md")) as f:
            md = f.read()
        self.assertIn("\n  - NVIDIA X (training on the GPU): 1 run, 5.0 minutes\n", md)
        self.assertRegex(md, "\n- devices \\(the runs made on each, and their minutes of training\\):\n"
                             "  - .*: 5 runs, 0.0 minutes\n")
        self.assertRegex(md, "\n- commits \\(the runs made from each\\):\n  - .+: 5 runs\n  - 72da655: 1 run\n")

    def test_a_stopped_table_continues_where_it_stopped(self):
        out = self.out("b")
        run = os.path.join(out, "runs", "dsla-states", "1state", "seed-1")
        os.makedirs(os.path.join(run, "checkpoints"))
        write_text(os.path.join(run, "checkpoints", "latest"), "step_00000010\n")
        write_text(run + ".log", "the first part of the run\n")
        r = self.tables("dsla-states", "--scale", "tiny", "--out", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(self.calls) as f:
            self.assertEqual(sorted(f.read().splitlines()), ["train", "train", "train --resume"])
        with open(run + ".log") as f:
            self.assertTrue(f.read().startswith("the first part of the run\n"))  # resumed: the log goes on
        r = self.tables("dsla-states", "--scale", "tiny", "--out", out)
        self.assertEqual(r.stdout.count("complete, skipped"), 3, r.stdout)

    def test_pack_and_merge(self):
        a, b = self.out("a"), self.out("b")
        self.assertEqual(self.tables("dsla-states", "--scale", "tiny", "--seeds", "2", "--out", a).returncode, 0)
        os.makedirs(os.path.join(a, "runs", "dsla-states", "attention", "seed-1", "checkpoints", "step_1"))
        write_text(os.path.join(a, "runs", "dsla-states", "attention", "seed-1", "checkpoints", "step_1",
                                "model.safetensors"), "weights")
        os.makedirs(os.path.join(a, "runs", "dsla-states", "extra", "seed-1"))  # unfinished: stays behind
        write_metrics(os.path.join(a, "runs", "dsla-states", "extra", "seed-1"), fabricated(3.0)[:3])
        archive = self.out("a.tar.gz")
        r = self.tables("pack", "--out", a, archive)
        self.assertEqual(r.returncode, 0, r.stderr)
        import tarfile
        with tarfile.open(archive) as tar:
            names = tar.getnames()
        self.assertIn("runs/dsla-states/2state/seed-2/metrics.jsonl", names)
        self.assertIn("runs/dsla-states/2state/seed-2/measured_by.json", names)
        self.assertIn("runs/dsla-states/2state/seed-2.log", names)
        self.assertFalse([n for n in names if "checkpoints" in n or "extra" in n or n.endswith(".md")], names)
        # into an empty folder: the table redraws from the merged runs without training any
        r = self.tables("merge", archive, "--out", b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("6 runs added", r.stdout)
        os.remove(self.calls)
        r = self.tables("dsla-states", "--scale", "tiny", "--seeds", "2", "--out", b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("complete, skipped"), 6)
        self.assertFalse(os.path.exists(self.calls))
        self.assertIn("6 already here", self.tables("merge", archive, "--out", b).stdout)
        # an unfinished local run is replaced by the archive's finished one
        c = self.out("c")
        partial = os.path.join(c, "runs", "dsla-states", "1state", "seed-1")
        os.makedirs(os.path.join(partial, "checkpoints"))
        r = self.tables("merge", archive, "--out", c)
        self.assertIn("1 unfinished runs replaced", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(partial, "checkpoints")))
        # a finished local run that differs is a conflict, and nothing is merged
        metrics = os.path.join(b, "runs", "dsla-states", "2state", "seed-1", "metrics.jsonl")
        with open(metrics, "a") as f:
            f.write(json.dumps({"kind": "eval", "step": 100, "loss/moby_dick": 9.0}) + "\n")
        os.remove(os.path.join(b, "runs", "dsla-states", "1state", "seed-2", "metrics.jsonl"))
        r = self.tables("merge", archive, "--out", b)
        self.assertEqual(r.returncode, 1)
        self.assertIn("runs/dsla-states/2state/seed-1: a finished run here differs from the archive's", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(b, "runs", "dsla-states", "1state", "seed-2", "metrics.jsonl")))

    def test_pack_and_merge_take_finished_chains_only(self):
        from tables import archive
        a, c = self.out("a"), self.out("c")
        done, stopped = chain_dir(a, "entropy", 1), chain_dir(a, "entropy", 2)
        write_chain(done, 3.0, [3.1, 3.2], [0, 1, 2, 3])
        write_text(os.path.join(done, "order.md"), "# Layer order: entropy\n")
        write_text(os.path.join(done, "recipe.yaml"), "name: x\n")
        write_text(os.path.join(done, "measured_by.json"), json.dumps(H200_RECORD))
        os.makedirs(os.path.join(done, "M_1", "checkpoints"))
        write_metrics(os.path.join(done, "M_1"), fabricated(3.0))
        write_text(os.path.join(done, "M_1", "measured_by.json"), "{}")
        write_chain(stopped, 3.0, [3.1], [0, 1, 2, 3])  # stopped in M_2: its checkpoints stay here
        write_text(os.path.join(stopped, "recipe.yaml"), "name: x\n")
        archive.pack(a, self.out("a.tar.gz"), lambda _: None)
        import tarfile
        with tarfile.open(self.out("a.tar.gz")) as tar:
            names = sorted(tar.getnames())
        self.assertEqual(names, [f"runs/dsla-distill/entropy/seed-1/{f}"
                                 for f in ("distill.json", "measured_by.json", "order.json", "order.md",
                                           "recipe.yaml")])
        # a chain stopped midway here is replaced by the archive's finished one, not a conflict
        write_chain(chain_dir(c, "entropy", 1), 3.0, [3.1], [0, 1, 2, 3])
        os.makedirs(os.path.join(chain_dir(c, "entropy", 1), "M_2"))
        added, replaced, _ = archive.merge(self.out("a.tar.gz"), c, lambda _: None)
        self.assertEqual((added, replaced), ([], ["runs/dsla-distill/entropy/seed-1"]))
        self.assertEqual(DistillResult(chain_dir(c, "entropy", 1)).at(0.5).k, 2)
        self.assertFalse(os.path.exists(os.path.join(chain_dir(c, "entropy", 1), "M_2")))

    def test_pack_and_merge_refuse_bad_input(self):
        r = self.tables("pack", "--out", self.out("nothing"), self.out("x.tar.gz"))
        self.assertIn("--out", r.stderr)
        self.assertIn("is not a folder", r.stderr)
        os.makedirs(self.out("empty"))
        r = self.tables("pack", "--out", self.out("empty"), self.out("x.tar.gz"))
        self.assertIn("holds no finished run, chain or record", r.stderr)
        r = self.tables("pack", "--out", self.out("empty"), self.out("empty"))
        self.assertIn("is a folder; name the archive file", r.stderr)
        r = self.tables("merge", self.out("missing.tar.gz"), "--out", self.out("d"))
        self.assertIn("no archive at", r.stderr)
        write_text(self.out("junk.tar.gz"), "not an archive")
        r = self.tables("merge", self.out("junk.tar.gz"), "--out", self.out("d"))
        self.assertIn("cannot read", r.stderr)
        import tarfile
        evil = self.out("evil.tar.gz")
        write_text(self.out("f"), "x")
        with tarfile.open(evil, "w:gz") as tar:
            tar.add(self.out("f"), arcname="../escape.json")
        r = self.tables("merge", evil, "--out", self.out("d"))
        self.assertIn("not a plain file inside the folder", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "escape.json")))

    def test_noise_reports_the_baseline_seed_std(self):
        r = self.tables("noise", "dsla-states", "--scale", "tiny", "--seeds", "3", "--out", self.out("n"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("baseline 'attention' at scale tiny, 3 seeds, 60 steps", r.stdout)
        self.assertIn("seed std 0.0100 nats", r.stdout)
        self.assertIn("2 states - 1 state (val loss): paper 0.0100 nats ->", r.stdout)
        with open(self.calls) as f:
            self.assertEqual(len(f.read().splitlines()), 3)  # the baseline only
        with open(self.out("n/dsla-states.noise.json")) as f:
            self.assertAlmostEqual(json.load(f)["val_loss_std"], 0.01)

    def test_throughput_needs_runs_alone_on_the_device(self):
        r = self.tables("mod", "--scale", "tiny", "--seeds", "2", "--jobs", "2", "--out", self.out("m"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(self.out("m/mod.md")) as f:
            md = f.read()
        self.assertIn("Throughput is left out", md)
        self.assertNotIn("ours tokens/s", md)
        r = self.tables("mod", "--scale", "tiny", "--seeds", "2", "--out", self.out("m1"))
        with open(self.out("m1/mod.md")) as f:
            self.assertIn("ours tokens/s", f.read())


class BadArguments(unittest.TestCase):
    def test_each_is_a_clear_error(self):
        with tempfile.NamedTemporaryFile() as existing:
            for args, message in ((["--steps", "0"], "--steps: must be at least 1, got 0"),
                                  (["--steps", "-5"], "--steps: must be at least 1, got -5"),
                                  (["--steps", "ten"], "--steps: expected a whole number, got 'ten'"),
                                  (["--seeds", "0"], "--seeds: must be at least 1, got 0"),
                                  (["--jobs", "0"], "--jobs: must be at least 1, got 0"),
                                  (["--out", existing.name], f"--out {existing.name} is a file; name a folder"),
                                  (["--set", "train.lr"], "--set train.lr: expected KEY=VALUE")):
                r = tables("dsla-states", "--scale", "tiny", *args)
                self.assertEqual(r.returncode, 2, args)
                self.assertIn(message, r.stderr)
                self.assertNotIn("Traceback", r.stderr)
            r = tables("noise", "dsla-states", "--seeds", "1")
            self.assertIn("noise needs --seeds 2 or more", r.stderr)
            r = tables("merge", "x.tar.gz", "--out", existing.name)
            self.assertIn("is a file; name a folder", r.stderr)

    def test_the_script_is_executable(self):
        self.assertTrue(os.access(os.path.join(REPO, "scripts", "tables.py"), os.X_OK))


BENCH_TABLE2 = """device: NVIDIA X, 1 SMs; medians
## Table 2

| sweep | T | G | Hq | Hk | L | flash fwd ms | flash fwd+bwd ms | group fwd ms | group fwd+bwd ms | extra / MoDA | reps |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| T | 4096 | 8 | 64 | 8 | 64 | 1 | 2.0 | 1 | 3.0 | 30.00% | 5 |
| T | 8192 | 8 | 64 | 8 | 64 | 1 | 8.0 | 1 | 10.0 | 20.00% | 5 |
| L | 16384 | 8 | 64 | 8 | 128 | 1 | 8.0 | 1 | 12.0 | 33.00% | 5 |
| L | 16384 | 8 | 64 | 8 | 0 | 1 | 8.0 | 1 | 8.1 | 1.00% | 5 |
| f32 | 16384 | 8 | 64 | 8 | 64 | 1 | 8.0 | 1 | 9.0 | 11.00% | 5 |
"""


class KernelOutput(unittest.TestCase):
    def test_table2_rows_and_effects_come_from_the_benchmark_text(self):
        from tables import kernels
        with tempfile.TemporaryDirectory() as out:
            with open(os.path.join(out, "moda-table2.bench.log"), "w") as f:
                f.write("bench table2\n" + BENCH_TABLE2)
            write_text(os.path.join(out, "moda-table2.cudnn.log"),
                       "ref\n| size | backend | fwd+bwd ms |\n|---|---|---:|\n| T4K-G8 | cudnn | 1.5 |\n")
            rows, _, effects, points, ran = kernels.table2(None, REPO, "small", out, lambda _: None)
            self.assertFalse(ran)  # the kept log was read, nothing timed
            self.assertEqual([r[0] for r in rows], ["T", "T", "L", "L"])  # the f32 variant is not Table 2
            self.assertEqual(rows[0][5], "1.500")  # cuDNN beside its T row
            self.assertEqual(rows[1][5], "-")      # not measured: no number
            self.assertEqual([round(e.measured, 2) for e in effects], [-10.0, 32.0])
            self.assertIn("| -10.000 points |", "\n".join(kernels.changes_table(effects)))
            self.assertEqual(kernels.bench_device(out, "moda-table2"), "NVIDIA X, 1 SMs")

    def test_logs_of_different_devices_are_each_named(self):
        from tables import kernels
        with tempfile.TemporaryDirectory() as out:
            write_text(os.path.join(out, "moda-table2.bench.log"), "bench table2\n" + BENCH_TABLE2)
            self.assertEqual(kernels.device_lines(out, "moda-table2"), [])  # one log: the record's device line
            write_text(os.path.join(out, "moda-table2.cudnn.log"), "ref\ndevice: NVIDIA X, torch 2.5; cuda 12\n")
            self.assertEqual(kernels.device_lines(out, "moda-table2"), [])  # the same GPU
            write_text(os.path.join(out, "moda-table2.cudnn.log"), "ref\ndevice: NVIDIA Y, torch 2.5; cuda 12\n")
            self.assertEqual(kernels.device_lines(out, "moda-table2"), [
                "- the logs were measured on different devices:", "  - moda-table2.bench.log: NVIDIA X",
                "  - moda-table2.cudnn.log: NVIDIA Y"])

    def test_a_missing_kernel_row_is_an_error(self):
        from tables import kernels
        with self.assertRaisesRegex(TableError, "no table headed 'kernel'"):
            kernels.parse_markdown_rows(BENCH_TABLE2, "kernel")


def tables(*args):
    return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), *args],
                          capture_output=True, text=True, cwd=REPO)


class EndToEnd(unittest.TestCase):
    def test_a_failing_run_is_reported_and_no_table_written(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", "/bin/false")
            self.assertEqual(r.returncode, 1)
            self.assertIn("failed (exit status 1)", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "dsla-states.md")))
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", os.path.join(out, "nothing"))
            self.assertIn("no fathom binary", r.stderr)

    def test_a_failing_chain_is_reported_and_no_table_written(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("dsla-order", "--scale", "tiny", "--out", out, "--fathom", "/bin/false")
            self.assertEqual(r.returncode, 1)
            self.assertIn("run dsla-distill/teacher failed (exit status 1)", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "dsla-order.md")))

    def test_a_chain_key_set_for_every_chain_is_refused(self):
        with tempfile.TemporaryDirectory() as out:
            for key in ("train.seed", "distill.order", "dsla.states"):
                r = tables("dsla-conversion", "--scale", "tiny", "--out", out, "--fathom", "/bin/false",
                           "--set", f"{key}=3")
                self.assertEqual(r.returncode, 1)
                self.assertIn(f"--set {key}: the distillation tables set it for each chain", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "runs")))  # refused before any run

    def test_kernel_tables_skip_at_tiny_scale(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("moda-table7", "--scale", "tiny", "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("skipped at scale tiny", r.stdout)

    def test_dsla_table_at_tiny_scale_then_resumed(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", FATHOM, "--steps", "24")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(os.path.join(out, "dsla-states.md")) as f:
                md = f.read()
            png = os.path.join(out, "dsla-states.png")
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(png), 10000)
            for label in ("all attention", "hybrid, 1 state", "hybrid, 2 states"):
                row = next(line for line in md.splitlines() if line.startswith(f"| {label}"))
                measured = float(row.split("|")[3])
                self.assertTrue(1.0 < measured < 7.0, row)  # a byte-level loss, read from the run
            self.assertIn("**unresolved**", md)  # one seed at tiny: no interval, so no verdict
            self.assertIn("steps per run: 24", md)
            self.assertTrue(os.path.isfile(os.path.join(out, "runs", "dsla-states", "2state", "seed-1",
                                                        "measured_by.json")))
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", FATHOM, "--steps", "24")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.count("complete, skipped"), 3, r.stdout)

    def test_distillation_tables_at_tiny_scale(self):
        with tempfile.TemporaryDirectory() as out:
            args = ("--scale", "tiny", "--out", out, "--fathom", FATHOM, "--steps", "60")
            r = tables("dsla-conversion", *args)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = tables("dsla-order", *args)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout.count("complete, skipped"), 2, r.stdout)  # the teacher and entropy reused
            for name in ("dsla-conversion", "dsla-order"):
                with open(os.path.join(out, f"{name}.md")) as f:
                    md = f.read()
                self.assertIn("plateau check:", md)
                self.assertIn("**unresolved**", md)  # one seed at tiny: no interval, so no verdict
            row = next(line for line in md.splitlines() if line.startswith("| random (shuffle i at seed i)"))
            self.assertTrue(1.0 < float(row.split("|")[4]) < 9.0, row)  # a loss read from the chain
            for png in ("dsla-conversion.png", "dsla-order.png", "dsla-distill-teacher.png"):
                with open(os.path.join(out, png), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class Fp8LossReport(unittest.TestCase):
    """scripts/fp8_loss_report.py: fp8 - bf16 paired by seed, against hand-computed answers."""

    def report(self, folder, *extra):
        return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "fp8_loss_report.py"), folder, *extra],
                              capture_output=True, text=True)

    def test_the_paired_difference_and_its_interval(self):
        with tempfile.TemporaryDirectory() as d:
            bf16 = {1: 3.00, 2: 3.10, 3: 3.20}
            fp8 = {1: 3.01, 2: 3.13, 3: 3.21}  # differences 0.01, 0.03, 0.01: mean 0.016667, std 0.011547
            for seed in bf16:
                write_metrics(os.path.join(d, f"m_bf16_seed{seed}"), fabricated(bf16[seed]))
                write_metrics(os.path.join(d, f"m_fp8_seed{seed}"), fabricated(fp8[seed]))
            write_metrics(os.path.join(d, "big_bf16_seed1"), fabricated(2.5))
            write_metrics(os.path.join(d, "big_fp8_seed1"), fabricated(2.52))
            write_metrics(os.path.join(d, "big_fp8_seed2"), fabricated(2.4, final_step=60))  # stopped early
            os.makedirs(os.path.join(d, "not_a_run"))
            r = self.report(d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("Left out, stopped before their last step: big_fp8_seed2 (last evaluation at step 60 of "
                          "100)", r.stdout)
            half = 4.302653 * 0.011547 / math.sqrt(3)  # t(0.975, 2) * s / sqrt(n)
            self.assertIn("| bf16 | 3 | 3.1000 | 0.1000 |", r.stdout)
            self.assertIn(f"+0.0167 nats (+0.54% of bf16), 95% CI [{0.016667 - half:+.4f}, {0.016667 + half:+.4f}]",
                          r.stdout)
            self.assertIn("+0.0200 nats (+0.80% of bf16), no CI (one seed)", r.stdout)

    def test_runs_that_all_stopped_at_the_same_step_are_told_by_their_recipe(self):
        with tempfile.TemporaryDirectory() as d:
            for seed, (b, f) in {1: (3.0, 3.02), 2: (3.1, 3.11)}.items():
                for precision, loss in (("bf16", b), ("fp8", f)):
                    run = os.path.join(d, f"m_{precision}_seed{seed}")
                    write_metrics(run, fabricated(loss, final_step=60))
                    given = 60 if seed == 1 else 100  # seed 2's runs were given 100 steps and stopped at 60
                    with open(os.path.join(run, "recipe.yaml"), "w") as out:
                        out.write(f"name: m\ntrain:\n  device: cuda\n  steps: {given}\n  precision: {precision}\n")
            r = self.report(d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("m_bf16_seed2 (last evaluation at step 60 of 100), m_fp8_seed2 (last evaluation at step 60 "
                          "of 100)", r.stdout)
            self.assertIn("+0.0200 nats (+0.67% of bf16), no CI (one seed)", r.stdout)

    def test_a_folder_without_runs_or_domain_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.report(d)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no run folders named MODEL_bf16_seedS", r.stderr)
            write_metrics(os.path.join(d, "m_bf16_seed1"), fabricated(3.0))
            r = self.report(d, "--domain", "wiki")
            self.assertEqual(r.returncode, 1)
            self.assertIn("no evaluation of validation domain 'wiki'", r.stderr)


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
        import yaml  # noqa: F401
    except ImportError as missing:
        print(f"skipped: {missing.name} is not installed for {sys.executable}")
        sys.exit(77)
    if len(sys.argv) < 2:
        sys.exit("usage: test_tables.py FATHOM_BINARY")
    FATHOM = sys.argv.pop(1)
    unittest.main()
