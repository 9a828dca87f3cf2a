"""The scales a table runs at: the --set overrides every run gets, the default number of seeds, and
where the `reference` scale's prepared corpus and tokenizer are."""

from .runs import TableError

SCALES = ("tiny", "small", "reference", "paper")

# The prepared corpus the reference scale trains on (`fathom data prep` output, see
# scripts/prepare_reference_data.sh) and its BPE tokenizer. Paths are relative to the repository.
REFERENCE_VOCAB = 8192
REFERENCE_TOKENIZER = "data/tokenizers/reference-8192.json"
REFERENCE_DATA = "data/prepared/reference"
REFERENCE_DOMAINS = ("moby_dick", "sotu_recent", "linux_filesystems", "python_howto")
# The domain whose validation loss the tables compare (the others are logged beside it).
REFERENCE_DOMAIN = "moby_dick"

# tiny: a few CPU seconds per run (the CI test of the scripts); small: the committed recipes (one GPU);
# reference: a scale chosen by measuring seed noise on the GPU (`scripts/tables.py noise`), on the
# prepared reference corpus; paper: the papers' model sizes where they give them.
TINY = {"model.d_model": 64, "model.n_heads": 4, "model.n_kv_heads": 2, "model.ffn_hidden": 128,
        "train.seq_len": 64, "train.batch_size": 4, "train.threads": 1, "train.schedule.warmup_steps": 5,
        "eval.batches": 4, "log.every": 5}
# Heads of 64 (the CUDA MoDA and DSLA kernels take head dims 64 and 128), G = 2.
REFERENCE = {"model.d_model": 512, "model.n_heads": 8, "model.n_kv_heads": 4, "model.ffn_hidden": 1536,
             "model.vocab_size": REFERENCE_VOCAB, "train.seq_len": 512, "train.batch_size": 32,
             "eval.batches": 32, "log.every": 25,
             "data.tokenizer": REFERENCE_TOKENIZER, "data.train": f"[{REFERENCE_DATA}/train]",
             "data.validation": "{" + ", ".join(f"{d}: [{REFERENCE_DATA}/validation/{d}]"
                                                for d in REFERENCE_DOMAINS) + "}"}
SCALE_SETS = {"tiny": TINY, "small": {}, "reference": REFERENCE, "paper": {}}
SCALE_STEPS = {"tiny": 60, "small": None, "reference": 2000, "paper": None}
DEFAULT_SEEDS = {"tiny": 1, "small": 3, "reference": 3, "paper": 1}
# MoDA Table 6's depths (24 and 48 layers in the paper) at each scale; None: the recipes' own.
TABLE6_DEPTHS = {"tiny": {24: 4, 48: 8}, "small": None, "reference": {24: 8, 48: 16}, "paper": None}
# The validation domain a table compares at each scale (None: the recipes' one domain).
COMPARED_DOMAIN = {"tiny": None, "small": None, "reference": REFERENCE_DOMAIN, "paper": None}
# Evaluations per run: enough points for the predictor's accuracy curve.
EVALS_PER_RUN = 4
# Seeds are FIRST_SEED, FIRST_SEED + 1, ...: every row of a table runs the same ones, so each seed
# gives its rows the same data order (and the same initial values for the parameters they share).
FIRST_SEED = 1


def seeds(count):
    return list(range(FIRST_SEED, FIRST_SEED + count))


def scale_sets(scale, steps, extra_sets):
    """The --set overrides every run of a table gets at this scale (row overrides come on top, then
    the user's --set)."""
    if scale not in SCALES:
        raise TableError(f"unknown scale '{scale}' (choose one of {', '.join(SCALES)})")
    sets = dict(SCALE_SETS[scale])
    steps = steps or SCALE_STEPS[scale]
    if steps:
        if steps < EVALS_PER_RUN:
            raise TableError(f"--steps {steps} is too few: each run evaluates {EVALS_PER_RUN} times")
        sets["train.steps"] = steps
        sets["eval.every"] = max(1, steps // EVALS_PER_RUN)
        sets["log.every"] = max(1, min(sets.get("log.every", 50), steps // 20))
        if scale != "tiny":
            sets["train.schedule.warmup_steps"] = max(1, steps // 20)
        # A checkpoint at each evaluation: a run stopped at any point resumes from the last one.
        sets["checkpoint.every"] = sets["eval.every"]
        sets["checkpoint.keep_last"] = 1
    sets.update(extra_sets)
    return sets
