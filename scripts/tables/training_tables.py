"""The tables that train models: MoDA Tables 3 and 6, MoD's comparisons, DSLA's 1 vs 2 states.
Each lists its runs (one per row; tables.py repeats them over seeds), its paper figures, and turns
the finished rows (rows.Row: mean ± std over seeds) into Markdown, effects with CIs, and a figure."""

import math
from dataclasses import dataclass

from .effects import DEFAULT_SIZE, against, compare, effects_table
from .report import fmt, markdown_table
from .scales import TABLE6_DEPTHS


def val_loss(m):
    return m.val_loss()


def train_loss(m):
    return m.train_loss()


def tokens_per_second(m):
    return m.tokens_per_second()


@dataclass
class Context:
    """What a page needs besides its rows: the scale, and whether every run had the device to itself
    (throughput is shown only then)."""
    scale: str
    alone: bool = True

T3 = "recipes/moda/"
# olmo2_30M's 8 heads of 32 suit the CPU; the CUDA MoDA and DSLA kernels take head dims 64 and 128, so
# on a GPU the small scale uses 4 query / 2 KV heads of 64 (the same width and G = 2).
HEAD_DIM_64 = {"model.n_heads": 4, "model.n_kv_heads": 2}
# (key, label, recipe, paper layers, paper train PPL, paper C4 PPL, paper downstream avg); Table 3, p. 10.
TABLE3_ROWS = [
    ("baseline", "OLMo2", "table3_baseline.yaml", 36, 14.49, 18.59, 56.93),
    ("baseline_plus2", "OLMo2, two more layers", "table3_baseline_plus2_layers.yaml", 38, 14.27, 18.31, 57.11),
    ("attn_kv", "reuse attention KV", "table3_attn_kv.yaml", 36, 14.08, 18.48, 58.10),
    ("attn_kv_ffn_kv", "+ FFN KV (default)", "table3_attn_kv_ffn_kv.yaml", 36, 13.90, 18.21, 58.87),
    ("extra_attn_kv_ffn_kv", "+ separate attention KV projections", "table3_extra_attn_kv_ffn_kv.yaml",
     36, 13.83, 18.17, 58.97),
]

# (b, a, what the paper finds): the effects Table 3 tests, b - a in validation loss.
TABLE3_EFFECTS = [
    ("attn_kv", "baseline", "depth KV reuse lowers validation loss"),
    ("attn_kv_ffn_kv", "attn_kv", "FFN KV lowers it further"),
    ("attn_kv_ffn_kv", "baseline_plus2", "default MoDA beats two more layers"),
    ("extra_attn_kv_ffn_kv", "attn_kv_ffn_kv", "separate KV projections: a small further gain"),
]


def table3_c4(key):
    return next(r[5] for r in TABLE3_ROWS if r[0] == key)


# Table 6, p. 12 (FineWeb-Edu validation loss). The paper has no 24-layer pre-norm row.
TABLE6_VARIANTS = [("baseline", "OLMo2"), ("attn_kv", "+ depth KV"), ("attn_kv_ffn_kv", "+ FFN KV")]
TABLE6_PAPER = {
    (48, "pre"): (3.3800, 3.3759, 3.3656),
    (48, "post"): (3.4062, 3.3653, 3.3484),
    (24, "post"): (3.4740, 3.4537, 3.4338),
    (24, "pre"): None,
}


def runs_with(rows, sets_for_row):
    from .runs import Run
    return [Run(key, recipe, sets_for_row(key)) for key, recipe in rows]


class Table:
    name = ""
    title = ""
    source = ""
    baseline = ""  # the row whose seed-to-seed noise the page (and `tables.py noise`) reports

    def runs(self, scale):
        raise NotImplementedError

    def sections(self, rows, ctx):
        """(Markdown sections, effects) from {key: rows.Row}."""
        raise NotImplementedError

    def plot_rows(self, rows):
        return [(self.label(k), r) for k, r in rows.items()]

    def routing_rows(self, rows):
        return None

    def label(self, key):
        return key

    def effect_sizes(self, baseline_loss):
        """(effect, the paper's size in nats) of each loss effect the page tests; baseline_loss: the
        baseline's mean validation loss, for effects the paper gives relative to it."""
        raise NotImplementedError


class ModaTable3(Table):
    name = "moda-table3"
    title = "MoDA Table 3: variants at equal settings"
    source = ("Paper: Zhu et al., MoDA, Table 3 (p. 10): 700M models, 400B tokens, G = 2, T = 4096; train PPL and C4 "
              "validation PPL. Ours: the recipes in recipes/moda/table3_*.yaml; train PPL = exp(mean training loss "
              "over the last tenth of the steps), validation loss (nats) on the compared validation domain; the "
              "paper's PPL ratios are compared as log differences, ln(PPL_b / PPL_a) nats.")
    baseline = "baseline"
    paper_sizes = {"model.d_model": 1024, "model.n_heads": 16, "model.n_kv_heads": 8, "model.ffn_hidden": 4096,
                   "model.n_layers": 36, "train.seq_len": 4096}

    def runs(self, scale):
        def sets(key):
            if scale == "paper":
                s = dict(self.paper_sizes)
                if key == "baseline_plus2":
                    s["model.n_layers"] = 38
                return s
            return dict(HEAD_DIM_64) if scale == "small" else {}
        return runs_with([(r[0], T3 + r[2]) for r in TABLE3_ROWS], sets)

    def label(self, key):
        return next(r[1] for r in TABLE3_ROWS if r[0] == key)

    def sections(self, rows, ctx):
        base = rows["baseline"]
        table = []
        for key, label, _, layers, p_train, p_c4, p_down in TABLE3_ROWS:
            r = rows[key]
            delta = "" if key == "baseline" else f"{r.mean(val_loss) - base.mean(val_loss):+.4f}"
            paper_delta = "" if key == "baseline" else f"{math.log(p_c4 / TABLE3_ROWS[0][5]):+.4f}"
            table.append([label, layers, fmt(p_train, 2), fmt(math.exp(r.mean(train_loss)), 3), fmt(p_c4, 2),
                          r.cell(val_loss), fmt(math.exp(r.mean(val_loss)), 3), paper_delta, delta, fmt(p_down, 2)])
        header = ["variant", "paper layers", "paper train PPL", "ours train PPL", "paper C4 PPL",
                  "ours val loss (mean ± std)", "ours val PPL", "paper Δ ln C4 PPL vs OLMo2", "ours val loss Δ vs OLMo2",
                  "paper downstream avg (not measured)"]
        effects = [self.effect(rows, b, a, text) for b, a, text in TABLE3_EFFECTS]
        return [markdown_table(header, table, ["---"] + ["---:"] * 9),
                ["Effects (validation loss, nats):", ""] + effects_table(effects)], effects

    def effect_sizes(self, baseline_loss):
        return [(f"{text} ({self.label(b)} - {self.label(a)})", abs(math.log(table3_c4(b) / table3_c4(a))))
                for b, a, text in TABLE3_EFFECTS]

    def effect(self, rows, b, a, text):
        pb, pa = table3_c4(b), table3_c4(a)
        size = abs(math.log(pb / pa))
        return compare(f"{text} ({self.label(b)} - {self.label(a)})",
                       f"{pb - pa:+.2f} C4 PPL ({math.log(pb / pa):+.4f} nats)", 1 if pb > pa else -1,
                       rows[b], rows[a], val_loss, "nats", size)


class ModaTable6(Table):
    name = "moda-table6"
    title = "MoDA Table 6: post-norm vs pre-norm at two depths"
    source = ("Paper: Zhu et al., MoDA, Table 6 (p. 12): FineWeb-Edu validation loss of 24- and 48-layer models "
              "(the paper has no 24-layer pre-norm row). Ours: recipes/moda/table6_*.yaml, validation loss (nats) on "
              "the compared validation domain; at the tiny and reference scales the depths are scaled down "
              "(the first column names them).")
    baseline = "L24_post_baseline"

    def depth(self, paper_depth, scale):
        depths = TABLE6_DEPTHS[scale]
        return depths[paper_depth] if depths else paper_depth

    def runs(self, scale):
        from .runs import Run
        runs = []
        for layers, norm in TABLE6_PAPER:
            for variant, _ in TABLE6_VARIANTS:
                sets = {"model.n_layers": self.depth(layers, scale)} if TABLE6_DEPTHS[scale] else {}
                runs.append(Run(f"L{layers}_{norm}_{variant}", f"recipes/moda/table6_L{layers}_{norm}_{variant}.yaml",
                                sets))
        return runs

    def label(self, key):
        layers, norm, variant = key.split("_", 2)
        return f"{layers} {norm} {dict(TABLE6_VARIANTS)[variant]}"

    def sections(self, rows, ctx):
        header = ["layers / norm"]
        for _, label in TABLE6_VARIANTS:
            header += [f"paper {label}", f"ours {label} (mean ± std)"]
        table = []
        for (layers, norm), paper in TABLE6_PAPER.items():
            line = [f"{layers} ({self.depth(layers, ctx.scale)} here) / {norm}-norm"]
            for i, (variant, _) in enumerate(TABLE6_VARIANTS):
                line += [fmt(paper[i]) if paper else "-", rows[f"L{layers}_{norm}_{variant}"].cell(val_loss)]
            table.append(line)
        effects = [self.effect(rows, b, a) for b, a in self.compared()]
        return [markdown_table(header, table),
                ["Effects (validation loss, nats):", ""] + effects_table(effects)], effects

    @staticmethod
    def compared():
        """The (b, a) cells of each effect: (layers, norm, variant)."""
        pairs = []
        for (layers, norm), paper in TABLE6_PAPER.items():
            if paper:
                pairs.append(((layers, norm, "attn_kv"), (layers, norm, "baseline")))
                pairs.append(((layers, norm, "attn_kv_ffn_kv"), (layers, norm, "attn_kv")))
        pairs += [((48, "post", variant), (48, "pre", variant)) for variant, _ in TABLE6_VARIANTS]
        pairs.append(((48, "post", "attn_kv_ffn_kv"), (24, "post", "attn_kv_ffn_kv")))
        return pairs

    @staticmethod
    def paper(cell):
        layers, norm, variant = cell
        return TABLE6_PAPER[(layers, norm)][[v for v, _ in TABLE6_VARIANTS].index(variant)]

    @staticmethod
    def key(cell):
        return f"L{cell[0]}_{cell[1]}_{cell[2]}"

    def effect_sizes(self, baseline_loss):
        return [(f"{self.label(self.key(b))} - {self.label(self.key(a))}", abs(self.paper(b) - self.paper(a)))
                for b, a in self.compared()]

    def effect(self, rows, b, a):
        pd = self.paper(b) - self.paper(a)
        return compare(f"{self.label(self.key(b))} - {self.label(self.key(a))}", f"{pd:+.4f} nats",
                       1 if pd > 0 else -1, rows[self.key(b)], rows[self.key(a)], val_loss, "nats", abs(pd))


MOD_ROWS = [
    ("dense", "dense baseline (8 layers)", "mod-dense.yaml"),
    ("c12_identity", "MoD 12.5%, every other block, identity weight", "mod-c12-identity.yaml"),
    ("c12_sigmoid", "MoD 12.5%, every other block, sigmoid weight", "mod-c12-sigmoid.yaml"),
    ("c12_isoflop", "MoD 12.5%, 14 layers (isoFLOP with dense)", "mod-c12-isoflop.yaml"),
    ("c50", "MoD 50%, every other block", "mod-c50.yaml"),
    ("c12_random", "random routing 12.5%", "mod-c12-random.yaml"),
]
MOD_PAPER = {
    "dense": "isoFLOP-optimal dense control",
    "c12_identity": "best variant at 6e18 FLOPs (Fig. 3); steps +66% faster than dense",
    "c12_sigmoid": "-",
    "c12_isoflop": "isoFLOP MoD: lower loss than dense, up to 1.5% (Fig. 4)",
    "c50": "worse than 12.5% at equal FLOPs (Fig. 3)",
    "c12_random": "much worse than learned routing (Fig. 3, shown at 50%)",
}
# Runs whose causal predictor logs routing accuracy and recall.
MOD_PREDICTOR_ROWS = ["c12_identity", "c12_sigmoid", "c12_isoflop", "c50"]
# The isoFLOP gain the paper reports (Fig. 4), relative to the dense model's loss.
MOD_ISOFLOP_GAIN = 0.015
# Both capacities route every other block of the same 8 layers for the same steps, so 50% spends more FLOPs
# than 12.5%: a higher loss at 50% holds the paper's equal-FLOPs claim a fortiori, a lower one does not refute it.
MOD_CAPACITY_EFFECT = "MoD 50% - 12.5% capacity, same depth and steps (val loss)"
# What always skipping scores against a 12.5% top-k choice, and the paper's lowest predictor accuracy.
ALWAYS_SKIP_ACCURACY = 0.875
PAPER_PREDICTOR_ACCURACY = 0.97


class ModRouting(Table):
    name = "mod"
    title = "MoD: capacity and routing vs the dense baseline, learned vs random routing, predictor accuracy"
    source = ("Paper: Raposo et al., Mixture-of-Depths, Fig. 3-4 (isoFLOP comparisons, 60M-3B models) and Fig. 6 "
              "(causal predictor accuracy 97-99%); the paper gives curves, not a table, so its column states the "
              "reported direction. Ours: recipes/mod/*.yaml; validation loss (nats); tokens/s is the median of the "
              "logged intervals; accuracy and recall are the causal predictor against the top-k choice at the final "
              "evaluation, mean over routed layers (always skipping scores 1 - capacity).")
    baseline = "dense"
    paper_sizes = {"model.d_model": 768, "model.n_heads": 12, "model.n_kv_heads": 12, "model.ffn_hidden": 3072,
                   "train.seq_len": 2048}

    def runs(self, scale):
        return runs_with([(k, "recipes/mod/" + r) for k, _, r in MOD_ROWS],
                         lambda key: dict(self.paper_sizes) if scale == "paper" else {})

    def label(self, key):
        return next(l for k, l, _ in MOD_ROWS if k == key)

    def sections(self, rows, ctx):
        table = []
        for key, label, _ in MOD_ROWS:
            r = rows[key]
            predictor = key in MOD_PREDICTOR_ROWS
            line = [label, MOD_PAPER[key], r.cell(val_loss), r.cell(train_loss)]
            if ctx.alone:
                line.append(r.cell(tokens_per_second, 0))
            line += [r.cell(lambda m: m.routing("accuracy"), 3) if predictor else "-",
                     r.cell(lambda m: m.routing("recall"), 3) if predictor else "-"]
            table.append(line)
        header = ["model", "paper", "ours val loss", "ours train loss"] + (["ours tokens/s"] if ctx.alone else []) + \
            ["predictor accuracy", "predictor recall"]
        dense = rows["dense"]
        effects = [
            compare("isoFLOP MoD 12.5% - dense (val loss)", "lower, up to 1.5% (Fig. 4)", -1, rows["c12_isoflop"],
                    dense, val_loss, "nats", MOD_ISOFLOP_GAIN * dense.mean(val_loss)),
            compare("random - learned routing at 12.5% (val loss)", "higher (Fig. 3)", 1, rows["c12_random"],
                    rows["c12_identity"], val_loss, "nats", DEFAULT_SIZE),
            compare(MOD_CAPACITY_EFFECT, "higher at equal FLOPs (Fig. 3)", 1, rows["c50"], rows["c12_identity"],
                    val_loss, "nats", DEFAULT_SIZE),
            against(f"predictor accuracy - always-skip {ALWAYS_SKIP_ACCURACY} (MoD 12.5% identity)",
                    "97-99% vs 87.5% (Fig. 6)", 1, rows["c12_identity"], ALWAYS_SKIP_ACCURACY,
                    lambda m: m.routing("accuracy"), "", PAPER_PREDICTOR_ACCURACY - ALWAYS_SKIP_ACCURACY),
        ]
        if ctx.alone:
            effects.insert(2, compare("MoD 12.5% - dense (tokens/s, same depth)", "faster (+66% steps/s)", 1,
                                      rows["c12_identity"], dense, tokens_per_second, "tok/s"))
        notes = ["The capacity effect is not isoFLOP: both capacities route every other block of the same 8 "
                 "layers for the same steps, so 50% spends more FLOPs. A higher loss at 50% supports the paper's "
                 "equal-FLOPs claim a fortiori; a lower one would not refute it."]
        if not ctx.alone:
            notes += ["", "Throughput is left out: these runs shared the device with others (--jobs above 1), so their "
                         "tokens/s do not compare MoD's step time with the dense model's. Run the table with --jobs 1 "
                         "for it."]
        return [markdown_table(header, table, ["---", "---"] + ["---:"] * (len(header) - 2)),
                ["Effects:", ""] + effects_table(effects), notes], effects

    def routing_rows(self, rows):
        return [(self.label(k), rows[k]) for k in MOD_PREDICTOR_ROWS]

    def effect_sizes(self, baseline_loss):
        return [("isoFLOP MoD 12.5% - dense (val loss)", MOD_ISOFLOP_GAIN * baseline_loss),
                ("random - learned routing at 12.5% (val loss)", DEFAULT_SIZE),
                (MOD_CAPACITY_EFFECT, DEFAULT_SIZE)]


DSLA_ROWS = [
    ("attention", "all attention (teacher-like baseline)", "attention_baseline.yaml", 82.83),
    ("1state", "hybrid, 1 state", "hybrid_1state.yaml", 78.97),
    ("2state", "hybrid, 2 states", "hybrid_2state.yaml", 81.19),
]


class DslaStates(Table):
    name = "dsla-states"
    title = "DSLA: one vs two states"
    source = ("Paper: Ro et al., DSLA, Table 5 (p. 8): CoLA validation accuracy of Llama-3.2-1B-Instruct converted "
              "with 1 or 2 states, and the teacher (higher is better). Ours: recipes/dsla/*.yaml, hybrids trained "
              "from scratch (not distilled), validation loss (nats, lower is better), so a paper gain in accuracy is "
              f"expected as a lower loss here; the paper gives no loss difference, so the effect size checked is "
              f"{DEFAULT_SIZE} nats.")
    baseline = "attention"
    paper_sizes = {"model.size": "olmo2_1B", "model.n_kv_heads": 8, "train.seq_len": 2048}

    def runs(self, scale):
        return runs_with([(k, "recipes/dsla/" + r) for k, _, r, _ in DSLA_ROWS],
                         lambda key: dict(self.paper_sizes) if scale == "paper" else
                         dict(HEAD_DIM_64) if scale == "small" else {})

    def label(self, key):
        return next(l for k, l, _, _ in DSLA_ROWS if k == key)

    def sections(self, rows, ctx):
        table = [[label, fmt(acc, 2), rows[key].cell(val_loss), rows[key].cell(train_loss)]
                 for key, label, _, acc in DSLA_ROWS]
        header = ["model", "paper CoLA accuracy %", "ours val loss (mean ± std)", "ours train loss"]
        effects = [
            compare("2 states - 1 state (val loss)", "+2.22 accuracy points", -1, rows["2state"], rows["1state"],
                    val_loss, "nats", DEFAULT_SIZE),
            compare("2-state hybrid - all attention (val loss)", "-1.64 accuracy points vs teacher", 1,
                    rows["2state"], rows["attention"], val_loss, "nats", DEFAULT_SIZE),
        ]
        return [markdown_table(header, table), ["Effects:", ""] + effects_table(effects)], effects

    def effect_sizes(self, baseline_loss):
        return [("2 states - 1 state (val loss)", DEFAULT_SIZE),
                ("2-state hybrid - all attention (val loss)", DEFAULT_SIZE)]


TABLES = [ModaTable3(), ModaTable6(), ModRouting(), DslaStates()]
