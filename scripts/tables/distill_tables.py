"""The DSLA tables from chained distillation: 25% vs 50% of the layers converted, and the conversion
order (entropy vs sensitivity vs a fixed random order). Both read finished chains (distill_runs)."""

from .distill_runs import FRACTIONS, attention_layers, distill, distill_sets, random_order, train_teacher, \
    DistillResult, RANDOM_ORDER_SEED
import math

from .effects import DEFAULT_SIZE, effects_table, single
from .report import fmt, markdown_table, signed
from .scales import COMPARED_DOMAIN

# DSLA Table 1 (p. 7): Llama2-7B teacher and DSLA with 25% / 50% of its layers converted (lower is better).
PAPER_PPL = {"teacher": (8.79, 4.13), 0.25: (9.26, 4.14), 0.5: (9.89, 6.19)}  # (WikiText, Lambada)


def percent(fraction):
    return f"{fraction * 100:g}%"


class DistillTable:
    name = ""
    title = ""
    source = ""
    orders = ()

    def chains(self, fathom, repo, out, args, log):
        """Trains the teacher and runs this table's chains (skipping complete ones).
        Returns ({order key: DistillResult}, whether anything ran now)."""
        teacher_dir, ran = train_teacher(fathom, repo, out, args.scale, args.steps, args.extra, log)
        results = {}
        for key in self.orders:
            if key == "random":
                order = random_order(attention_layers(results["entropy"].dir))
            else:
                order = key
            sets = distill_sets(args.scale, None, args.extra, teacher_dir, order)
            chain_dir, ran_now = distill(fathom, repo, out, key, sets, log)
            results[key] = DistillResult(chain_dir, COMPARED_DOMAIN[args.scale])
            ran = ran or ran_now
        return results, ran


class DslaConversion(DistillTable):
    name = "dsla-conversion"
    title = "DSLA: 25% vs 50% of the layers converted"
    source = ("Paper: Ro et al., DSLA, Table 1 (Sec. 5.1, p. 7): Llama2-7B teacher, DSLA with 25% and 50% of its "
              "layers converted by chained distillation on 1.6B SlimPajama tokens; WikiText and Lambada PPL (lower "
              "is better); KV-cache size formula in Sec. 5.3 (p. 7). Ours: `fathom distill "
              "recipes/dsla/distill_quickstart.yaml` (order: entropy) of a quickstart-shaped teacher trained by "
              "`fathom train recipes/quickstart.yaml`; validation loss and PPL on the recipe's validation set "
              "(Moby Dick), KV-cache bytes saved per 1K tokens as fathom's decoder measures them.")
    orders = ("entropy",)

    def sections(self, results):
        r = results["entropy"]
        rows = [["teacher", "-", fmt(PAPER_PPL["teacher"][0], 2), fmt(PAPER_PPL["teacher"][1], 2),
                 fmt(r.teacher_loss), fmt(r.teacher_ppl, 2), "-", "0 (of " + f"{r.teacher_kv:,.0f})"]]
        for f in FRACTIONS:
            m = r.at(f)
            rows.append([f"DSLA {percent(f)}", f"{m.k}: {', '.join(map(str, m.layers))}", fmt(PAPER_PPL[f][0], 2),
                         fmt(PAPER_PPL[f][1], 2), fmt(m.loss), fmt(m.ppl, 2), signed(m.ppl - r.teacher_ppl, 2),
                         f"{m.kv_saved:,.0f} ({m.kv_saved / r.teacher_kv * 100:.0f}%)"])
        header = ["model", "layers converted", "paper WikiText PPL", "paper Lambada PPL", "ours val loss",
                  "ours val PPL", "ours PPL gap to teacher", "ours KV bytes saved / 1K tokens"]
        lo, hi = r.at(FRACTIONS[0]), r.at(FRACTIONS[1])
        p_lo, p_hi, p_t = PAPER_PPL[FRACTIONS[0]], PAPER_PPL[FRACTIONS[1]], PAPER_PPL["teacher"]
        effects = [
            single("50% - 25% converted (val loss)",
                   f"{p_hi[0] - p_lo[0]:+.2f} WikiText ({math.log(p_hi[0] / p_lo[0]):+.4f} nats), "
                   f"{p_hi[1] - p_lo[1]:+.2f} Lambada PPL", 1, hi.loss - lo.loss, "nats",
                   math.log(p_hi[0] / p_lo[0])),
            single("25% converted - teacher (val loss)",
                   f"{p_lo[0] - p_t[0]:+.2f} WikiText ({math.log(p_lo[0] / p_t[0]):+.4f} nats), "
                   f"{p_lo[1] - p_t[1]:+.2f} Lambada PPL", 1, lo.loss - r.teacher_loss, "nats",
                   math.log(p_lo[0] / p_t[0])),
        ]
        return [markdown_table(header, rows, ["---", "---"] + ["---:"] * 6),
                ["Effects (one chain each, so no interval):", ""] + effects_table(effects)], effects

    def plot(self, path, results):
        from .report import plot_bars
        r = results["entropy"]
        labels = ["teacher"] + [f"DSLA {percent(f)}" for f in FRACTIONS]
        plot_bars(path, self.title, labels,
                  [("validation loss", [r.teacher_loss] + [r.at(f).loss for f in FRACTIONS], None),
                   ("KV bytes saved / 1K tokens", [0.0] + [r.at(f).kv_saved for f in FRACTIONS], None)])


ORDER_LABELS = {"entropy": "entropy (lowest first)", "sensitivity": "sensitivity (lowest loss first)",
                "random": f"random (seed {RANDOM_ORDER_SEED} shuffle)"}


class DslaOrder(DistillTable):
    name = "dsla-order"
    title = "DSLA: conversion order, entropy vs sensitivity vs random"
    source = ("Paper: Ro et al., DSLA, Sec. 4.3 and Eq. (11) (p. 5), Fig. 7 (p. 9: WikiText-2 PPL with one layer "
              "replaced, beside its attention entropy) and App. F, Fig. 13 (pp. 16-17): converting the least "
              "sensitive layers first, with attention entropy as the cheap proxy for sensitivity. The paper gives no "
              "random-order number; its column states the direction its ranking implies. Ours: `fathom distill` "
              "chains of one teacher with distill.order entropy, sensitivity, and a fixed-seed shuffle of the "
              "teacher's attention layers, the same number of layers converted at each fraction; validation loss on "
              "the recipe's validation set (Moby Dick).")
    orders = ("entropy", "sensitivity", "random")

    def sections(self, results):
        teacher = results["entropy"]
        header = ["order", "paper"]
        for f in FRACTIONS:
            header += [f"layers at {percent(f)}", f"ours val loss {percent(f)}", f"gap to teacher {percent(f)}"]
        paper = {"entropy": "proxy for sensitivity (Fig. 7, p. 9)", "sensitivity": "least sensitive first (Sec. 4.3)",
                 "random": "not reported"}
        rows = [["teacher", "-"] + ["-", fmt(teacher.teacher_loss), "-"] * len(FRACTIONS)]
        for key in self.orders:
            row = [ORDER_LABELS[key], paper[key]]
            for f in FRACTIONS:
                m = results[key].at(f)
                row += [", ".join(map(str, m.layers)), fmt(m.loss), signed(m.loss - results[key].teacher_loss)]
            rows.append(row)
        most = FRACTIONS[-1]
        effects = [single(f"{key} - random order (val loss, {percent(most)} converted)",
                          "lower (ranked order beats an arbitrary one)", -1,
                          results[key].at(most).loss - results["random"].at(most).loss, "nats", DEFAULT_SIZE)
                   for key in ("entropy", "sensitivity")]
        notes = [f"Same layers: {ORDER_LABELS[key]} converts the same set as the random order at {percent(most)}, so "
                 "any difference there is the conversion order within the chain."
                 for key in ("entropy", "sensitivity")
                 if sorted(results[key].at(most).layers) == sorted(results["random"].at(most).layers)]
        sections = [markdown_table(header, rows, ["---", "---"] + ["---", "---:", "---:"] * len(FRACTIONS)),
                    ["Effects (one chain each, so no interval):", ""] + effects_table(effects)]
        if notes:
            sections.append(notes)
        return sections, effects

    def plot(self, path, results):
        from .report import plot_bars
        labels = [f"{percent(f)} converted" for f in FRACTIONS]
        plot_bars(path, self.title, labels,
                  [(f"validation loss: {key}", [results[key].at(f).loss for f in FRACTIONS], None)
                   for key in self.orders],
                  grouped=True, reference=("teacher", results["entropy"].teacher_loss))


DISTILL_TABLES = [DslaConversion(), DslaOrder()]
