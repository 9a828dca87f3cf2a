"""Reading finished distillation chains back: one chain's distill.json / order.json (DistillResult), and
everything both DSLA distillation tables are drawn from (Distilled: the teacher's run and every chain at
every seed, checked to share that teacher), as rows.Row objects over seeds."""

import json
import math
import os
import re

from .distill_chains import CHAINS, FOLDER, FRACTIONS, TEACHER_TOLERANCE, chain_dir, random_order
from .metrics import RunMetrics, is_finite_number
from .plateau import plateau
from .records import RECORD
from .records import read_json as read_record
from .rows import Row
from .runs import TableError, other_seeds, read_metrics, recipe_value


# fathom distill writes a value that is not finite as null; earlier versions wrote it as printf does (nan,
# -nan, inf), which JSON lacks: read as NaN and Infinity, so that a diverged model is reported as one
# rather than as a file that is not JSON.
NOT_FINITE = re.compile(r"([:\[,]\s*)(-?)(nan|inf)\b")


def read_json(path, what):
    if not os.path.isfile(path):
        raise TableError(f"{path}: no {what} (the chain did not finish)")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = NOT_FINITE.sub(lambda m: m.group(1) + ("NaN" if m.group(3) == "nan" else m.group(2) + "Infinity"), text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def is_named(record):
    return isinstance(record, dict) and record.get("named") is True


def is_finished(chain_dir):
    """Whether a chain has finished: its distill.json (rewritten after each model) names a model for each
    fraction. A finished chain's numbers may still be unusable (a diverged model): DistillResult says so."""
    try:
        data = read_json(os.path.join(chain_dir, "distill.json"), "distill.json")
    except TableError:
        return False
    models = data.get("models") if isinstance(data, dict) else None
    return isinstance(models, list) and sum(map(is_named, models)) == len(FRACTIONS)


def number(value, where):
    if not is_finite_number(value):
        raise TableError(f"{where}: not a finite number ({value!r})")
    return float(value)


class DistilledModel:
    """One named M_k of a chain, with its teacher's validation loss (the measures of a table's rows)."""

    def __init__(self, record, domain, where, teacher_loss, teacher_ppl):
        if not isinstance(record, dict):
            raise TableError(f"{where}: a model entry must be an object")
        self.k = int(number(record.get("k"), f"{where}.k"))
        self.layers = record.get("layers")
        if not isinstance(self.layers, list) or len(self.layers) != self.k:
            raise TableError(f"{where}: 'layers' must list the {self.k} converted layers")
        self.fraction = number(record.get("fraction"), f"{where}.fraction")
        if not 0 < self.fraction <= 1:
            raise TableError(f"{where}.fraction: {self.fraction} is not a fraction of the layers")
        values = (record.get("validation") or {}).get(domain)
        if not isinstance(values, dict):
            raise TableError(f"{where}: no validation loss for domain '{domain}'")
        loss = values.get("loss")
        # null (fathom's) or NaN/Infinity (earlier fathom's, read by read_json): a diverged model
        if ("loss" in values and loss is None) or (isinstance(loss, float) and not math.isfinite(loss)):
            raise TableError(f"{where}.validation.{domain}.loss: not a finite number ({loss!r}): M_{self.k} diverged, "
                             "and the table has no row without it (remove the chain to distill it again)")
        self.loss = number(loss, f"{where}.validation.{domain}.loss")
        self.ppl = number(values.get("ppl"), f"{where}.validation.{domain}.ppl")
        self.kv_saved = number(record.get("kv_bytes_saved_per_1k_tokens"), f"{where}.kv_bytes_saved_per_1k_tokens")
        self.teacher_loss = teacher_loss
        self.teacher_ppl = teacher_ppl

    def gap(self):
        """The validation loss above the teacher's (nats)."""
        return self.loss - self.teacher_loss

    def ppl_gap(self):
        return self.ppl - self.teacher_ppl


class DistillResult:
    """A finished chain: the teacher's validation loss, PPL and KV bytes, and one model per fraction
    in FRACTIONS (the named M_k, by k). Anything missing or not finite is a TableError."""

    def __init__(self, chain_dir, domain=None):
        """domain: the validation domain to read (None: the first the chain evaluated)."""
        self.dir = chain_dir
        path = os.path.join(chain_dir, "distill.json")
        data = read_json(path, "distill.json")
        teacher = data.get("teacher") if isinstance(data, dict) else None
        if not isinstance(teacher, dict) or not isinstance(teacher.get("validation"), dict) or \
                not teacher["validation"]:
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
        named = [DistilledModel(m, self.domain, f"{path}: models[{i}]", self.teacher_loss, self.teacher_ppl)
                 for i, m in enumerate(models) if is_named(m)]
        named.sort(key=lambda m: m.k)
        if len(named) != len(FRACTIONS):
            raise TableError(f"{path}: {len(named)} named models, expected one per fraction "
                             f"{', '.join(map(str, FRACTIONS))} (distill.layers)")
        for f, m in zip(FRACTIONS, named):
            layers = round(m.k / m.fraction)
            if m.k != converted(f, layers):
                raise TableError(f"{path}: M_{m.k} converts {m.k} of {layers} layers, but {f * 100:g}% of them is "
                                 f"{converted(f, layers)}: the chain was distilled with other distill.layers; remove "
                                 "it to distill it again")
        self.models = dict(zip(FRACTIONS, named))

    def at(self, fraction):
        return self.models[fraction]


def converted(fraction, layers):
    """How many of `layers` layers fathom distill converts for a fraction of them: the nearest whole number,
    halves away from zero (std::llround)."""
    return math.floor(fraction * layers + 0.5)


def attention_layers(chain_dir):
    """The teacher's attention layers, from a chain's order.json (every chain ranks them all)."""
    path = os.path.join(chain_dir, "order.json")
    data = read_json(path, "order.json")
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list) or not layers or not all(isinstance(r, dict) and isinstance(r.get("layer"), int)
                                                             for r in layers):
        raise TableError(f"{path}: 'layers' must list the ranked layers as {{\"layer\": N}} objects")
    return [r["layer"] for r in layers]


class Distilled:
    """The teacher's run and the finished chains {key: {seed: DistillResult}} of a table, the random
    shuffles they were distilled with ({seed: order}), and the data-order signature the chains share."""

    def __init__(self, teacher, chains, shuffles, order, left_out=(), records=()):
        """left_out: the folders of this table's chains at seeds beyond the ones read (a page must name them);
        records: the measured_by records of the teacher's run and of each chain (None where one has none)."""
        self.teacher = teacher
        self.teacher_loss = teacher.val_loss()
        self.chains = chains
        self.shuffles = shuffles
        self.order = order
        self.seeds = sorted({s for by_seed in chains.values() for s in by_seed})
        self.left_out = list(left_out)
        self.records = list(records)

    def row(self, key, fraction):
        """The M_k of `fraction` of chain `key` at every seed, as a Row of DistilledModel."""
        return Row(f"{key} {fraction}", {s: r.at(fraction) for s, r in self.chains[key].items()}, self.order)

    def teacher_kv(self):
        return next(iter(next(iter(self.chains.values())).values())).teacher_kv

    def plateau(self):
        return plateau(self.teacher.val_curve())


def check_seed(chain_dir, seed):
    """A chain in seed-N distilled at train.seed N, as the recipe.yaml fathom distill wrote says: the rows
    pair chains by seed, and a chain of another seed (a folder moved, a --set) belongs to none of them."""
    recipe = os.path.join(chain_dir, "recipe.yaml")
    ran = recipe_value(recipe, "train.seed") if os.path.isfile(recipe) else None
    if ran is not None and ran != str(seed):
        raise TableError(f"{chain_dir}: distilled at train.seed {ran} (its recipe.yaml), not {seed}; remove it to "
                         "distill it again at its seed")


def gather(out, keys, seeds, domain, order):
    """Reads the teacher of runs/dsla-distill and chains `keys` at `seeds` (domain: the validation domain
    compared; order: the data-order signature the chains share). Each chain must have measured this teacher
    (its validation loss within TEACHER_TOLERANCE of the teacher's final one), and each random chain at seed
    i must have converted shuffle i of the layers the first ranked chain lists. A missing or unfinished
    chain, or one of another teacher or order, is a TableError naming its folder."""
    teacher_dir = os.path.join(out, "runs", FOLDER, "teacher")
    teacher = RunMetrics(f"{FOLDER}/teacher", read_metrics(os.path.join(teacher_dir, "metrics.jsonl")), domain)
    teacher_loss = teacher.val_loss()
    chains = {}
    for key in keys:
        chains[key] = {}
        for seed in seeds:
            result = DistillResult(chain_dir(out, key, seed), teacher.domain())
            if abs(result.teacher_loss - teacher_loss) > TEACHER_TOLERANCE:
                raise TableError(f"{result.dir} was distilled from another teacher: it measured the teacher's "
                                 f"validation loss as {result.teacher_loss:.6f}, and {teacher_dir} ends at "
                                 f"{teacher_loss:.6f}; remove {result.dir} to distill it again from this one")
            check_seed(result.dir, seed)
            chains[key][seed] = result
    shuffles = {}
    random_keys = [k for k in keys if CHAINS[k].order == "random"]
    if random_keys:
        source = next(k for k in keys if k not in random_keys)
        layers = attention_layers(chains[source][seeds[0]].dir)
        shuffles = {seed: random_order(layers, seed) for seed in seeds}
        for key in random_keys:
            for seed, result in chains[key].items():
                for fraction, model in result.models.items():
                    if model.layers != shuffles[seed][:model.k]:
                        raise TableError(f"{result.dir}: its {fraction * 100:g}% model converted layers "
                                         f"{model.layers}, but shuffle {seed} starts {shuffles[seed][:model.k]}; it "
                                         "was distilled with another order: remove it to distill it again")
    left_out = other_seeds(os.path.join(out, "runs", FOLDER), keys, seeds)
    records = [read_record(os.path.join(folder, RECORD))
               for folder in [teacher_dir] + [r.dir for by_seed in chains.values() for r in by_seed.values()]]
    return Distilled(teacher, chains, shuffles, order, left_out, records)
