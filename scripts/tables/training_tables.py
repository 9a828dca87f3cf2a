"""The tables that train models: MoDA Tables 3 and 6, MoD's comparisons, DSLA's 1 vs 2 states.
Each lists its runs, its paper figures, and turns the finished runs into Markdown and a figure."""

from .report import Effect, fmt, markdown_table, signed

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

    def runs(self, scale):
        raise NotImplementedError

    def sections(self, m):
        raise NotImplementedError

    def plot_rows(self, m):
        return [(self.label(k), m[k]) for k in m]

    def routing_rows(self, m):
        return None

    def label(self, key):
        return key


class ModaTable3(Table):
    name = "moda-table3"
    title = "MoDA Table 3: variants at equal settings"
    source = ("Paper: Zhu et al., MoDA, Table 3 (p. 10): 700M models, 400B tokens, G = 2, T = 4096; train PPL and C4 "
              "validation PPL. Ours: the recipes in recipes/moda/table3_*.yaml; train PPL = exp(mean training loss "
              "over the last tenth of the steps), validation PPL on the recipe's validation set (Moby Dick, bytes).")
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

    def sections(self, m):
        base = m["baseline"]
        rows = []
        for key, label, _, layers, p_train, p_c4, p_down in TABLE3_ROWS:
            r = m[key]
            p_delta = p_c4 - TABLE3_ROWS[0][5]
            o_delta = r.val_ppl() - base.val_ppl()
            verdict = "" if key == "baseline" else Effect("", "", -1 if p_delta < 0 else 1, o_delta).verdict()
            rows.append([label, layers, fmt(p_train, 2), fmt(r.train_ppl(), 3), fmt(p_c4, 2), fmt(r.val_ppl(), 3),
                         "" if key == "baseline" else signed(p_delta, 2),
                         "" if key == "baseline" else signed(o_delta, 3), verdict, fmt(p_down, 2)])
        header = ["variant", "paper layers", "paper train PPL", "ours train PPL", "paper C4 PPL", "ours val PPL",
                  "paper C4 Δ vs OLMo2", "ours val Δ vs OLMo2", "direction", "paper downstream avg (not measured)"]
        effects = [
            self.effect(m, "attn_kv", "baseline", "depth KV reuse lowers validation PPL"),
            self.effect(m, "attn_kv_ffn_kv", "attn_kv", "FFN KV lowers it further"),
            self.effect(m, "attn_kv_ffn_kv", "baseline_plus2", "default MoDA beats two more layers"),
            self.effect(m, "extra_attn_kv_ffn_kv", "attn_kv_ffn_kv", "separate KV projections: a small further gain"),
        ]
        return [markdown_table(header, rows, ["---"] + ["---:"] * 7 + ["---", "---:"]),
                ["Effects (validation PPL, b - a):", ""] + effects_lines(effects)], effects

    def effect(self, m, b, a, text):
        pb = next(r[5] for r in TABLE3_ROWS if r[0] == b)
        pa = next(r[5] for r in TABLE3_ROWS if r[0] == a)
        return Effect(f"{text} ({self.label(b)} - {self.label(a)})", f"{pb - pa:+.2f} C4 PPL",
                      1 if pb > pa else -1, m[b].val_ppl() - m[a].val_ppl(), "PPL")


def effects_lines(effects):
    from .report import effects_table
    return effects_table(effects)


class ModaTable6(Table):
    name = "moda-table6"
    title = "MoDA Table 6: post-norm vs pre-norm at two depths"
    source = ("Paper: Zhu et al., MoDA, Table 6 (p. 12): FineWeb-Edu validation loss of 24- and 48-layer models "
              "(the paper has no 24-layer pre-norm row). Ours: recipes/moda/table6_*.yaml, validation loss on the "
              "recipe's validation set (Moby Dick, bytes). At tiny scale the depths are 4 and 8 layers.")

    def depth(self, paper_depth, scale):
        return {24: 4, 48: 8}[paper_depth] if scale == "tiny" else paper_depth

    def runs(self, scale):
        from .runs import Run
        runs = []
        for layers, norm in TABLE6_PAPER:
            for variant, _ in TABLE6_VARIANTS:
                sets = {"model.n_layers": self.depth(layers, scale)} if scale == "tiny" else {}
                runs.append(Run(f"L{layers}_{norm}_{variant}", f"recipes/moda/table6_L{layers}_{norm}_{variant}.yaml",
                                sets))
        self.scale = scale
        return runs

    def label(self, key):
        layers, norm, variant = key.split("_", 2)
        return f"{layers} {norm} {dict(TABLE6_VARIANTS)[variant]}"

    def sections(self, m):
        header = ["layers / norm"]
        for _, label in TABLE6_VARIANTS:
            header += [f"paper {label}", f"ours {label}"]
        rows = []
        for (layers, norm), paper in TABLE6_PAPER.items():
            row = [f"{layers} ({self.depth(layers, self.scale)} here) / {norm}-norm"]
            for i, (variant, _) in enumerate(TABLE6_VARIANTS):
                row += [fmt(paper[i]) if paper else "-", fmt(m[f"L{layers}_{norm}_{variant}"].val_loss())]
            rows.append(row)
        effects = []
        for (layers, norm), paper in TABLE6_PAPER.items():
            if paper:
                effects.append(self.effect(m, (layers, norm, "attn_kv"), (layers, norm, "baseline")))
                effects.append(self.effect(m, (layers, norm, "attn_kv_ffn_kv"), (layers, norm, "attn_kv")))
        for variant, _ in TABLE6_VARIANTS:
            effects.append(self.effect(m, (48, "post", variant), (48, "pre", variant)))
        effects.append(self.effect(m, (48, "post", "attn_kv_ffn_kv"), (24, "post", "attn_kv_ffn_kv")))
        return [markdown_table(header, rows),
                ["Effects (validation loss, b - a):", ""] + effects_lines(effects)], effects

    def effect(self, m, b, a):
        def paper(cell):
            layers, norm, variant = cell
            return TABLE6_PAPER[(layers, norm)][[v for v, _ in TABLE6_VARIANTS].index(variant)]

        def key(cell):
            return f"L{cell[0]}_{cell[1]}_{cell[2]}"
        pd = paper(b) - paper(a)
        return Effect(f"{self.label(key(b))} - {self.label(key(a))}", f"{pd:+.4f}", 1 if pd > 0 else -1,
                      m[key(b)].val_loss() - m[key(a)].val_loss())


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


class ModRouting(Table):
    name = "mod"
    title = "MoD: capacity and routing vs the dense baseline, learned vs random routing, predictor accuracy"
    source = ("Paper: Raposo et al., Mixture-of-Depths, Fig. 3-4 (isoFLOP comparisons, 60M-3B models) and Fig. 6 "
              "(causal predictor accuracy 97-99%); the paper gives curves, not a table, so its column states the "
              "reported direction. Ours: recipes/mod/*.yaml; validation loss; tokens/s is the median of the logged "
              "intervals; accuracy and recall are the causal predictor against the top-k choice at the final "
              "evaluation, mean over routed layers (always skipping scores 1 - capacity).")
    paper_sizes = {"model.d_model": 768, "model.n_heads": 12, "model.n_kv_heads": 12, "model.ffn_hidden": 3072,
                   "train.seq_len": 2048}

    def runs(self, scale):
        return runs_with([(k, "recipes/mod/" + r) for k, _, r in MOD_ROWS],
                         lambda key: dict(self.paper_sizes) if scale == "paper" else {})

    def label(self, key):
        return next(l for k, l, _ in MOD_ROWS if k == key)

    def sections(self, m):
        rows = []
        for key, label, _ in MOD_ROWS:
            r = m[key]
            predictor = key in MOD_PREDICTOR_ROWS
            rows.append([label, MOD_PAPER[key], fmt(r.val_loss()), fmt(r.train_loss()),
                         f"{r.tokens_per_second():,.0f}",
                         fmt(r.routing("accuracy"), 3) if predictor else "-",
                         fmt(r.routing("recall"), 3) if predictor else "-"])
        header = ["model", "paper", "ours val loss", "ours train loss", "ours tokens/s", "predictor accuracy",
                  "predictor recall"]
        effects = [
            Effect("isoFLOP MoD 12.5% - dense (val loss)", "lower (Fig. 4)", -1,
                   m["c12_isoflop"].val_loss() - m["dense"].val_loss()),
            Effect("random - learned routing at 12.5% (val loss)", "higher (Fig. 3)", 1,
                   m["c12_random"].val_loss() - m["c12_identity"].val_loss()),
            Effect("MoD 12.5% - dense (tokens/s, same depth)", "faster (+66% steps/s)", 1,
                   m["c12_identity"].tokens_per_second() - m["dense"].tokens_per_second(), "tok/s"),
            Effect("predictor accuracy - always-skip 0.875 (MoD 12.5% identity)", "97-99% vs 87.5% (Fig. 6)", 1,
                   m["c12_identity"].routing("accuracy") - 0.875),
        ]
        return [markdown_table(header, rows, ["---", "---"] + ["---:"] * 5),
                ["Effects (b - a):", ""] + effects_lines(effects)], effects

    def routing_rows(self, m):
        return [(self.label(k), m[k]) for k in MOD_PREDICTOR_ROWS]


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
              "from scratch (not distilled), validation loss (lower is better), so a paper gain in accuracy is "
              "expected as a lower loss here.")
    paper_sizes = {"model.size": "olmo2_1B", "model.n_kv_heads": 8, "train.seq_len": 2048}

    def runs(self, scale):
        return runs_with([(k, "recipes/dsla/" + r) for k, _, r, _ in DSLA_ROWS],
                         lambda key: dict(self.paper_sizes) if scale == "paper" else
                         dict(HEAD_DIM_64) if scale == "small" else {})

    def label(self, key):
        return next(l for k, l, _, _ in DSLA_ROWS if k == key)

    def sections(self, m):
        rows = [[label, fmt(acc, 2), fmt(m[key].val_loss()), fmt(m[key].train_loss())]
                for key, label, _, acc in DSLA_ROWS]
        header = ["model", "paper CoLA accuracy %", "ours val loss", "ours train loss"]
        effects = [
            Effect("2 states - 1 state (val loss)", "+2.22 accuracy points", -1,
                   m["2state"].val_loss() - m["1state"].val_loss()),
            Effect("2-state hybrid - all attention (val loss)", "-1.64 accuracy points vs teacher", 1,
                   m["2state"].val_loss() - m["attention"].val_loss()),
        ]
        return [markdown_table(header, rows), ["Effects (b - a):", ""] + effects_lines(effects)], effects


TABLES = [ModaTable3(), ModaTable6(), ModRouting(), DslaStates()]
