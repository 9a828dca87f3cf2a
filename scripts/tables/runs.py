"""Training runs behind the tables: resumable launching of `fathom train`, and
reading a finished run's metrics.jsonl."""

import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field


class TableError(Exception):
    """A failure the user must see: a run that failed, metrics that are missing or malformed."""


@dataclass
class Run:
    """One row's training run: a recipe plus the --set overrides that make it this row, at one seed
    (None: the recipe's own seed, for runs that are not repeated over seeds, like the teacher)."""
    key: str
    recipe: str
    sets: dict = field(default_factory=dict)
    seed: int | None = None

    def at_seed(self, seed):
        return Run(self.key, self.recipe, dict(self.sets), seed)

    def name(self):
        return self.key if self.seed is None else f"{self.key}/seed-{self.seed}"


def read_metrics(path):
    """The records of a metrics.jsonl, in order. A line that is not a JSON object is an error."""
    if not os.path.isfile(path):
        raise TableError(f"{path}: no metrics.jsonl (the run did not start)")
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise TableError(f"{path}:{number}: not JSON ({e.msg})") from None
            if not isinstance(record, dict) or "step" not in record or "kind" not in record:
                raise TableError(f"{path}:{number}: a metrics record needs 'kind' and 'step'")
            records.append(record)
    return records


def is_complete(run_dir, steps):
    """A run is complete when its metrics hold an evaluation at its final step (fathom evaluates
    after the final checkpoint, so nothing of the run is missing then)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path) or steps is None:
        return False
    try:
        records = read_metrics(path)
    except TableError:
        return False
    return any(r["kind"] == "eval" and r["step"] == steps for r in records)


def run_dir_for(out, table, run):
    return os.path.join(out, "runs", table, run.key, *([f"seed-{run.seed}"] if run.seed is not None else []))


SEED_FOLDER = re.compile(r"^seed-(\d+)$")


def other_seeds(folder, keys, seeds):
    """The folders KEY/seed-N under `folder` of rows (or chains) `keys` at seeds other than `seeds`,
    finished or not: what a page that reads `seeds` leaves out, and must name."""
    found = []
    for key in keys:
        parent = os.path.join(folder, key)
        names = os.listdir(parent) if os.path.isdir(parent) else []
        numbers = sorted(int(m.group(1)) for n in names if (m := SEED_FOLDER.match(n)) and
                         os.path.isdir(os.path.join(parent, n)))
        found += [f"{key}/seed-{n}" for n in numbers if n not in seeds]
    return found


def run_sets(run, sets):
    """The --set overrides of one run: the table's, the row's, then its seed."""
    all_sets = dict(sets)
    all_sets.update(run.sets)
    if run.seed is not None:
        all_sets["train.seed"] = run.seed
    return all_sets


def run_steps(repo, run, all_sets):
    """The steps a run trains: its --set train.steps, else its recipe's."""
    steps = all_sets.get("train.steps")
    return recipe_steps(os.path.join(repo, run.recipe)) if steps is None else steps


def is_started(run_dir):
    return os.path.exists(os.path.join(run_dir, "checkpoints", "latest"))


def check_run(repo, out, table, run, sets, again="train it again with these settings"):
    """Refuses a complete or started run in the run's folder that was made with other settings than the table
    gives it now: a run of more steps that evaluated at this one's last step would pass as complete, and a
    started one would resume under the new settings. (A run that never reached a checkpoint is trained again
    from the start anyway.) `again`: what removing the folder lets the user do. Returns the run's folder, its
    settings (run_sets) and its steps."""
    from .settings import CHECKPOINT_KEYS, check_settings
    run_dir = run_dir_for(out, table, run)
    all_sets = run_sets(run, sets)
    steps = run_steps(repo, run, all_sets)
    if is_complete(run_dir, steps) or is_started(run_dir):
        check_settings(run_dir, {**all_sets, "train.steps": steps}, "trained", again, skip=CHECKPOINT_KEYS)
    return run_dir, all_sets, steps


def train(fathom, repo, out, table, run, sets, log=print, jobs=1, again="train it again with these settings"):
    """Trains one run unless its folder already holds a complete one; resumes one stopped after a
    checkpoint; refuses one made with other settings (check_run). Returns (run folder, whether it trained
    now). A failing fathom is a TableError naming the run and its log. jobs: how many runs share the device
    with this one (kept in its record)."""
    from .records import RECORD, run_record
    run_dir, all_sets, steps = check_run(repo, out, table, run, sets, again)
    if is_complete(run_dir, steps):
        if not os.path.isfile(os.path.join(run_dir, RECORD)):  # killed between its end and its record
            run_record(run_dir, jobs, 0.0, run.seed)
        log(f"  {table}/{run.name()}: complete, skipped")
        return run_dir, False
    all_sets["log.dir"] = os.path.abspath(run_dir)
    command = fathom_command(fathom, "train", os.path.join(repo, run.recipe), all_sets)
    started = is_started(run_dir)
    command.append("--resume" if started else "--overwrite")
    log_path = run_dir + ".log"
    log(f"  {table}/{run.name()}: training ({'resuming' if started else 'new'}, log {log_path})")
    start = time.monotonic()
    run_logged(command, log_path, repo, f"run {table}/{run.name()}", append=started)
    if not is_complete(run_dir, steps):
        raise TableError(f"run {table}/{run.name()} exited 0 but its metrics.jsonl has no evaluation at step "
                         f"{steps}; see {log_path}")
    run_record(run_dir, jobs, time.monotonic() - start, run.seed)
    return run_dir, True


def fathom_command(fathom, verb, recipe_path, sets):
    """`fathom VERB RECIPE --set key=value ...`, the overrides in order."""
    command = [fathom, verb, recipe_path]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    return command


def run_logged(command, log_path, repo, what, append=False):
    """Runs `command` in `repo` with its output in log_path (led by the command, shell-quoted, so it can
    be pasted back; append: after the log of the run it resumes); a start failure or a non-zero exit
    raises TableError naming `what` and the log."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a" if append else "w", encoding="utf-8") as f:
        f.write(shlex.join(command) + "\n")
        f.flush()
        try:
            rc = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT, cwd=repo)
        except OSError as e:
            raise TableError(f"{what}: cannot start {command[0]}: {e.strerror}") from None
    if rc != 0:
        raise TableError(f"{what} failed (exit status {rc}); last lines of {log_path}:\n" + tail(log_path, 8))


def recipe_value(recipe_path, key):
    """The value (as written) of a two-level key such as train.steps in a committed recipe, or None.
    The recipes write these keys on one line each, so no YAML library is needed."""
    section, name = key.split(".")
    in_section = False
    with open(recipe_path, encoding="utf-8") as f:
        for line in f:
            stripped = line.split("#", 1)[0].rstrip()
            if not stripped:
                continue
            if not line.startswith(" "):
                in_section = stripped.strip() == f"{section}:"
            elif in_section and stripped.strip().startswith(f"{name}:"):
                return stripped.split(":", 1)[1].strip()
    return None


def recipe_steps(recipe_path):
    """train.steps of a committed recipe (for completion checks at the recipe's own length)."""
    steps = recipe_value(recipe_path, "train.steps")
    if steps is None:
        raise TableError(f"{recipe_path}: no train.steps (pass --steps)")
    return int(steps)


# What decides the order of the batches a seed draws: runs that agree on these (and the seed) see the
# same data in the same order.
DATA_ORDER_KEYS = ("data.train", "data.tokenizer", "data.documents", "train.batch_size", "train.seq_len")


def data_order(repo, run, sets):
    """The data-order signature of a run: its values of DATA_ORDER_KEYS (overrides, else the recipe's)."""
    all_sets = run_sets(run, sets)
    recipe = os.path.join(repo, run.recipe)
    return tuple(str(all_sets[k]) if k in all_sets else recipe_value(recipe, k) for k in DATA_ORDER_KEYS)


def tail(path, n):
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-n:])


def fathom_binary(explicit, repo):
    candidates = [explicit] if explicit else [os.path.join(repo, "build", "fathom")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise TableError(f"no fathom binary at {explicit or candidates[0]} (build it, or pass --fathom PATH)")
