"""Checks of scripts/tables.py: the gathering and agreement logic on fabricated metrics, the failure
messages, and one table end to end at tiny scale on the CPU.
Usage: python3 tests/tables/test_tables.py FATHOM_BINARY   (exit 77: skipped, no matplotlib)"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

try:
    import matplotlib  # noqa: F401
except ImportError:
    print(f"skipped: matplotlib is not installed for {sys.executable}")
    sys.exit(77)

from tables.metrics import RunMetrics  # noqa: E402
from tables.report import Effect  # noqa: E402
from tables.runs import TableError, is_complete, read_metrics  # noqa: E402
from tables.training_tables import DslaStates  # noqa: E402
from tables import distill_runs  # noqa: E402
from tables.distill_tables import DslaConversion, DslaOrder  # noqa: E402

FATHOM = None


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
        m = RunMetrics("r", read_metrics(os.path.join(self.dir, "metrics.jsonl")))
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

    def test_agreement_follows_the_sign(self):
        self.assertEqual(Effect("x", "", -1, -0.1).verdict(), "agrees")
        self.assertEqual(Effect("x", "", -1, 0.1).verdict(), "disagrees")
        self.assertEqual(Effect("x", "", 1, 0.1).verdict(), "agrees")
        self.assertEqual(Effect("x", "", 1, 0.0).verdict(), "no difference")

    def test_table_effects_use_the_measured_runs(self):
        table = DslaStates()
        m = {k: RunMetrics(k, fabricated(v)) for k, v in (("attention", 3.0), ("1state", 3.4), ("2state", 3.2))}
        sections, effects = table.sections(m)
        self.assertEqual([e.verdict() for e in effects], ["agrees", "agrees"])
        self.assertAlmostEqual(effects[0].measured, -0.2)
        text = "\n".join(sum(sections, []))
        self.assertIn("| hybrid, 2 states | 81.19 | 3.2000 |", text)


def write_chain(folder, teacher_loss, losses, layers, kv_saved=(256000, 512000), named=(True, True)):
    """A fabricated distill.json (the layout `fathom distill` writes) with one model per entry of losses."""
    os.makedirs(folder, exist_ok=True)
    models = [{"k": k + 1, "layers": layers[:k + 1], "fraction": (k + 1) / 4, "named": named[k],
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


class DistillGathering(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def chain(self, key, *args, **kwargs):
        return distill_runs.DistillResult(write_chain(os.path.join(self.tmp.name, key), *args, **kwargs))

    def test_models_are_read_per_fraction(self):
        r = self.chain("entropy", 3.0, [3.1, 3.3], [2, 0, 1, 3])
        self.assertEqual(r.domain, "moby_dick")
        self.assertAlmostEqual(r.at(0.25).loss, 3.1)
        self.assertEqual(r.at(0.5).layers, [2, 0])
        self.assertEqual(r.at(0.5).kv_saved, 512000)
        self.assertEqual(distill_runs.attention_layers(r.dir), [2, 0, 1, 3])

    def test_conversion_effects_follow_the_measured_chain(self):
        table = DslaConversion()
        sections, effects = table.sections({"entropy": self.chain("entropy", 3.0, [3.1, 3.3], [2, 0, 1, 3])})
        self.assertEqual([e.verdict() for e in effects], ["agrees", "agrees", "agrees"])
        self.assertAlmostEqual(effects[0].measured, math.exp(3.3) - math.exp(3.1))
        text = "\n".join(sum(sections, []))
        self.assertIn("| DSLA 50% | 2: 2, 0 | 9.89 | 6.19 | 3.3000 |", text)
        self.assertIn("512,000 (50%)", text)
        # 50% closer to the teacher than 25%: the paper's direction is contradicted, and said so
        _, effects = table.sections({"entropy": self.chain("flipped", 3.0, [3.3, 3.1], [2, 0, 1, 3])})
        self.assertEqual(effects[0].verdict(), "disagrees")

    def test_order_effects_compare_against_the_random_chain(self):
        results = {"entropy": self.chain("entropy", 3.0, [3.1, 3.2], [2, 0, 1, 3]),
                   "sensitivity": self.chain("sensitivity", 3.0, [3.05, 3.4], [1, 3, 0, 2]),
                   "random": self.chain("random", 3.0, [3.2, 3.3], [0, 2, 3, 1])}
        sections, effects = DslaOrder().sections(results)
        self.assertEqual([e.verdict() for e in effects], ["agrees", "disagrees"])
        self.assertAlmostEqual(effects[1].measured, 0.1)
        text = "\n".join(sum(sections, []))
        self.assertIn("converts the same set as the random order", text)  # entropy: {0, 2} both

    def test_random_order_is_a_fixed_shuffle(self):
        order = distill_runs.random_order([3, 0, 2, 1])
        self.assertEqual(sorted(order), [0, 1, 2, 3])
        self.assertEqual(order, distill_runs.random_order([0, 1, 2, 3]))
        self.assertNotEqual(distill_runs.random_order(list(range(16))), list(range(16)))

    def test_an_incomplete_or_malformed_chain_is_an_error(self):
        folder = os.path.join(self.tmp.name, "c")
        with self.assertRaisesRegex(TableError, "no distill.json"):
            distill_runs.DistillResult(folder)
        self.assertFalse(distill_runs.is_complete(folder))
        write_chain(folder, 3.0, [3.1], [0, 1, 2, 3])
        with self.assertRaisesRegex(TableError, "1 named models, expected one per fraction"):
            distill_runs.DistillResult(folder)
        write_chain(folder, 3.0, [3.1, 3.2, 3.3], [0, 1, 2, 3], kv_saved=(1, 2, 3), named=(True, False, True))
        self.assertEqual(distill_runs.DistillResult(folder).at(0.5).k, 3)  # the intermediate M_2 is skipped
        write_chain(folder, 3.0, [3.1, float("nan")], [0, 1, 2, 3])
        with self.assertRaisesRegex(TableError, "validation.moby_dick.loss: not a finite number"):
            distill_runs.DistillResult(folder)
        self.assertFalse(distill_runs.is_complete(folder))
        with open(os.path.join(folder, "distill.json"), "w") as f:
            f.write("{")
        with self.assertRaisesRegex(TableError, "distill.json: not JSON"):
            distill_runs.DistillResult(folder)

    def test_distill_sets_name_the_teacher_order_and_fractions(self):
        sets = distill_runs.distill_sets("tiny", None, {"train.threads": 2}, "/t/teacher", [3, 1, 0, 2])
        self.assertEqual(sets["distill.teacher"], "checkpoint:/t/teacher")
        self.assertEqual(sets["distill.order"], "[3, 1, 0, 2]")
        self.assertEqual(sets["distill.layers"], "[0.25, 0.5]")
        self.assertEqual(sets["train.threads"], 2)
        self.assertNotIn("train.steps", sets)


FAKE_FATHOM = """#!%s
# Stands in for fathom: logs its arguments, then writes what a finished run or chain leaves.
import json, math, os, sys
sys.path.insert(0, %r)
from test_tables import fabricated, write_chain, write_metrics
args = sys.argv[1:]
sets = dict(value.split("=", 1) for flag, value in zip(args, args[1:]) if flag == "--set")
with open(os.environ["FAKE_FATHOM_LOG"], "a") as f:
    f.write(" ".join(args[:1] + [a for a in args if a.startswith("--resume")] +
                     [sets.get("distill.order", "")]).strip() + "\\n")
if args[0] == "train":
    write_metrics(sets["log.dir"], fabricated(3.0, int(sets["train.steps"])))
else:
    order = json.loads(sets["distill.order"]) if sets["distill.order"].startswith("[") else [2, 0, 1, 3]
    write_chain(sets["log.dir"], 3.0, [3.1, 3.2], order)
"""


class DistillLaunching(unittest.TestCase):
    def test_chains_share_the_teacher_skip_complete_ones_and_resume_started_ones(self):
        with tempfile.TemporaryDirectory() as out:
            fake = os.path.join(out, "fathom")
            with open(fake, "w") as f:
                f.write(FAKE_FATHOM % (sys.executable, os.path.dirname(os.path.abspath(__file__))))
            os.chmod(fake, 0o755)
            log = os.path.join(out, "calls")
            env = dict(os.environ, FAKE_FATHOM_LOG=log)
            runs = os.path.join(out, "runs", "dsla-distill")
            os.makedirs(os.path.join(runs, "sensitivity", "M_1"))  # a chain stopped in its first layer

            def calls():
                with open(log) as f:
                    return f.read().splitlines()
            r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), "dsla-order", "--scale",
                                "tiny", "--out", out, "--fathom", fake], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            random_order = "[" + ", ".join(map(str, distill_runs.random_order([0, 1, 2, 3]))) + "]"
            self.assertEqual(calls(), ["train", "distill entropy", "distill --resume sensitivity",
                                       f"distill {random_order}"])
            with open(os.path.join(out, "dsla-order.md")) as f:
                self.assertIn("| random (seed 2506 shuffle) | not reported |", f.read())
            r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), "dsla-conversion",
                                "--scale", "tiny", "--out", out, "--fathom", fake], capture_output=True, text=True,
                               env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(len(calls()), 4)  # teacher and entropy chain reused
            self.assertEqual(r.stdout.count("complete, skipped"), 2, r.stdout)
            # A teacher trained again after the chains: they are stale, and the table says so.
            metrics = os.path.join(runs, "teacher", "metrics.jsonl")
            later = os.path.getmtime(os.path.join(runs, "entropy", "distill.json")) + 10
            os.utime(metrics, (later, later))
            r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "tables.py"), "dsla-conversion",
                                "--scale", "tiny", "--out", out, "--fathom", fake], capture_output=True, text=True,
                               env=env)
            self.assertEqual(r.returncode, 1)
            self.assertIn("was distilled from an earlier teacher", r.stderr)


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
            open(os.path.join(out, "moda-table2.cudnn.log"), "w").write(
                "ref\n| size | backend | fwd+bwd ms |\n|---|---|---:|\n| T4K-G8 | cudnn | 1.5 |\n")
            rows, _, effects, points, ran = kernels.table2(None, REPO, "small", out, lambda _: None)
            self.assertFalse(ran)  # the kept log was read, nothing timed
            self.assertEqual([r[0] for r in rows], ["T", "T", "L", "L"])  # the f32 variant is not Table 2
            self.assertEqual(rows[0][5], "1.500")  # cuDNN beside its T row
            self.assertEqual(rows[1][5], "-")      # not measured: no number
            self.assertEqual([(e.verdict(), round(e.measured, 2)) for e in effects],
                             [("agrees", -10.0), ("agrees", 32.0)])
            self.assertEqual(kernels.bench_device(out, "moda-table2"), "NVIDIA X, 1 SMs")

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

    def test_kernel_tables_skip_at_tiny_scale(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("moda-table7", "--scale", "tiny", "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("skipped at scale tiny", r.stdout)

    def test_dsla_table_at_tiny_scale_then_resumed(self):
        with tempfile.TemporaryDirectory() as out:
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", FATHOM, "--steps", "24")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            md = open(os.path.join(out, "dsla-states.md")).read()
            png = os.path.join(out, "dsla-states.png")
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(png), 10000)
            for label in ("all attention", "hybrid, 1 state", "hybrid, 2 states"):
                row = next(line for line in md.splitlines() if line.startswith(f"| {label}"))
                measured = float(row.split("|")[3])
                self.assertTrue(1.0 < measured < 7.0, row)  # a byte-level loss, read from the run
            self.assertRegex(md, r"\*\*(agrees|disagrees|no difference)\*\*")
            self.assertIn("steps per run: 24", md)
            r = tables("dsla-states", "--scale", "tiny", "--out", out, "--fathom", FATHOM, "--steps", "24")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.count("complete, skipped"), 3, r.stdout)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_tables.py FATHOM_BINARY")
    FATHOM = sys.argv.pop(1)
    unittest.main()
