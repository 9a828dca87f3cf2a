"""fathom's decoder in plain PyTorch: the math of a fathom model, for the remote-code export.

`fathom export --format hf` writes this file into the export folder beside modeling_fathom.py (the
thin transformers wrapper), config.json and model.safetensors. It needs only torch, so it can be
checked without transformers. Parameter names are fathom's (model.embed_tokens.weight,
model.layers.{i}.self_attn.q_proj.weight, ...), so a state dict loads as saved.

What it computes, as fathom does (fp32 throughout on the CPU):
  block, norm post:  h = x + norm_attn(mix(x));  out = h + norm_ffn(mlp(h))
  block, norm pre:   h = x + mix(norm_attn(x));  out = h + mlp(norm_ffn(h))
  attention: q/k/v projections, RMSNorm on q and k over the full width (qk_norm), RoPE (rotate-half,
    angles in float64), causal softmax with GQA. MoDA adds, per token, the depth slots earlier blocks
    wrote for that token to the same softmax (one softmax over both).
  MoD: a routed block runs only on chosen tokens (top-k over the sequence, or a causal router per
    token), at their original positions, out = (1 - w) x + w block(x) on those rows.
  dsla: two gated linear-attention states (or one) per head, mixed by gamma = sigmoid(c); no RoPE,
    no softmax; k and v broadcast from their KV head to the query heads of its group.
Decoding keeps a FathomCache: attention K/V (a routed block keeps one per sequence, holding only the
tokens routed through it), dsla states; MoDA adds nothing to it (a token reads its own slots only).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

MODA_VARIANTS = ("none", "attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv")
DEPTH_KEYS = ("writer", "reader")
LAYER_KINDS = ("attention", "dsla")
MOD_ROUTINGS = ("topk", "causal")
DSLA_GATE_SCALE = 1.0 / 16  # g = logsigmoid(z) / 16 (GLA's gate normaliser)


def _choice(section, key, value, choices):
    if value not in choices:
        raise ValueError(f"fathom config: {section}.{key} is {value!r}; the choices are {', '.join(choices)}")
    return value


def _positive_int(key, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"fathom config: {key} must be a positive integer, got {value!r}")
    return value


class FathomSpec:
    """The model's shape and options, read from config.json: the standard size keys and the "fathom"
    section that `fathom export` writes. Anything missing or out of range is a ValueError naming it."""

    def __init__(self, config):
        def need(key):
            if key not in config:
                raise ValueError(f"fathom config: '{key}' is missing")
            return config[key]

        self.d_model = _positive_int("hidden_size", need("hidden_size"))
        self.n_layers = _positive_int("num_hidden_layers", need("num_hidden_layers"))
        self.n_heads = _positive_int("num_attention_heads", need("num_attention_heads"))
        self.n_kv_heads = _positive_int("num_key_value_heads", need("num_key_value_heads"))
        self.ffn_hidden = _positive_int("intermediate_size", need("intermediate_size"))
        self.vocab_size = _positive_int("vocab_size", need("vocab_size"))
        self.norm_eps = float(need("rms_norm_eps"))
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"fathom config: hidden_size {self.d_model}, num_attention_heads {self.n_heads} and "
                             f"num_key_value_heads {self.n_kv_heads} give no even head size shared by whole groups")
        self.head_dim = self.d_model // self.n_heads
        f = need("fathom")
        if not isinstance(f, dict):
            raise ValueError("fathom config: 'fathom' must be an object")

        def section(name):
            value = f.get(name)
            if not isinstance(value, dict):
                raise ValueError(f"fathom config: fathom.{name} must be an object")
            return value

        self.norm = _choice("fathom", "norm", f.get("norm"), ("post", "pre"))
        self.qk_norm = bool(f.get("qk_norm"))
        self.tie_embeddings = bool(f.get("tie_embeddings"))
        rope = section("rope")
        self.rope_theta = float(rope.get("theta", 0))
        if self.rope_theta <= 0:
            raise ValueError(f"fathom config: fathom.rope.theta must be positive, got {rope.get('theta')!r}")
        self.rope_scaling = dict(rope.get("scaling") or {"type": "none"})
        _choice("fathom.rope", "scaling.type", self.rope_scaling.get("type"), ("none", "llama3"))
        self.layer_kinds = list(f.get("layers") or [])
        if len(self.layer_kinds) != self.n_layers:
            raise ValueError(f"fathom config: fathom.layers lists {len(self.layer_kinds)} kinds for "
                             f"{self.n_layers} layers")
        for kind in self.layer_kinds:
            _choice("fathom", "layers[]", kind, LAYER_KINDS)
        moda = section("moda")
        self.moda_variant = _choice("fathom.moda", "variant", moda.get("variant"), MODA_VARIANTS)
        self.depth_key = _choice("fathom.moda", "depth_key", moda.get("depth_key"), DEPTH_KEYS)
        self.max_slots = int(moda.get("max_slots", 0))
        if self.max_slots < 0:
            raise ValueError(f"fathom config: fathom.moda.max_slots must be >= 0, got {self.max_slots}")
        mod = section("mod")
        self.mod_capacity = float(mod.get("capacity", 0))
        if not 0 <= self.mod_capacity <= 1:
            raise ValueError(f"fathom config: fathom.mod.capacity must be in [0, 1], got {self.mod_capacity}")
        self.mod_every = _positive_int("fathom.mod.every", mod.get("every", 2))
        self.mod_router_weight = _choice("fathom.mod", "router_weight", mod.get("router_weight"),
                                         ("identity", "sigmoid"))
        self.mod_causal = _choice("fathom.mod", "causal", mod.get("causal"), ("predictor", "aux_loss"))
        dsla = section("dsla")
        self.dsla_states = dsla.get("states")
        if self.dsla_states not in (1, 2):
            raise ValueError(f"fathom config: fathom.dsla.states must be 1 or 2, got {self.dsla_states!r}")
        self.dsla_gamma = _choice("fathom.dsla", "gamma", dsla.get("gamma"), ("layer", "head"))

    @property
    def moda(self):
        return self.moda_variant != "none"

    @property
    def ffn_depth_writer(self):
        return self.moda_variant in ("attn_kv+ffn_kv", "extra_attn_kv+ffn_kv")

    @property
    def extra_attention_writer(self):
        return self.moda_variant == "extra_attn_kv+ffn_kv"

    def routes(self, layer):
        """Whether block `layer` is MoD-routed (block 0 never is)."""
        return self.mod_capacity > 0 and layer > 0 and (layer + 1) % self.mod_every == 0

    def tokens_routed(self, seq_len):
        return min(max(math.ceil(self.mod_capacity * seq_len), 1), seq_len)


# ---- numerics -------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        # The mean square in float64, as fathom's kernels; the product in x's dtype.
        rstd = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype)
        return x * rstd * self.weight


def rope_inverse_frequencies(head_dim, theta, scaling):
    """theta^(-2i/d) (Python floats: float64), rescaled by Llama 3's rule when scaling["type"] is llama3."""
    inv = [theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]
    if scaling.get("type", "none") == "none":
        return tuple(inv)
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = float(scaling["original_max_position"])
    out = []
    for f in inv:
        wavelength = 2 * math.pi / f
        if wavelength < context / high:
            out.append(f)
        elif wavelength > context / low:
            out.append(f / factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return tuple(out)


def rope(x, positions, inv_freq):
    """Rotate-half RoPE of x [B, T, H, d] at positions [T] or [B, T]; angles and cos/sin in float64."""
    inv_freq = torch.tensor(inv_freq, dtype=torch.float64, device=positions.device)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq
    cos = angles.cos().to(x.dtype)
    sin = angles.sin().to(x.dtype)
    if positions.dim() == 1:
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [B or 1, T, 1, d/2]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def joint_attention(q, k, v, past, depth_k, depth_v, scale):
    """Causal GQA softmax attention of q [B, T, Hq, d] (the last T of P = past + T positions) over
    k, v [B, P, Hk, d]; with depth slots [B, T, S, Hk, d] every token also reads its own S slots in the
    same softmax. Returns [B, T, Hq * d]."""
    B, T, Hq, d = q.shape
    Hk = k.shape[2]
    dtype = q.dtype
    q, k, v = q.float(), k.float(), v.float()  # scores and softmax in fp32 whatever the weights' dtype
    if depth_k is not None:
        depth_k, depth_v = depth_k.float(), depth_v.float()
    qg = q.reshape(B, T, Hk, Hq // Hk, d)
    scores = torch.einsum("bthgd,bjhd->bhgtj", qg, k) * scale
    query_at = torch.arange(T, device=q.device).unsqueeze(1) + past
    key_at = torch.arange(k.shape[1], device=q.device).unsqueeze(0)
    scores = scores.masked_fill(key_at > query_at, float("-inf"))
    if depth_k is not None:
        scores = torch.cat((scores, torch.einsum("bthgd,btshd->bhgts", qg, depth_k) * scale), dim=-1)
    p = torch.softmax(scores, dim=-1)
    o = torch.einsum("bhgtj,bjhd->bthgd", p[..., : k.shape[1]], v)
    if depth_k is not None:
        o = o + torch.einsum("bhgts,btshd->bthgd", p[..., k.shape[1]:], depth_v)
    return o.reshape(B, T, Hq * d).to(dtype)


# ---- MoDA's depth stream ---------------------------------------------------------------------------

class DepthStream:
    """The depth K/V slots of one forward's tokens, [B, T, Hk, d] each, in the order blocks write them."""

    def __init__(self):
        self.keys, self.values = [], []

    def write(self, k, v):
        self.keys.append(k)
        self.values.append(v)

    def __len__(self):
        return len(self.keys)

    def read(self, begin, key_norm):
        """Slots [begin, written) as [B, T, S, Hk, d] (None when there are none); with reader keys each
        slot's key goes through the reader's k-norm (over its full KV width)."""
        if begin >= len(self.keys):
            return None, None
        keys = self.keys[begin:]
        if key_norm is not None:
            keys = [key_norm(k.flatten(2)).view(k.shape) for k in keys]
        return torch.stack(keys, dim=2), torch.stack(self.values[begin:], dim=2)


def first_read_slot(written, max_slots):
    return max(0, written - max_slots) if max_slots > 0 else 0


# ---- layers -----------------------------------------------------------------------------------------

def _linear(n_in, n_out, bias=False):
    return nn.Linear(n_in, n_out, bias=bias)


class AttentionCache:
    def __init__(self):
        self.k = self.v = None

    @property
    def length(self):
        return 0 if self.k is None else self.k.shape[1]

    def extend(self, k, v):
        self.k = k if self.k is None else torch.cat((self.k, k), dim=1)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=1)
        return self.k, self.v


class ProjectedMixer(nn.Module):
    """q/k/v/o projections and the optional full-width q and k norms (attention's and dsla's)."""

    def __init__(self, spec):
        super().__init__()
        q_width, kv_width = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = spec.n_heads, spec.n_kv_heads, spec.head_dim
        self.q_proj = _linear(spec.d_model, q_width)
        self.k_proj = _linear(spec.d_model, kv_width)
        self.v_proj = _linear(spec.d_model, kv_width)
        self.o_proj = _linear(q_width, spec.d_model)
        if spec.qk_norm:
            self.q_norm = RMSNorm(q_width, spec.norm_eps)
            self.k_norm = RMSNorm(kv_width, spec.norm_eps)
        else:
            self.q_norm = self.k_norm = None


class Attention(ProjectedMixer):
    def __init__(self, spec):
        super().__init__(spec)
        self.reader_keys = spec.depth_key == "reader"
        self.max_slots = spec.max_slots
        # A plain tuple, not a buffer: transformers may build the module on the meta device.
        self.inv_freq = rope_inverse_frequencies(spec.head_dim, spec.rope_theta, spec.rope_scaling)

    def forward(self, x, positions, depth=None, write=False, cache=None):
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        raw_k = k.view(B, T, self.n_kv_heads, self.head_dim)  # what a reader-keys slot holds
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = rope(q.view(B, T, self.n_heads, self.head_dim), positions, self.inv_freq)
        k = rope(k.view(B, T, self.n_kv_heads, self.head_dim), positions, self.inv_freq)
        v = v.view(B, T, self.n_kv_heads, self.head_dim)
        past = cache.length if cache is not None else 0
        all_k, all_v = cache.extend(k, v) if cache is not None else (k, v)
        depth_k = depth_v = None
        if depth is not None:
            key_norm = self.k_norm if self.reader_keys else None
            depth_k, depth_v = depth.read(first_read_slot(len(depth), self.max_slots), key_norm)
        o = joint_attention(q, all_k, all_v, past, depth_k, depth_v, 1.0 / math.sqrt(self.head_dim))
        if depth is not None and write:
            depth.write(raw_k if self.reader_keys else k, v)
        return self.o_proj(o)

    def new_cache(self):
        return AttentionCache()


class DslaGate(nn.Module):
    def __init__(self, d_model, width):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width, d_model))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return F.logsigmoid(F.linear(x, self.weight) + self.bias) * DSLA_GATE_SCALE


class DslaCache:
    def __init__(self):
        self.states = None  # per state [B, H, d_key, d_value], float32
        self.length = 0


class Dsla(ProjectedMixer):
    def __init__(self, spec):
        super().__init__(spec)
        width = spec.n_heads * spec.head_dim
        self.gate1_proj = DslaGate(spec.d_model, width)
        if spec.dsla_states == 2:
            self.gate2_proj = DslaGate(spec.d_model, width)
            self.gamma_logit = nn.Parameter(torch.zeros(spec.n_heads if spec.dsla_gamma == "head" else 1))
        else:
            self.gate2_proj = None

    def forward(self, x, positions, depth=None, write=False, cache=None):
        B, T, _ = x.shape
        H, Hk, d = self.n_heads, self.n_kv_heads, self.head_dim
        q, k = self.q_proj(x), self.k_proj(x)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, H, d).float()
        # GQA: each KV head serves the H / Hk query heads of its group.
        k = k.view(B, T, Hk, d).repeat_interleave(H // Hk, dim=2).float()
        v = self.v_proj(x).view(B, T, Hk, d).repeat_interleave(H // Hk, dim=2).float()
        gates = [self.gate1_proj(x).view(B, T, H, d).float()]
        weights = [torch.ones(H, device=x.device)]
        if self.gate2_proj is not None:
            gamma = torch.sigmoid(self.gamma_logit.float()).expand(H)
            gates.append(self.gate2_proj(x).view(B, T, H, d).float())
            weights = [gamma, 1 - gamma]
        states = cache.states if cache is not None and cache.states is not None else \
            [x.new_zeros(B, H, d, d, dtype=torch.float32) for _ in gates]
        scale = 1.0 / math.sqrt(d)
        outputs = []
        for t in range(T):  # S <- diag(exp(g_t)) S + k_t^T v_t;  o_t = scale q_t (w1 S1 + w2 S2)
            kv = k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
            states = [g[:, t].exp().unsqueeze(-1) * s + kv for g, s in zip(gates, states)]
            mixed = sum(w.view(1, H, 1, 1) * s for w, s in zip(weights, states))
            outputs.append(scale * torch.einsum("bhc,bhce->bhe", q[:, t], mixed))
        if cache is not None:
            cache.states, cache.length = states, cache.length + T
        return self.o_proj(torch.stack(outputs, dim=1).reshape(B, T, H * d).to(x.dtype))

    def new_cache(self):
        return DslaCache()


MIXERS = {"attention": Attention, "dsla": Dsla}


class MLP(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.gate_proj = _linear(spec.d_model, spec.ffn_hidden)
        self.up_proj = _linear(spec.d_model, spec.ffn_hidden)
        self.down_proj = _linear(spec.ffn_hidden, spec.d_model)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DepthKV(nn.Module):
    """A MoDA depth writer of its own (the FFN side, or the extra attention side): k and v projections of
    the sublayer input; with writer keys the k gets its own norm and RoPE (theta only, no scaling)."""

    def __init__(self, spec):
        super().__init__()
        width = spec.n_kv_heads * spec.head_dim
        self.n_kv_heads, self.head_dim = spec.n_kv_heads, spec.head_dim
        self.k_proj = _linear(spec.d_model, width)
        self.v_proj = _linear(spec.d_model, width)
        self.k_norm = RMSNorm(width, spec.norm_eps) if spec.depth_key == "writer" else None
        self.inv_freq = rope_inverse_frequencies(spec.head_dim, spec.rope_theta, {})

    def write(self, depth, x, positions):
        B, T, _ = x.shape
        k = self.k_proj(x)
        if self.k_norm is not None:
            k = rope(self.k_norm(k).view(B, T, self.n_kv_heads, self.head_dim), positions, self.inv_freq)
        depth.write(k.view(B, T, self.n_kv_heads, self.head_dim),
                    self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim))


class Block(nn.Module):
    def __init__(self, spec, layer):
        super().__init__()
        self.pre_norm = spec.norm == "pre"
        self.self_attn = MIXERS[spec.layer_kinds[layer]](spec)
        self.mlp = MLP(spec)
        # HF's names: Llama's post_attention_layernorm is its pre-MLP norm, OLMo2's the attention output's.
        self.norm_names = ("input_layernorm", "post_attention_layernorm") if self.pre_norm else \
            ("post_attention_layernorm", "post_feedforward_layernorm")
        for name in self.norm_names:
            setattr(self, name, RMSNorm(spec.d_model, spec.norm_eps))
        if spec.extra_attention_writer:
            self.self_attn.depth_kv = DepthKV(spec)
        if spec.ffn_depth_writer:
            self.mlp.depth_kv = DepthKV(spec)

    def forward(self, x, positions, depth=None, write=False, cache=None, routing=None):
        write = depth is not None and write
        extra = getattr(self.self_attn, "depth_kv", None)
        ffn_writer = getattr(self.mlp, "depth_kv", None)
        attn_norm, ffn_norm = (getattr(self, name) for name in self.norm_names)
        attn_in = attn_norm(x) if self.pre_norm else x
        attn_out = self.self_attn(attn_in, positions, depth, write and extra is None, cache)
        if write and extra is not None:
            extra.write(depth, attn_in, positions)
        h = x + attn_out if self.pre_norm else x + attn_norm(attn_out)
        ffn_in = ffn_norm(h) if self.pre_norm else h
        if write and ffn_writer is not None:
            ffn_writer.write(depth, ffn_in, positions)
        ffn_out = self.mlp(ffn_in)
        return h + ffn_out if self.pre_norm else h + ffn_norm(ffn_out)

    def new_cache(self):
        return self.self_attn.new_cache()


class RoutedCache:
    """One block cache per sequence: each holds only the tokens routed through the block."""

    def __init__(self, sequences):
        self.sequences = sequences


class RoutedBlock(Block):
    """A MoD-routed block: its own parameters under the block's names, the router under mod.router and
    the causal predictor under mod.predictor.fc1 / fc2."""

    def __init__(self, spec, layer):
        super().__init__(spec, layer)
        self.spec = spec
        self.mod = nn.Module()
        self.mod.router = _linear(spec.d_model, 1)
        if spec.mod_causal == "predictor":
            self.mod.predictor = nn.Module()
            self.mod.predictor.fc1 = _linear(spec.d_model, max(1, spec.d_model // 8))
            self.mod.predictor.fc2 = _linear(max(1, spec.d_model // 8), 1)

    def _weight(self, r):
        return torch.sigmoid(r) if self.spec.mod_router_weight == "sigmoid" else r

    def _mix(self, x_rows, y_rows, r_rows):
        w = self._weight(r_rows).unsqueeze(-1).to(x_rows.dtype)
        return (1 - w) * x_rows + w * y_rows

    def forward(self, x, positions, depth=None, write=False, cache=None, routing="topk"):
        r = self.mod.router(x).squeeze(-1).float()
        if cache is not None or routing == "causal":
            return self._forward_causal(x, r, positions, cache)
        B, S, _ = x.shape
        # Top-k per sequence, ties to the lower index (a stable sort), indices ascending.
        order = torch.sort(r, dim=1, descending=True, stable=True).indices
        idx = torch.sort(order[:, : self.spec.tokens_routed(S)], dim=1).values
        rows = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[2]))
        # The chosen tokens keep their original positions; they attend causally among themselves.
        y = super().forward(rows, idx)
        out = x.clone()
        out.scatter_(1, idx.unsqueeze(-1).expand_as(rows), self._mix(rows, y, torch.gather(r, 1, idx)))
        return out

    def causal_logits(self, x, r):
        """Route a token where this is > 0: the predictor's logit, or the router's (aux_loss)."""
        if self.spec.mod_causal == "predictor":
            p = self.mod.predictor
            return p.fc2(F.silu(p.fc1(x))).squeeze(-1).float()
        return r

    def _forward_causal(self, x, r, positions, cache):
        B, T, _ = x.shape
        decide = self.causal_logits(x, r) > 0
        pos = positions.expand(B, T) if positions.dim() == 1 else positions
        out = x.clone()
        for b in range(B):
            rows = decide[b].nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue  # nothing runs the block, nothing enters its cache
            xb = x[b:b + 1, rows]
            y = super().forward(xb, pos[b:b + 1, rows], cache=None if cache is None else cache.sequences[b])
            out[b:b + 1, rows] = self._mix(xb, y, r[b:b + 1, rows])
        return out

    def new_cache(self, batch):
        return RoutedCache([self.self_attn.new_cache() for _ in range(batch)])


class FathomCache:
    """Incremental decoding state: every layer's cache and the positions read so far."""

    is_compileable = False

    def __init__(self, layers):
        self.layers = layers
        self.length = 0

    def get_seq_length(self, layer_idx=0):
        return self.length


class FathomBody(nn.Module):
    """Embeddings, blocks and the final norm: the parameters under "model."."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(
            RoutedBlock(spec, i) if spec.routes(i) else Block(spec, i) for i in range(spec.n_layers))
        self.norm = RMSNorm(spec.d_model, spec.norm_eps)

    def new_cache(self, batch):
        return FathomCache([layer.new_cache(batch) if isinstance(layer, RoutedBlock) else layer.new_cache()
                            for layer in self.layers])

    def forward(self, ids, cache=None, mod_routing="topk"):
        """ids [B, T] -> the final norm's output [B, T, d]. Without a cache: the whole sequences, MoD
        routed by mod_routing (topk as in training, or causal). With one: the next T positions of every
        sequence, which extend the cache; MoD then routes causally, as fathom's decoding does."""
        _choice("forward", "mod_routing", mod_routing, MOD_ROUTINGS)
        B, T = ids.shape
        past = cache.length if cache is not None else 0
        positions = torch.arange(past, past + T, device=ids.device)
        h = self.embed_tokens(ids)
        depth = DepthStream() if self.spec.moda else None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            h = layer(h, positions, depth, write=i < last, cache=None if cache is None else cache.layers[i],
                      routing=mod_routing)
        if cache is not None:
            cache.length += T
        return self.norm(h)


def head_weight(body, lm_head):
    """The output projection: lm_head's weight, or the embedding table when tied (no lm_head)."""
    return body.embed_tokens.weight if lm_head is None else lm_head.weight


class FathomLM(nn.Module):
    """The whole model without transformers: FathomLM(spec)(ids) -> logits [B, T, vocab]."""

    def __init__(self, spec):
        super().__init__()
        self.model = FathomBody(spec)
        self.lm_head = None if spec.tie_embeddings else _linear(spec.d_model, spec.vocab_size)

    def forward(self, ids, cache=None, mod_routing="topk"):
        return F.linear(self.model(ids, cache, mod_routing), head_weight(self.model, self.lm_head))

    def new_cache(self, batch):
        return self.model.new_cache(batch)
