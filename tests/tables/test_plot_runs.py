"""Checks of scripts/plot_runs.py: a short quickstart run (alone and overlaid with a copy) drawn to a PNG,
and a clear error for each bad input.
Usage: python3 tests/tables/test_plot_runs.py FATHOM_BINARY   (exit 77: skipped, no matplotlib)"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "plot_runs.py")
FATHOM = None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def plot(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=REPO)


def train_quickstart(run_dir):
    """12 steps of the quickstart recipe, shrunk to take a few seconds on 2 cores."""
    command = [FATHOM, "train", "recipes/quickstart.yaml", "--overwrite"] + sum(
        (["--set", s] for s in (f"log.dir={run_dir}", "train.steps=12", "train.batch_size=2", "train.seq_len=64",
                                "train.threads=2", "train.device=cpu", "log.every=2", "eval.every=6",
                                "eval.batches=1", "checkpoint.every=12", "train.schedule.warmup_steps=2")), [])
    r = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        raise AssertionError(f"fathom train failed:\n{r.stdout}{r.stderr}")


class PlotRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = [os.path.join(cls.tmp.name, name) for name in ("quickstart", "copy")]
        train_quickstart(cls.runs[0])
        # The overlay of a second run: the first one's records under another folder name.
        os.makedirs(cls.runs[1])
        shutil.copy(os.path.join(cls.runs[0], "metrics.jsonl"), cls.runs[1])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def out(self, name):
        return os.path.join(self.tmp.name, name)

    def test_the_run_logs_what_the_panels_draw(self):
        with open(os.path.join(self.runs[0], "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        train = [r for r in records if r["kind"] == "train"]
        self.assertEqual(len(train), 6)
        for key in ("loss", "lr", "grad_norm", "tokens_per_second"):
            self.assertIn(key, train[0])
        self.assertEqual([r["step"] for r in records if r["kind"] == "eval"], [6, 12])
        self.assertIn("loss/moby_dick", records[-1])

    def test_one_run_and_several_overlaid(self):
        for name, runs in (("one.png", self.runs[:1]), ("two.png", self.runs)):
            r = plot(*runs, "--out", self.out(name), "--title", "quickstart")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(self.out(name), "rb") as f:
                self.assertEqual(f.read(8), PNG_MAGIC)
            self.assertGreater(os.path.getsize(self.out(name)), 20000)
        # a metrics.jsonl path works as well as its folder
        r = plot(os.path.join(self.runs[0], "metrics.jsonl"), "--out", self.out("file.png"))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_input_is_a_clear_error(self):
        empty = self.out("empty")
        os.makedirs(empty, exist_ok=True)
        r = plot(empty, "--out", self.out("x.png"))
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"plot_runs: error: {empty}: no metrics.jsonl", r.stderr)
        broken = self.out("broken")
        os.makedirs(broken, exist_ok=True)
        with open(os.path.join(broken, "metrics.jsonl"), "w") as f:
            f.write('{"kind": "train", "step": 1, "loss": 5.0}\n{"kind": "train", "step"\n')
        r = plot(broken, "--out", self.out("x.png"))
        self.assertIn("metrics.jsonl:2: not JSON", r.stderr)
        with open(os.path.join(broken, "metrics.jsonl"), "w") as f:
            f.write('{"kind": "train", "step": 1, "loss": "high"}\n')
        r = plot(broken, "--out", self.out("x.png"))
        self.assertIn("the train record at step 1 has a non-numeric 'loss' ('high')", r.stderr)
        with open(os.path.join(broken, "metrics.jsonl"), "w") as f:
            f.write('{"kind": "eval", "step": 1, "loss/a": 5.0}\n')
        self.assertIn("no training records", plot(broken, "--out", self.out("x.png")).stderr)
        r = plot(self.runs[0], "--out", self.tmp.name)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is a folder; name the PNG file to write", r.stderr)
        self.assertIn("must end in .png", plot(self.runs[0], "--out", self.out("x.jpg")).stderr)
        self.assertFalse(os.path.exists(self.out("x.png")))
        for r in (plot(empty, "--out", self.out("x.png")), plot(broken, "--out", self.out("x.png"))):
            self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"skipped: matplotlib is not installed for {sys.executable}")
        sys.exit(77)
    if len(sys.argv) < 2:
        sys.exit("usage: test_plot_runs.py FATHOM_BINARY")
    FATHOM = sys.argv.pop(1)
    unittest.main()
