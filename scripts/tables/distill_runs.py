"""The distillation runs behind the DSLA conversion and order tables: one teacher trained with
`fathom train` (shared by every chain), then resumable `fathom distill` chains at each seed
(runs/dsla-distill/CHAIN/seed-N), several at once with --jobs."""

import os
import time
from concurrent.futures import ThreadPoolExecutor

from .distill_chains import CHAINS, FOLDER, FRACTIONS, chain_dir, random_order
from .records import run_record
from .distill_results import DistillResult, attention_layers, is_finished
from .runs import Run, TableError, data_order, fathom_command, recipe_value, run_logged, train
from .scales import EVALS_PER_RUN, scale_sets
from .settings import check_settings

TEACHER_RECIPE = "recipes/quickstart.yaml"
DISTILL_RECIPE = "recipes/dsla/distill_quickstart.yaml"
# Per scale: teacher steps, distillation steps per converted layer, and overrides for both.
# reference: 8,000 steps of 32 x 512 tokens, about 5 epochs of the 25.3 M-token corpus, so that the teacher's
# validation loss stops improving before it is distilled.
TEACHER_STEPS = {"tiny": 300, "small": None, "reference": 8000, "paper": None}
# The teacher evaluates (and checkpoints) this often, so its curve shows whether it plateaued (None: the
# tables' EVALS_PER_RUN evaluations).
TEACHER_EVAL_EVERY = {"tiny": None, "small": None, "reference": 500, "paper": None}
STEPS_PER_LAYER = {"tiny": 20, "small": 200, "reference": 500, "paper": 2000}
# small: the quickstart's width with head dim 64 (what the CUDA DSLA kernels take);
# reference: the reference width with 8 layers, so 25% and 50% convert 2 and 4 (of 4 layers, random
# 25% orders would nearly all convert the same one or two);
# paper: a 1B teacher (the paper converts Llama2-7B; 1B is the paper's own Table 5 backbone).
SCALE_MODEL = {"tiny": {}, "small": {"model.n_heads": 2, "model.n_kv_heads": 2}, "reference": {"model.n_layers": 8},
               "paper": {"model.size": "olmo2_1B", "model.n_kv_heads": 8, "train.seq_len": 2048}}


def teacher_run(scale):
    return Run("teacher", TEACHER_RECIPE, dict(SCALE_MODEL[scale]))


def teacher_sets(scale, steps, extra):
    """The teacher's overrides: the scale's, evaluated every TEACHER_EVAL_EVERY steps where the scale
    sets it and the run is long enough for EVALS_PER_RUN of them (the user's --set last, but those of the
    distill section, which are the chains')."""
    sets = scale_sets(scale, steps or TEACHER_STEPS[scale], {})
    every = TEACHER_EVAL_EVERY[scale]
    if every and "train.steps" in sets and sets["train.steps"] >= every * EVALS_PER_RUN:
        sets["eval.every"] = sets["checkpoint.every"] = every
    sets.update({k: v for k, v in extra.items() if not k.startswith("distill.")})
    return sets


def train_teacher(fathom, repo, out, scale, steps, extra, log):
    """The shared teacher: trained once, skipped when complete (and trained with the settings the table gives
    it now: a teacher of other --steps would pass for this one). Returns (folder, trained now)."""
    run, sets = teacher_run(scale), teacher_sets(scale, steps, extra)
    return train(fathom, repo, out, FOLDER, run, sets, log,
                 again="train it again with these settings (and its chains, which the table then refuses as chains "
                       "of an earlier teacher)")


# What scale_sets derives from a training run's length: a chain's layers have their own (steps_per_layer).
RUN_LENGTH_KEYS = ("eval.every", "train.steps", "checkpoint.every", "checkpoint.keep_last",
                   "train.schedule.warmup_steps")


def distill_sets(scale, steps_per_layer, extra, teacher_dir, order, seed=None, chain_sets=None):
    """The --set overrides of one chain: the teacher's shapes (and its eval/log sizes), the recipe's own
    checkpoint cadence (which --resume needs), a warmup of a twentieth of each layer's steps where the scale
    sets one (as it does for a training run's steps), the chain's order, seed and overrides, then the user's."""
    steps_per_layer = steps_per_layer or STEPS_PER_LAYER[scale]
    inherited = scale_sets(scale, None, {})
    sets = {k: v for k, v in inherited.items() if k not in RUN_LENGTH_KEYS}
    if "train.schedule.warmup_steps" in inherited:
        sets["train.schedule.warmup_steps"] = max(1, steps_per_layer // 20)
    sets.update(SCALE_MODEL[scale])
    sets.update({"distill.teacher": f"checkpoint:{os.path.abspath(teacher_dir)}",
                 "distill.order": order if isinstance(order, str) else "[" + ", ".join(map(str, order)) + "]",
                 "distill.layers": "[" + ", ".join(str(f) for f in FRACTIONS) + "]",
                 "distill.steps_per_layer": steps_per_layer})
    if scale == "tiny":
        sets.update({"distill.calibration_batches": 1, "train.schedule.warmup_steps": 2})
    if seed is not None:
        sets["train.seed"] = seed
    sets.update(chain_sets or {})
    sets.update(extra)
    return sets


def chain_data_order(repo, scale, extra):
    """The data-order signature every chain of this scale shares (its seed aside): chains of one seed see
    the same batches, so their rows pair by seed."""
    return data_order(repo, Run("chain", DISTILL_RECIPE), distill_sets(scale, None, extra, "teacher", "entropy"))


# Keys a chain of one kind takes from the distillation recipe and another kind sets (distill_chains.CHAINS): a
# chain is compared on them too, so that a chain of the other kind in its folder is not taken for it.
CHAIN_VARIED = ("dsla.states", "distill.loss")


def chain_hint(key, was, found):
    """None for the keys the table sets itself for each chain (CHAIN_KEYS: a --set of them is refused)."""
    return None if key in CHAIN_KEYS else f"--set {key}={was}"


def chain_settings(repo, sets):
    """The settings a chain must have been distilled with: its --set overrides, and the distillation recipe's
    values of the CHAIN_VARIED keys it does not override."""
    expected = dict(sets)
    for key in CHAIN_VARIED:
        if key not in expected:
            value = recipe_value(os.path.join(repo, DISTILL_RECIPE), key)
            if value is not None:
                expected[key] = value
    return expected


def check_chain_settings(folder, sets):
    """A chain made with other settings than `sets` is refused (settings.check_settings)."""
    check_settings(folder, sets, "distilled", "distill it again with these settings", chain_hint, fixed=CHAIN_KEYS)


def is_complete(folder):
    """A chain is complete when its distill.json names a model for each fraction: distilling it again would
    change nothing (one with a diverged model is reported by the table, not run again)."""
    return is_finished(folder)


def distill(fathom, repo, out, key, seed, sets, log=print, jobs=1):
    """Runs chain `key` at `seed` unless its folder holds a complete one; resumes a started one. Returns
    (folder, whether it ran now). A failing fathom is a TableError naming the chain and its log. A chain
    distilled now gets its measured_by.json (this machine, commit and command, its minutes, and how many
    chains shared the device: jobs)."""
    check_layout(out, key)
    folder = chain_dir(out, key, seed)
    name = f"{FOLDER}/{key}/seed-{seed}"
    # A chain started or finished with other settings (distill.steps_per_layer, the loss, the model, ...):
    # fathom's --resume takes a new train.steps, so even a started chain is checked here.
    check_chain_settings(folder, chain_settings(repo, sets))
    if is_complete(folder):
        check_not_stale(folder, sets["distill.teacher"].split(":", 1)[1])
        log(f"  {name}: complete, skipped")
        return folder, False
    all_sets = dict(sets)
    all_sets["log.dir"] = os.path.abspath(folder)
    command = fathom_command(fathom, "distill", os.path.join(repo, DISTILL_RECIPE), all_sets)
    # fathom distill writes the chain's recipe.yaml first (before ranking the layers) and continues only a
    # folder that holds one: a chain stopped at any point after it resumes.
    started = os.path.isfile(os.path.join(folder, "recipe.yaml"))
    if started:
        command.append("--resume")
    log_path = folder + ".log"
    log(f"  {name}: distilling ({'resuming' if started else 'new'}, log {log_path})")
    start = time.monotonic()
    run_logged(command, log_path, repo, f"chain {name}", append=started)
    DistillResult(folder)  # exited 0: its distill.json must now be whole, else say what is missing
    run_record(folder, jobs, time.monotonic() - start, seed)
    return folder, True


def distill_all(fathom, repo, out, work, jobs, log=print):
    """Runs each (key, seed, sets) of work, `jobs` at a time. Returns whether any ran now. Every chain
    ends before the first failure is raised, so none is left half-written by the others' failure. Chains of
    other settings are refused before any runs."""
    for key, seed, sets in work:
        check_chain_settings(chain_dir(out, key, seed), chain_settings(repo, sets))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(distill, fathom, repo, out, key, seed, sets, log, jobs) for key, seed, sets in work]
        failed = [f.exception() for f in futures if f.exception()]
        if failed:
            raise failed[0]
        return any(f.result()[1] for f in futures)


def check_layout(out, key):
    """A chain folder of the one-seed layout (CHAIN/distill.json) ran at the recipe's seed: its numbers
    belong to no seed of this one."""
    old = os.path.join(out, "runs", FOLDER, key)
    if os.path.isfile(os.path.join(old, "distill.json")):
        raise TableError(f"{old} holds a chain of the earlier one-seed layout (no seed-N folder); remove it (or "
                         f"move it away) to distill {key} again at each seed")


def check_not_stale(folder, teacher_dir):
    """A chain finished before its teacher's metrics were last written was distilled from an earlier
    teacher (one trained again, e.g. with other --steps): its numbers are not this teacher's."""
    teacher_metrics = os.path.join(teacher_dir, "metrics.jsonl")
    chain = os.path.join(folder, "distill.json")
    if os.path.isfile(teacher_metrics) and os.path.getmtime(chain) < os.path.getmtime(teacher_metrics):
        raise TableError(f"{folder} was distilled from an earlier teacher ({teacher_metrics} is newer); "
                         f"remove {folder} to distill it again from this one")


# What makes each chain the one its row and seed claim: the tables set these, and a --set of them (which
# every chain would take) would make the chains of every seed, order or state count alike.
CHAIN_KEYS = ("train.seed", "distill.order", "distill.layers", "distill.teacher", "dsla.states", "distill.loss",
              "log.dir")


def check_extra(extra):
    refused = [k for k in extra if k in CHAIN_KEYS]
    if refused:
        raise TableError(f"--set {', '.join(refused)}: the distillation tables set "
                         f"{'it' if len(refused) == 1 else 'them'} for each chain (train.seed i at seed i, the order, "
                         "25% and 50%, the shared teacher, 2 or 1 states and their loss); leave it out")


def run_chains(fathom, repo, out, args, keys, seeds, log=print):
    """Trains the teacher, then the chains `keys` at every seed, args.jobs at a time (the random chains
    last: their shuffles are of the layers a ranked chain lists). Returns whether anything ran now."""
    check_extra(args.extra)
    teacher_dir, ran = train_teacher(fathom, repo, out, args.scale, args.steps, args.extra, log)

    def work(key, seed, order):
        chain = CHAINS[key]
        return key, seed, distill_sets(args.scale, None, args.extra, teacher_dir, order, seed, chain.sets)
    ranked = [k for k in keys if CHAINS[k].order != "random"]
    ran = distill_all(fathom, repo, out, [work(k, s, CHAINS[k].order) for k in ranked for s in seeds],
                      args.jobs, log) or ran
    if len(ranked) < len(keys):
        layers = attention_layers(chain_dir(out, ranked[0], seeds[0]))
        ran = distill_all(fathom, repo, out, [work(k, s, random_order(layers, s)) for k in keys if k not in ranked
                                              for s in seeds], args.jobs, log) or ran
    return ran
