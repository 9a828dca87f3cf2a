#!/usr/bin/env python3
"""The loss comparison of train.precision fp8 against bf16, from the run folders scripts/bench_fp8_device.sh
writes (MODEL_bf16_seedS and MODEL_fp8_seedS, each holding metrics.jsonl):

  scripts/fp8_loss_report.py FOLDER [--domain moby_dick]

For each model, one row per precision with the final validation loss of DOMAIN as mean ± std over the
seeds, then fp8 - bf16: the mean difference in nats and in % of bf16's mean, with its 95% CI paired by
seed (both precisions of a seed share initialisation and data order) where two or more seeds ran both.
A run that stopped early is left out and named: its last evaluation comes before the train.steps of the
resolved recipe.yaml `fathom train` writes beside its metrics, or (a folder without one) before its model's
last evaluation. The rows use every seed of their precision; the difference only the seeds that ran both,
which it names. Prints markdown.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tables import stats  # noqa: E402
from tables.metrics import RunMetrics  # noqa: E402
from tables.report import fmt, markdown_table, signed  # noqa: E402
from tables.runs import TableError, read_metrics, recipe_value  # noqa: E402

RUN_NAME = re.compile(r"^(?P<model>.+)_(?P<precision>bf16|fp8)_seed(?P<seed>\d+)$")


def steps_given(run_folder):
    """train.steps of the run's resolved recipe.yaml, or None where the folder has none."""
    recipe = os.path.join(run_folder, "recipe.yaml")
    if not os.path.isfile(recipe):
        return None
    steps = recipe_value(recipe, "train.steps")
    if steps is None or not steps.isdigit():
        raise TableError(f"{recipe}: no train.steps")
    return int(steps)


def collect(folder, domain):
    """({model: {precision: {seed: final validation loss}}}, [names of runs left out]) of the run folders in
    `folder`. A run stopped early is left out (its loss belongs to another step): its last evaluation comes
    before the steps its recipe gave it, or, without a recipe, before its model's last evaluation."""
    runs = {}
    for name in sorted(os.listdir(folder)):
        match = RUN_NAME.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            run_folder = os.path.join(folder, name)
            runs[name] = (match, RunMetrics(name, read_metrics(os.path.join(run_folder, "metrics.jsonl")), domain),
                          steps_given(run_folder))
    if not runs:
        raise TableError(f"{folder}: no run folders named MODEL_bf16_seedS or MODEL_fp8_seedS")
    last_step = {}
    for match, run, _ in runs.values():
        last_step[match["model"]] = max(last_step.get(match["model"], 0), run.final_step)
    losses, left_out = {}, []
    for name, (match, run, steps) in runs.items():
        expected = steps if steps is not None else last_step[match["model"]]
        if run.final_step < expected:
            left_out.append(f"{name} (last evaluation at step {run.final_step} of {expected})")
            continue
        by_seed = losses.setdefault(match["model"], {}).setdefault(match["precision"], {})
        by_seed[int(match["seed"])] = run.val_loss()
    return losses, left_out


def model_section(model, by_precision, domain):
    lines = [f"### {model}", ""]
    rows = []
    for precision in ("bf16", "fp8"):
        values = list(by_precision.get(precision, {}).values())
        if values:
            std = stats.sample_std(values)
            rows.append([precision, str(len(values)), fmt(stats.mean(values)), "-" if std is None else fmt(std)])
    lines += markdown_table(["precision", "seeds", f"val loss ({domain})", "seed std"], rows)
    bf16, fp8 = by_precision.get("bf16", {}), by_precision.get("fp8", {})
    shared = sorted(set(bf16) & set(fp8))
    if shared:
        interval = stats.paired_interval([fp8[s] for s in shared], [bf16[s] for s in shared])
        base = stats.mean([bf16[s] for s in shared])
        ci = ("no CI (one seed)" if interval.low is None else
              f"95% CI [{signed(interval.low)}, {signed(interval.high)}] nats, paired over seeds {shared}")
        lines += ["", f"fp8 - bf16: {signed(interval.difference)} nats ({signed(100 * interval.difference / base, 2)}% "
                  f"of bf16), {ci}"]
    return lines


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the OUT folder of scripts/bench_fp8_device.sh")
    ap.add_argument("--domain", default="moby_dick", help="the validation domain compared (default moby_dick)")
    args = ap.parse_args(argv)
    try:
        losses, left_out = collect(args.folder, args.domain)
    except (TableError, OSError) as e:
        print(f"fp8_loss_report: error: {e}", file=sys.stderr)
        return 1
    lines = []
    for model in sorted(losses):
        lines += model_section(model, losses[model], args.domain) + [""]
    if left_out:
        lines.append("Left out, stopped before their last step: " + ", ".join(left_out))
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
