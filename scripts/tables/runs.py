"""Training runs behind the tables: scale overrides, resumable launching of `fathom train`, and
reading a finished run's metrics.jsonl."""

import json
import os
import shlex
import subprocess
from dataclasses import dataclass, field

SCALES = ("tiny", "small", "paper")


class TableError(Exception):
    """A failure the user must see: a run that failed, metrics that are missing or malformed."""


@dataclass
class Run:
    """One row's training run: a recipe plus the --set overrides that make it this row."""
    key: str
    recipe: str
    sets: dict = field(default_factory=dict)


# Shapes per scale. tiny: a few CPU seconds per run (the CI test); small: the recipes as committed
# (one GPU); paper: the papers' model sizes where they give them (data stays the recipe's corpus).
TINY_MODEL = {"model.d_model": 64, "model.n_heads": 4, "model.n_kv_heads": 2, "model.ffn_hidden": 128}
TINY_TRAIN = {"train.seq_len": 64, "train.batch_size": 4, "train.threads": 1,
              "train.schedule.warmup_steps": 5}
TINY_STEPS = 60
# Evaluations per run: enough points for the predictor's accuracy curve.
EVALS_PER_RUN = 4


def scale_sets(scale, steps, extra_sets):
    """The --set overrides every run of a table gets at this scale (row overrides come on top)."""
    if scale not in SCALES:
        raise TableError(f"unknown scale '{scale}' (choose one of {', '.join(SCALES)})")
    sets = {}
    if scale == "tiny":
        sets.update(TINY_MODEL)
        sets.update(TINY_TRAIN)
        steps = steps or TINY_STEPS
        sets["eval.batches"] = 4
        sets["log.every"] = 5
    if steps:
        if steps < EVALS_PER_RUN:
            raise TableError(f"--steps {steps} is too few: each run evaluates {EVALS_PER_RUN} times")
        sets["train.steps"] = steps
        sets["eval.every"] = max(1, steps // EVALS_PER_RUN)
        sets["log.every"] = max(1, min(sets.get("log.every", 50), steps // 20))
        if scale != "tiny":
            sets["train.schedule.warmup_steps"] = max(1, steps // 20)
    sets["checkpoint.every"] = 1 << 30  # the final checkpoint only: resuming needs no more
    sets.update(extra_sets)
    return sets


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
    return os.path.join(out, "runs", table, run.key)


def train(fathom, repo, out, table, run, sets, log=print):
    """Trains one row unless its folder already holds a complete run; resumes a started one.
    Returns (run folder, whether it trained now). A failing fathom is a TableError naming the run and its log."""
    run_dir = run_dir_for(out, table, run)
    all_sets = dict(sets)
    all_sets.update(run.sets)
    steps = all_sets.get("train.steps")
    if steps is None:
        steps = recipe_steps(os.path.join(repo, run.recipe))
    if is_complete(run_dir, steps):
        log(f"  {table}/{run.key}: complete, skipped")
        return run_dir, False
    all_sets["log.dir"] = os.path.abspath(run_dir)
    command = [fathom, "train", os.path.join(repo, run.recipe)]
    for key, value in all_sets.items():
        command += ["--set", f"{key}={value}"]
    started = os.path.isdir(os.path.join(run_dir, "checkpoints"))
    command.append("--resume" if started else "--overwrite")
    log_path = run_dir + ".log"
    log(f"  {table}/{run.key}: training ({'resuming' if started else 'new'}, log {log_path})")
    run_logged(command, log_path, repo, f"run {table}/{run.key}")
    if not is_complete(run_dir, steps):
        raise TableError(f"run {table}/{run.key} exited 0 but its metrics.jsonl has no evaluation at step "
                         f"{steps}; see {log_path}")
    return run_dir, True


def run_logged(command, log_path, repo, what):
    """Runs `command` in `repo` with its output in log_path (led by the command, shell-quoted, so it can
    be pasted back); a start failure or a non-zero exit raises TableError naming `what` and the log."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as f:
        f.write(shlex.join(command) + "\n")
        f.flush()
        try:
            rc = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT, cwd=repo)
        except OSError as e:
            raise TableError(f"{what}: cannot start {command[0]}: {e.strerror}") from None
    if rc != 0:
        raise TableError(f"{what} failed (exit status {rc}); last lines of {log_path}:\n" + tail(log_path, 8))


def recipe_steps(recipe_path):
    """train.steps of a committed recipe (for completion checks at the recipe's own length)."""
    in_train = False
    with open(recipe_path, encoding="utf-8") as f:
        for line in f:
            stripped = line.split("#", 1)[0].rstrip()
            if not stripped:
                continue
            if not line.startswith(" "):
                in_train = stripped.strip() == "train:"
            elif in_train and stripped.strip().startswith("steps:"):
                return int(stripped.split(":", 1)[1])
    raise TableError(f"{recipe_path}: no train.steps (pass --steps)")


def tail(path, n):
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-n:])


def fathom_binary(explicit, repo):
    candidates = [explicit] if explicit else [os.path.join(repo, "build", "fathom")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise TableError(f"no fathom binary at {explicit or candidates[0]} (build it, or pass --fathom PATH)")
