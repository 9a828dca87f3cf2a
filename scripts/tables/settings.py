"""A finished run's or chain's settings against the ones a table gives it now: fathom writes the fully resolved
recipe (every key explicit) into the run folder as recipe.yaml, and a table that reuses a run must have asked
for the same values of every key it sets."""

import os

# Keys a user varies per machine without changing what is measured: where and how fast a run goes, where it
# writes, how often it reports. distill.teacher is a path on the machine that made the chain (a chain's
# teacher is checked by the loss it measured, distill_results.gather).
PER_MACHINE_KEYS = ("train.threads", "train.device", "train.grad_accum", "train.recompute", "train.grad_reduce",
                    "train.grad_bucket_kib", "data.verify", "log.dir", "log.every", "distill.teacher")
# The checkpoint cadence changes none of a run's numbers (only where a stopped run resumes from).
CHECKPOINT_KEYS = ("checkpoint.every", "checkpoint.keep_last")
# Keys fathom resolves into another before writing recipe.yaml: a chain's distill.steps_per_layer is its
# train.steps (each converted layer's run).
WRITTEN_AS = {"distill.steps_per_layer": "train.steps"}


def read_recipe(path):
    """The recipe.yaml fathom wrote, as nested dicts and lists."""
    try:
        import yaml  # python3-yaml (scripts/setup.sh installs it)
    except ImportError:
        from .runs import TableError

        raise TableError(f"checking the settings of {os.path.dirname(path)} needs PyYAML to read its recipe.yaml "
                         "(install python3-yaml, as scripts/setup.sh does)") from None

    with open(path, encoding="utf-8") as f:
        tree = yaml.safe_load(f)
    return tree if isinstance(tree, dict) else {}


def lookup(tree, key):
    """The value of a dotted key (train.schedule.warmup_steps), or KeyError."""
    value = tree
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def canonical(value):
    """A value compared by meaning: numbers as floats (1, 1.0 and "1e0" alike), text in YAML's flow form
    (a --set's "[entropy]") parsed, mappings without their order."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith(("[", "{")):
        import yaml

        return canonical(yaml.safe_load(text))
    try:
        return float(text)  # YAML 1.1 reads 1e-3 (no dot) as text
    except ValueError:
        return text


def same(a, b):
    """Whether two canonical values agree; a one-item list and its item agree (distill.order: entropy is
    written as the list [entropy])."""
    if isinstance(a, list) and len(a) == 1 and not isinstance(b, list):
        a = a[0]
    if isinstance(b, list) and len(b) == 1 and not isinstance(a, list):
        b = b[0]
    return a == b


def shown(value):
    """A recipe value as a --set would write it."""
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def differences(folder, sets, skip=()):
    """[(key, the value folder/recipe.yaml holds, the value `sets` gives)] for each key of sets, other than the
    PER_MACHINE_KEYS and `skip`, that the recipe holds with another value. A folder without a recipe.yaml, or a
    key its recipe does not hold, gives nothing to compare."""
    path = os.path.join(folder, "recipe.yaml")
    if not os.path.isfile(path):
        return []
    tree = read_recipe(path)
    found = []
    for key, wanted in sets.items():
        if key in PER_MACHINE_KEYS or key in skip:
            continue
        try:
            made = lookup(tree, key)
        except KeyError:
            try:
                made = lookup(tree, WRITTEN_AS[key])
            except KeyError:
                continue
        if not same(canonical(made), canonical(wanted)):
            found.append((key, shown(made), str(wanted)))
    return found


def length_hint(key, was, found):
    """How to ask for a run's recorded value of `key`: its length is --steps, anything else a --set (also keys
    --steps derives, such as eval.every: the recorded value may not be the derived one)."""
    return f"--steps {was}" if key == "train.steps" else f"--set {key}={was}"


def check_settings(folder, sets, made, again, hint_for=length_hint, skip=(), fixed=()):
    """A run or chain in `folder` (finished, or started and about to resume) made with other values of the keys
    the table sets than `sets` gives now is refused, naming each key and both values: reused, its numbers would
    stand in a row for settings they were not measured with (and a resumed one would mix both). `fixed`: keys
    the table sets itself, which no option changes back."""
    from .runs import TableError

    found = differences(folder, sets, skip)
    if not found:
        return
    keys = [key for key, _, _ in found]
    lines = [f"{key}: {was} (its recipe.yaml) but {now} now" for key, was, now in found]
    hints = [h for key, was, _ in found if (h := hint_for(key, was, keys))]
    fixed_found = [key for key in keys if key in fixed]
    raise TableError(f"{folder} was {made} with other settings than the table gives it now:\n  " + "\n  ".join(lines) +
                     f"\nRemove {folder} to {again}" +
                     (f", or run with the settings it was made with ({' '.join(hints)})" if hints else "") +
                     (f"; the table sets {', '.join(fixed_found)} itself for each chain, so only removing it helps "
                      "there" if fixed_found and hints else "") + ".")
