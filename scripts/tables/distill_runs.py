"""The distillation runs behind the DSLA conversion and order tables: one teacher trained with
`fathom train` (shared by every chain), then resumable `fathom distill` chains, and reading a
finished chain's distill.json / order.json."""

import json
import math
import os
import random

from .runs import Run, TableError, run_logged, train
from .scales import scale_sets

FOLDER = "dsla-distill"  # runs/dsla-distill/{teacher,entropy,sensitivity,random}: shared by both tables
TEACHER_RECIPE = "recipes/quickstart.yaml"
DISTILL_RECIPE = "recipes/dsla/distill_quickstart.yaml"
FRACTIONS = (0.25, 0.5)
# The random order is this seed's shuffle of the teacher's attention layers: the same list every time.
RANDOM_ORDER_SEED = 2506
# Per scale: teacher steps, distillation steps per converted layer, and overrides for both.
TEACHER_STEPS = {"tiny": 300, "small": None, "reference": None, "paper": None}
STEPS_PER_LAYER = {"tiny": 40, "small": 200, "reference": 500, "paper": 2000}
# small: the quickstart's width with head dim 64 (what the CUDA DSLA kernels take);
# paper: a 1B teacher (the paper converts Llama2-7B; 1B is the paper's own Table 5 backbone).
SCALE_MODEL = {"tiny": {}, "small": {"model.n_heads": 2, "model.n_kv_heads": 2}, "reference": {},
               "paper": {"model.size": "olmo2_1B", "model.n_kv_heads": 8, "train.seq_len": 2048}}


def teacher_run(scale):
    return Run("teacher", TEACHER_RECIPE, dict(SCALE_MODEL[scale]))


def train_teacher(fathom, repo, out, scale, steps, extra, log):
    """The shared teacher: trained once, skipped when complete. Returns (folder, trained now)."""
    sets = scale_sets(scale, steps or TEACHER_STEPS[scale], extra)
    return train(fathom, repo, out, FOLDER, teacher_run(scale), sets, log)


def distill_sets(scale, steps_per_layer, extra, teacher_dir, order):
    # The teacher's tiny shapes (and its eval/log sizes); the recipe's own checkpoint cadence, which --resume needs.
    sets = {k: v for k, v in scale_sets(scale, None, {}).items()
            if k not in ("eval.every", "train.steps", "checkpoint.every", "checkpoint.keep_last")}
    sets.update(SCALE_MODEL[scale])
    sets.update({"distill.teacher": f"checkpoint:{os.path.abspath(teacher_dir)}",
                 "distill.order": order if isinstance(order, str) else "[" + ", ".join(map(str, order)) + "]",
                 "distill.layers": "[" + ", ".join(str(f) for f in FRACTIONS) + "]",
                 "distill.steps_per_layer": steps_per_layer or STEPS_PER_LAYER[scale]})
    if scale == "tiny":
        sets.update({"distill.calibration_batches": 1, "train.schedule.warmup_steps": 2})
    sets.update(extra)
    return sets


def random_order(attention_layers, seed=RANDOM_ORDER_SEED):
    order = sorted(attention_layers)
    random.Random(seed).shuffle(order)
    return order


def is_complete(chain_dir):
    """A chain is complete when distill.json names a model for each fraction (it is written last)."""
    try:
        DistillResult(chain_dir)
        return True
    except TableError:
        return False


def distill(fathom, repo, out, key, sets, log=print):
    """Runs one chain unless its folder holds a complete one; resumes a started one. Returns
    (folder, whether it ran now). A failing fathom is a TableError naming the chain and its log."""
    chain_dir = os.path.join(out, "runs", FOLDER, key)
    if is_complete(chain_dir):
        check_not_stale(chain_dir, sets["distill.teacher"].split(":", 1)[1])
        log(f"  {FOLDER}/{key}: complete, skipped")
        return chain_dir, False
    all_sets = dict(sets)
    all_sets["log.dir"] = os.path.abspath(chain_dir)
    command = [fathom, "distill", os.path.join(repo, DISTILL_RECIPE)]
    for k, v in all_sets.items():
        command += ["--set", f"{k}={v}"]
    started = os.path.isdir(chain_dir) and any(name.startswith("M_") for name in os.listdir(chain_dir))
    if started:
        command.append("--resume")
    log_path = chain_dir + ".log"
    log(f"  {FOLDER}/{key}: distilling ({'resuming' if started else 'new'}, log {log_path})")
    run_logged(command, log_path, repo, f"chain {FOLDER}/{key}")
    DistillResult(chain_dir)  # exited 0: its distill.json must now be whole, else say what is missing
    return chain_dir, True


def check_not_stale(chain_dir, teacher_dir):
    """A chain finished before its teacher's metrics were last written was distilled from an earlier
    teacher (one trained again, e.g. with other --steps): its numbers are not this teacher's."""
    teacher_metrics = os.path.join(teacher_dir, "metrics.jsonl")
    chain = os.path.join(chain_dir, "distill.json")
    if os.path.isfile(teacher_metrics) and os.path.getmtime(chain) < os.path.getmtime(teacher_metrics):
        raise TableError(f"{chain_dir} was distilled from an earlier teacher ({teacher_metrics} is newer); "
                         f"remove {chain_dir} to distill it again from this one")


def read_json(path, what):
    if not os.path.isfile(path):
        raise TableError(f"{path}: no {what} (the chain did not finish)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def number(value, where):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise TableError(f"{where}: not a finite number ({value!r})")
    return float(value)


class DistilledModel:
    def __init__(self, record, domain, where):
        if not isinstance(record, dict):
            raise TableError(f"{where}: a model entry must be an object")
        self.k = int(number(record.get("k"), f"{where}.k"))
        self.layers = record.get("layers")
        if not isinstance(self.layers, list) or len(self.layers) != self.k:
            raise TableError(f"{where}: 'layers' must list the {self.k} converted layers")
        self.fraction = number(record.get("fraction"), f"{where}.fraction")
        values = (record.get("validation") or {}).get(domain)
        if not isinstance(values, dict):
            raise TableError(f"{where}: no validation loss for domain '{domain}'")
        self.loss = number(values.get("loss"), f"{where}.validation.{domain}.loss")
        self.ppl = number(values.get("ppl"), f"{where}.validation.{domain}.ppl")
        self.kv_saved = number(record.get("kv_bytes_saved_per_1k_tokens"), f"{where}.kv_bytes_saved_per_1k_tokens")


class DistillResult:
    """A finished chain: the teacher's validation loss, PPL and KV bytes, and one model per fraction
    in FRACTIONS (the named M_k, by k). Anything missing or not finite is a TableError."""

    def __init__(self, chain_dir, domain=None):
        """domain: the validation domain to read (None: the first the chain evaluated)."""
        self.dir = chain_dir
        path = os.path.join(chain_dir, "distill.json")
        data = read_json(path, "distill.json")
        teacher = data.get("teacher") if isinstance(data, dict) else None
        if not isinstance(teacher, dict) or not isinstance(teacher.get("validation"), dict) or not teacher["validation"]:
            raise TableError(f"{path}: no teacher validation results")
        self.domain = domain or next(iter(teacher["validation"]))
        if self.domain not in teacher["validation"]:
            raise TableError(f"{path}: no teacher validation results for domain '{self.domain}' "
                             f"(has: {', '.join(teacher['validation'])})")
        t = teacher["validation"][self.domain]
        if not isinstance(t, dict):
            raise TableError(f"{path}: teacher.validation.{self.domain} must be an object")
        self.teacher_loss = number(t.get("loss"), f"{path}: teacher.validation.{self.domain}.loss")
        self.teacher_ppl = number(t.get("ppl"), f"{path}: teacher.validation.{self.domain}.ppl")
        self.teacher_kv = number(teacher.get("kv_bytes_per_1k_tokens"), f"{path}: teacher.kv_bytes_per_1k_tokens")
        models = data.get("models")
        if not isinstance(models, list):
            raise TableError(f"{path}: no 'models' list")
        named = [DistilledModel(m, self.domain, f"{path}: models[{i}]") for i, m in enumerate(models)
                 if isinstance(m, dict) and m.get("named") is True]
        named.sort(key=lambda m: m.k)
        if len(named) != len(FRACTIONS):
            raise TableError(f"{path}: {len(named)} named models, expected one per fraction "
                             f"{', '.join(map(str, FRACTIONS))} (distill.layers)")
        self.models = dict(zip(FRACTIONS, named))

    def at(self, fraction):
        return self.models[fraction]


def attention_layers(chain_dir):
    """The teacher's attention layers, from a chain's order.json (every chain ranks them all)."""
    path = os.path.join(chain_dir, "order.json")
    data = read_json(path, "order.json")
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list) or not layers or not all(isinstance(r, dict) and isinstance(r.get("layer"), int)
                                                             for r in layers):
        raise TableError(f"{path}: 'layers' must list the ranked layers as {{\"layer\": N}} objects")
    return [r["layer"] for r in layers]
