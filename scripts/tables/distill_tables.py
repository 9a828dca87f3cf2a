"""The DSLA tables from chained distillation: 25% vs 50% of the layers converted with 2 and 1 states, and
the conversion order (entropy vs sensitivity vs random shuffles). Both read the chains of one teacher at
every seed (distill_results.Distilled) as rows over seeds, and test each effect with its 95% CI."""

import math

from .distill_chains import FOLDER, FRACTIONS, RANDOM_ORDER_SEED
from .distill_results import gather
from .distill_runs import chain_data_order, run_chains
from .effects import DEFAULT_SIZE, against, compare, effects_table
from .plateau import IMPROVING, PLATEAUED
from .report import fmt, left_out_note, markdown_table, seed_list
from .rows import Row
from .scales import COMPARED_DOMAIN, seeds

# DSLA Table 1 (p. 7): Llama2-7B teacher and DSLA (2 states) with 25% / 50% of its layers converted (lower is better).
PAPER_PPL = {"teacher": (8.79, 4.13), 0.25: (9.26, 4.14), 0.5: (9.89, 6.19)}  # (WikiText, Lambada)
# DSLA Table 5 (p. 8): CoLA accuracy of Llama-3.2-1B converted with 1 and 2 states.
PAPER_STATES = "+2.22 CoLA accuracy points with 2 states (Table 5)"
# The teacher's training and validation curve, drawn beside both pages.
TEACHER_FIGURE = "dsla-distill-teacher.png"


def percent(fraction):
    return f"{fraction * 100:g}%"


def loss(m):
    return m.loss


def ppl(m):
    return m.ppl


def gap(m):
    return m.gap()


def ppl_gap(m):
    return m.ppl_gap()


def layers_text(row):
    """The layers a row converted: one list where every seed converted the same, else each list with
    its seeds (the entropy and sensitivity rankings are measured on each seed's batches)."""
    by_layers = {}
    for seed, m in row.runs.items():
        by_layers.setdefault(tuple(m.layers), []).append(seed)
    if len(by_layers) == 1:
        return ", ".join(map(str, next(iter(by_layers))))
    return "; ".join(f"{', '.join(map(str, layers))} ({seed_list(s)})" for layers, s in by_layers.items())


class DistillTable:
    name = ""
    title = ""
    source = ""
    chains = ()  # the chain keys (distill_chains.CHAINS) this table reads

    def measure(self, fathom, repo, out, args, log):
        """Trains the teacher and runs this table's chains at args.seeds seeds (skipping complete ones).
        Returns (distill_results.Distilled, whether anything ran now)."""
        chosen = seeds(args.seeds)
        ran = run_chains(fathom, repo, out, args, self.chains, chosen, log)
        return self.read(out, repo, args.scale, args.extra, chosen), ran

    def read(self, out, repo, scale, extra, chosen):
        return gather(out, self.chains, chosen, COMPARED_DOMAIN[scale], chain_data_order(repo, scale, extra))

    def teacher_section(self, results):
        """The teacher's length, loss and plateau check (the students' gaps mean little to a teacher that is
        still improving), and its curve."""
        t = results.teacher
        check = results.plateau()
        lines = [f"Teacher: runs/{FOLDER}/teacher, {t.final_step} steps, final validation loss "
                 f"{results.teacher_loss:.4f} ({t.domain()}); plateau check: {check.text()}. Curve: "
                 f"[{TEACHER_FIGURE}]({TEACHER_FIGURE})."]
        if check.verdict == IMPROVING:
            lines += ["", "The teacher is still improving: each student's gap is to a teacher that more steps would "
                          "lower, so the gaps are not yet the paper's (a converged teacher). Train it longer (--steps) "
                          "and distill again."]
        elif check.verdict != PLATEAUED:
            lines += ["", "Too few evaluations to tell whether the teacher has plateaued."]
        if results.left_out:
            lines += ["", left_out_note("Chains", f"runs/{FOLDER}", results.seeds, results.left_out)]
        return lines

    @staticmethod
    def plot_chains(path, title, results, chains):
        """Bars of each (chain key, label) at each fraction, mean ± std over seeds, beside the teacher's loss."""
        from .report import plot_bars
        series = []
        for key, label in chains:
            rows = [results.row(key, f) for f in FRACTIONS]
            series.append((label, [r.mean(loss) for r in rows], [r.std(loss) or 0.0 for r in rows]))
        plot_bars(path, title, [f"{percent(f)} converted" for f in FRACTIONS], series, grouped=True,
                  reference=("teacher", results.teacher_loss))

    def plot_teacher(self, path, results):
        from .report import plot_loss_curves
        plot_loss_curves(path, f"DSLA distillation teacher ({results.plateau().verdict})",
                         [("teacher", Row("teacher", {0: results.teacher}))])


STATE_CHAINS = (("entropy", 2), ("entropy-1state", 1))


class DslaConversion(DistillTable):
    name = "dsla-conversion"
    title = "DSLA: 25% vs 50% of the layers converted, 2 states vs 1"
    source = ("Paper: Ro et al., DSLA, Table 1 (Sec. 5.1, p. 7): Llama2-7B teacher, DSLA with 25% and 50% of its "
              "layers converted by chained distillation on 1.6B SlimPajama tokens; WikiText and Lambada PPL (lower "
              "is better); KV-cache size formula in Sec. 5.3 (p. 7); 1 vs 2 states: Table 5 (p. 8, CoLA accuracy). "
              "Ours: `fathom distill recipes/dsla/distill_quickstart.yaml` (order: entropy; dsla.states 2, and 1) "
              "of a quickstart-shaped teacher trained by `fathom train recipes/quickstart.yaml`, one chain per seed; "
              "validation loss and PPL on the compared validation domain (Moby Dick), KV-cache bytes saved per 1K "
              "tokens as fathom's decoder measures them.")
    chains = ("entropy", "entropy-1state")

    def sections(self, results):
        teacher_kv = results.teacher_kv()
        rows = [["teacher", "-", "-", fmt(PAPER_PPL["teacher"][0], 2), fmt(PAPER_PPL["teacher"][1], 2),
                 fmt(results.teacher_loss), fmt(math.exp(results.teacher_loss), 2), "-", "-",
                 f"0 (of {teacher_kv:,.0f})"]]
        for key, states in STATE_CHAINS:
            for f in FRACTIONS:
                r = results.row(key, f)
                kv = r.mean(lambda m: m.kv_saved)
                paper = PAPER_PPL[f] if states == 2 else ("-", "-")
                rows.append([f"DSLA {percent(f)}", states, f"{r.any_run().k}: {layers_text(r)}", fmt(paper[0], 2),
                             fmt(paper[1], 2), r.cell(loss), r.cell(ppl, 2), r.cell(gap), r.cell(ppl_gap, 2),
                             f"{kv:,.0f} ({kv / teacher_kv * 100:.0f}%)"])
        header = ["model", "states", "layers converted", "paper WikiText PPL", "paper Lambada PPL",
                  "ours val loss (mean ± std)", "ours val PPL", "ours gap to teacher (val loss)",
                  "ours PPL gap to teacher", "ours KV bytes saved / 1K tokens"]
        lo, hi = FRACTIONS
        p_lo, p_hi, p_t = PAPER_PPL[lo], PAPER_PPL[hi], PAPER_PPL["teacher"]
        effects = [
            compare(f"{percent(hi)} - {percent(lo)} converted, 2 states (val loss)",
                    f"{p_hi[0] - p_lo[0]:+.2f} WikiText ({math.log(p_hi[0] / p_lo[0]):+.4f} nats), "
                    f"{p_hi[1] - p_lo[1]:+.2f} Lambada PPL", 1, results.row("entropy", hi), results.row("entropy", lo),
                    loss, "nats", math.log(p_hi[0] / p_lo[0])),
            # Each student against the teacher as its own chain measured it (the same validation batches and
            # evaluation), so the effect is the gap column's mean.
            against(f"{percent(lo)} converted, 2 states - teacher (val loss)",
                    f"{p_lo[0] - p_t[0]:+.2f} WikiText ({math.log(p_lo[0] / p_t[0]):+.4f} nats), "
                    f"{p_lo[1] - p_t[1]:+.2f} Lambada PPL", 1, results.row("entropy", lo), 0.0, gap, "nats",
                    math.log(p_lo[0] / p_t[0])),
        ] + [compare(f"2 states - 1 state, {percent(f)} converted (val loss)", PAPER_STATES, -1,
                     results.row("entropy", f), results.row("entropy-1state", f), loss, "nats", DEFAULT_SIZE)
             for f in FRACTIONS]
        notes = ["The teacher is one run, so a student's gap to it (the validation loss above the teacher's, both "
                 "measured by the student's chain on the same batches) is tested against 0 (one-sample t over the "
                 "seeds); the other effects pair the chains by seed (train.seed i gives every chain of seed i the "
                 "same batches, and each converted layer starts from the teacher's projections). The paper's "
                 "Table 1 converts with 2 states; its 1 vs 2 states comparison is a CoLA accuracy, so the size "
                 f"checked there is {DEFAULT_SIZE} nats. The 1-state chains leave out the loss's gate_cos term "
                 "(it compares the two states' gates); the rest of their loss is the recipe's."]
        return [self.teacher_section(results),
                markdown_table(header, rows, ["---", "---:", "---"] + ["---:"] * 7),
                ["Effects:", ""] + effects_table(effects), notes], effects

    def plot(self, path, results):
        self.plot_chains(path, "DSLA 25% vs 50% converted, 2 vs 1 states: validation loss, mean ± std over seeds",
                         results, [(key, f"{states} state{'s' if states > 1 else ''} (entropy order)")
                                   for key, states in STATE_CHAINS])


ORDER_LABELS = {"entropy": "entropy (lowest first)", "sensitivity": "sensitivity (lowest loss first)",
                "random": "random (shuffle i at seed i)"}
ORDER_PAPER = {"entropy": "proxy for sensitivity (Fig. 7, p. 9)", "sensitivity": "least sensitive first (Sec. 4.3)",
               "random": "not reported"}
RANKED = ("entropy", "sensitivity")


class DslaOrder(DistillTable):
    name = "dsla-order"
    title = "DSLA: conversion order, entropy vs sensitivity vs random"
    source = ("Paper: Ro et al., DSLA, Sec. 4.3 and Eq. (11) (p. 5), Fig. 7 (p. 9: WikiText-2 PPL with one layer "
              "replaced, beside its attention entropy) and App. F, Fig. 13 (pp. 16-17): converting the least "
              "sensitive layers first, with attention entropy as the cheap proxy for sensitivity. The paper gives no "
              "random-order number; its column states the direction its ranking implies. Ours: `fathom distill` "
              "chains of one teacher with distill.order entropy, sensitivity, and at seed i shuffle i of the "
              f"teacher's attention layers (random.Random({RANDOM_ORDER_SEED} + i)), the same number of layers "
              "converted at each fraction, one chain per order and seed; validation loss on the compared validation "
              "domain (Moby Dick).")
    chains = ("entropy", "sensitivity", "random")

    def sections(self, results):
        header = ["order", "paper"]
        for f in FRACTIONS:
            header += [f"layers at {percent(f)}", f"ours val loss {percent(f)}", f"gap to teacher {percent(f)}"]
        rows = [["teacher", "-"] + ["-", fmt(results.teacher_loss), "-"] * len(FRACTIONS)]
        for key in self.chains:
            row = [ORDER_LABELS[key], ORDER_PAPER[key]]
            for f in FRACTIONS:
                r = results.row(key, f)
                row += [layers_text(r), r.cell(loss), r.cell(gap)]
            rows.append(row)
        effects = []
        for f in FRACTIONS:
            effects += [compare(f"{key} - random order, {percent(f)} converted (val loss)",
                                "lower (ranked order beats an arbitrary one)", -1, results.row(key, f),
                                results.row("random", f), loss, "nats", DEFAULT_SIZE) for key in RANKED]
        effects += [compare(f"entropy - sensitivity order, {percent(f)} converted (val loss)",
                            "not higher (entropy stands in for sensitivity, Sec. 4.3, Fig. 7)", -1,
                            results.row("entropy", f), results.row("sensitivity", f), loss, "nats", DEFAULT_SIZE)
                    for f in FRACTIONS]
        shuffles = ["Random orders (shuffle i of the attention layers, distilled at seed i, so it pairs with the "
                    "ranked orders' chain of seed i):", ""] + \
                   [f"- seed {s}: random.Random({RANDOM_ORDER_SEED + s}): {', '.join(map(str, order))}"
                    for s, order in results.shuffles.items()]
        notes = ["entropy - sensitivity: the paper ranks layers by sensitivity and converts in attention-entropy "
                 "order as its cheap proxy, claiming the two agree (Fig. 7). A faithful proxy gives a CI around 0 "
                 "(unresolved) or one below it (the proxy does better still: reproduced); 'contradicted' means the "
                 "entropy order loses measurably more than the order it stands in for."] + \
            self.same_layer_notes(results)
        return [self.teacher_section(results),
                markdown_table(header, rows, ["---", "---"] + ["---", "---:", "---:"] * len(FRACTIONS)),
                ["Effects:", ""] + effects_table(effects), shuffles, notes], effects

    @staticmethod
    def same_layer_notes(results):
        """Where a ranked order and seed i's shuffle convert the same set at a fraction, the difference there
        is the order within the chain alone; in the same order, the chains are the same distillation."""
        notes = []
        for key in RANKED:
            for f in FRACTIONS:
                ranked, shuffled = results.row(key, f), results.row("random", f)
                same_set = [s for s in ranked.seeds if sorted(ranked.runs[s].layers) == sorted(shuffled.runs[s].layers)]
                same_order = [s for s in same_set if ranked.runs[s].layers == shuffled.runs[s].layers]
                if same_set:
                    notes += ["", f"Same layers at {percent(f)}: {ORDER_LABELS[key]} converts the same set as the "
                                  f"random shuffle at {seed_list(same_set)}, so any difference there is the conversion "
                                  "order within the chain."]
                if same_order:
                    notes[-1] += (f" At {seed_list(same_order)} the order is the same too: those chains are the same "
                                  "distillation, and their difference is 0 up to the device's nondeterminism.")
        return notes

    def plot(self, path, results):
        self.plot_chains(path, "DSLA conversion order: validation loss, mean ± std over seeds", results,
                         [(key, ORDER_LABELS[key]) for key in self.chains])


DISTILL_TABLES = [DslaConversion(), DslaOrder()]
