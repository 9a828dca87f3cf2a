"""The distillation chains both DSLA tables draw from: which kinds there are, where each seed's chain
lives (runs/dsla-distill/CHAIN/seed-N) and the random orders, shared by launching (distill_runs) and
reading (distill_results)."""

import os
import random
from dataclasses import dataclass, field

FOLDER = "dsla-distill"  # runs/dsla-distill/{teacher,CHAIN/seed-N}: shared by both tables
FRACTIONS = (0.25, 0.5)
# Random shuffle i of the teacher's attention layers is random.Random(RANDOM_ORDER_SEED + i)'s, distilled at
# seed i: the same list every time, and paired by seed with the ranked orders' chains.
RANDOM_ORDER_SEED = 2506
# A chain's distill.json measures its teacher again; beyond this many nats from the teacher's own final
# validation loss, the chain was distilled from another teacher.
TEACHER_TOLERANCE = 2e-3


@dataclass(frozen=True)
class Chain:
    """A kind of chain, run at every seed: its folder key, its distill.order ('random': shuffle i at
    seed i), and the overrides that make it this chain."""
    key: str
    order: str
    sets: dict = field(default_factory=dict)


# The distillation recipe's loss without gate_cos, which compares the two states' gates: one state has none.
ONE_STATE_LOSS = "{ce: 1.0, logit_kl: 1.0, layer_align: 1.0}"
CHAINS = {c.key: c for c in (
    Chain("entropy", "entropy"),
    Chain("entropy-1state", "entropy", {"dsla.states": 1, "distill.loss": ONE_STATE_LOSS}),
    Chain("sensitivity", "sensitivity"),
    Chain("random", "random"))}


def chain_dir(out, key, seed):
    return os.path.join(out, "runs", FOLDER, key, f"seed-{seed}")


def random_order(attention_layers, shuffle):
    """Shuffle number `shuffle` of the attention layers: the same list every time."""
    order = sorted(attention_layers)
    random.Random(RANDOM_ORDER_SEED + shuffle).shuffle(order)
    return order
