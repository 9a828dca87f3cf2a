#!/usr/bin/env python3
"""gpt-fast, the decoding peer of bench/bench_generate.cpp: its Llama Transformer (model.py of
pytorch-labs/gpt-fast, imported at run time from an unpacked archive, never copied into fathom) on the
weights of a HF LlamaForCausalLM folder (what `fathom export --format hf` writes for a norm: pre, qk_norm:
false model) or an Olmo2ForCausalLM one (fathom's OLMo2 sizes; make_olmo2 below adapts gpt-fast's modules to
OLMo2's block), its decode step compiled by torch.compile(mode="reduce-overhead", fullgraph=True) as its
generate.py compiles decode_one_token (Inductor kernels replayed as CUDA graphs), greedy, bf16.

  gpt_fast_reference.py HF_DIR --gpt-fast DIR --ids FILE [--context 128,4096] [--batch 1,8,32]
                        [--new-tokens 64] [--repeats 5] [--label NAME] [--tokens-out FILE]
                        [--tuning on|off] [--copy-mib 1024]

DIR holds gpt-fast's model.py. The prompt of each context is FILE's ids repeated until C and cut there, the
same for every sequence of a batch (bench/generate_bench_common.py, bench_generate's rules). For each context
and batch: the caches are set up for C + N positions, the prompt is read eagerly in chunks of 512 positions
(gpt-fast's prefill is not what is compared: its column prints '-'), then N - 1 decode steps as generate.py's
decode_n_tokens runs them (the compiled step, input_pos += 1, the token cloned), after 3 warm-up steps
that compile and record the graphs; each figure is the median of --repeats runs of the N - 1 steps, timed
with CUDA events, each run restarting at position C. Greedy: the step takes the argmax of the last logits
(generate.py samples; argmax is its temperature-0 limit). --tuning on sets Inductor's
coordinate_descent_tuning as generate.py does (slower compiles); compile times go to stderr.

The weights: q_proj and k_proj are permuted from HF's rotate-half RoPE layout to gpt-fast's interleaved pairs
(the permutation of gpt-fast's scripts/convert_hf_checkpoint.py, also applied to OLMo2's q and k norm gains)
and concatenated with v_proj into wqkv; a tied head shares the embedding table. Rows in bench_generate's
columns (bytes per step, the copy bandwidth it measures itself with a torch D2D copy, % of roofline);
--tokens-out writes sequence 0's N greedy ids per context and batch, for bench/compare_generate_tokens.py.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_bench_common as common  # noqa: E402

PREFILL_CHUNK = 512
WARMUP_STEPS = 3


OLMO2 = "Olmo2ForCausalLM"


def read_hf_config(hf_dir):
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    arch = (config.get("architectures") or [config.get("model_type", "?")])[0]
    if arch not in ("LlamaForCausalLM", OLMO2):
        sys.exit(f"gpt_fast_reference: {hf_dir} holds a {arch}; gpt-fast's model is Llama's, adapted here to OLMo2 "
                 "only")
    return config, arch


def rope_fields(config):
    """(theta, gpt-fast's rope_scaling dict or None) from transformers 5's rope_parameters or the older keys."""
    params = config.get("rope_parameters") or {}
    scaling = params if params else (config.get("rope_scaling") or {})
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind != "llama3":
        sys.exit(f"gpt_fast_reference: rope type '{kind}' is not one gpt-fast's model applies (default, llama3)")
    return theta, {k: scaling[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                           "original_max_position_embeddings")}


def load_safetensors(hf_dir):
    from safetensors.torch import load_file
    single = os.path.join(hf_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)
    index = json.load(open(os.path.join(hf_dir, "model.safetensors.index.json")))
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(os.path.join(hf_dir, shard)))
    return tensors


def olmo2_modules(gf):
    """OLMo2 on gpt-fast's Llama modules, each class overriding forward only (gpt-fast's attention, KV cache,
    RoPE and MLP run as they are): the block normalises each sublayer's output before adding it to the stream
    (post-norm); q and k are normalised over their whole projection width before RoPE, by a norm inside the
    q/k/v projection; and every RMSNorm multiplies by its gain in f32 before rounding, as HF's Olmo2RMSNorm does
    (gpt-fast's, like Llama's, rounds first)."""
    class Norm(gf.RMSNorm):
        def forward(self, x):
            return (self.weight * self._norm(x.float())).type_as(x)

    class QkNormedProjection(torch.nn.Module):
        def __init__(self, dim, q_width, kv_width, eps):
            super().__init__()
            self.linear = torch.nn.Linear(dim, q_width + 2 * kv_width, bias=False)
            self.q_norm, self.k_norm = Norm(q_width, eps), Norm(kv_width, eps)
            self.widths = [q_width, kv_width, kv_width]

        def forward(self, x):
            q, k, v = self.linear(x).split(self.widths, dim=-1)
            return torch.cat([self.q_norm(q), self.k_norm(k), v], dim=-1)

    class Block(gf.TransformerBlock):
        def forward(self, x, input_pos, freqs_cis, mask):
            h = x + self.attention_norm(self.attention(x, freqs_cis, mask, input_pos))
            return h + self.ffn_norm(self.feed_forward(h))

    return Norm, QkNormedProjection, Block


def make_olmo2(gf, model, args):
    """gpt-fast's Transformer (on the meta device) turned into OLMo2's, in place; attention_norm and ffn_norm
    then hold OLMo2's post_attention_layernorm and post_feedforward_layernorm."""
    Norm, QkNormedProjection, Block = olmo2_modules(gf)
    model.norm.__class__ = Norm
    for layer in model.layers:
        layer.__class__ = Block
        layer.attention_norm.__class__ = layer.ffn_norm.__class__ = Norm
        layer.attention.wqkv = QkNormedProjection(args.dim, args.n_head * args.head_dim,
                                                  args.n_local_heads * args.head_dim, args.norm_eps)


def gpt_fast_state_dict(hf, args, n_layers, tied, olmo2):
    """HF Llama or OLMo2 names -> gpt-fast's, q and k (and OLMo2's q/k norm gains) permuted to interleaved
    RoPE pairs, wqkv concatenated."""
    def interleave(w, heads):
        rows = w.view(heads, 2, args.head_dim // 2, -1).transpose(1, 2).reshape(heads * args.head_dim, -1)
        return rows.reshape(w.shape)

    sd = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    sd["output.weight"] = hf["model.embed_tokens.weight"] if tied else hf["lm_head.weight"]
    for i in range(n_layers):
        h, g = f"model.layers.{i}.", f"layers.{i}."
        wqkv = torch.cat([interleave(hf[h + "self_attn.q_proj.weight"], args.n_head),
                          interleave(hf[h + "self_attn.k_proj.weight"], args.n_local_heads),
                          hf[h + "self_attn.v_proj.weight"]])
        if olmo2:
            sd[g + "attention.wqkv.linear.weight"] = wqkv
            sd[g + "attention.wqkv.q_norm.weight"] = interleave(hf[h + "self_attn.q_norm.weight"], args.n_head)
            sd[g + "attention.wqkv.k_norm.weight"] = interleave(hf[h + "self_attn.k_norm.weight"], args.n_local_heads)
        else:
            sd[g + "attention.wqkv.weight"] = wqkv
        sd[g + "attention.wo.weight"] = hf[h + "self_attn.o_proj.weight"]
        sd[g + "feed_forward.w1.weight"] = hf[h + "mlp.gate_proj.weight"]
        sd[g + "feed_forward.w3.weight"] = hf[h + "mlp.up_proj.weight"]
        sd[g + "feed_forward.w2.weight"] = hf[h + "mlp.down_proj.weight"]
        first, second = ("post_attention", "post_feedforward") if olmo2 else ("input", "post_attention")
        sd[g + "attention_norm.weight"] = hf[h + first + "_layernorm.weight"]
        sd[g + "ffn_norm.weight"] = hf[h + second + "_layernorm.weight"]
    return sd


def load_model(gf, hf_dir, block_size, device="cuda", dtype=torch.bfloat16):
    config, arch = read_hf_config(hf_dir)
    theta, scaling = rope_fields(config)
    heads = config["num_attention_heads"]
    args = gf.ModelArgs(block_size=block_size, vocab_size=config["vocab_size"], n_layer=config["num_hidden_layers"],
                        n_head=heads, dim=config["hidden_size"], intermediate_size=config["intermediate_size"],
                        n_local_heads=config.get("num_key_value_heads") or heads, rope_base=theta,
                        norm_eps=config["rms_norm_eps"], rope_scaling=scaling)
    if config.get("head_dim", args.head_dim) != args.head_dim:
        sys.exit(f"gpt_fast_reference: head_dim {config['head_dim']} is not hidden_size / heads = {args.head_dim}, "
                 "which gpt-fast's model assumes")
    tied = bool(config.get("tie_word_embeddings", False))
    with torch.device("meta"):
        model = gf.Transformer(args)
        if arch == OLMO2:
            make_olmo2(gf, model, args)
    sd = gpt_fast_state_dict(load_safetensors(hf_dir), args, args.n_layer, tied, arch == OLMO2)
    model.load_state_dict(sd, assign=True, strict=True)
    model = model.to(device=device, dtype=dtype)
    if tied:
        model.output.weight = model.tok_embeddings.weight  # one table, as HF and fathom hold it
    return model.eval(), args, tied


def math_attention():
    """generate.py decodes with SDPA's math backend ("better for Inductor to codegen attention here")."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.MATH)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)


def decode_one_token(model, x, input_pos):
    """gpt-fast's decode step, greedy: the model at one position, the argmax of its logits."""
    logits = model(x, input_pos)
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True).to(dtype=torch.int)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("hf_dir")
    p.add_argument("--gpt-fast", required=True, help="folder with gpt-fast's model.py")
    p.add_argument("--ids", required=True)
    p.add_argument("--context", type=common.int_list, default=[128])
    p.add_argument("--batch", type=common.int_list, default=[1])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--label", default="model")
    p.add_argument("--tokens-out")
    p.add_argument("--tuning", choices=["on", "off"], default="on")
    p.add_argument("--copy-mib", type=int, default=1024)
    a = p.parse_args()
    if a.new_tokens < 2:
        sys.exit("gpt_fast_reference: --new-tokens must be >= 2 (one prefill token, then decode steps)")
    sys.path.insert(0, os.path.abspath(a.gpt_fast))
    import model as gf  # gpt-fast's model.py

    import torch._dynamo.config
    import torch._inductor.config
    # generate.py's Inductor settings; every context and batch recompiles (new cache shapes), so the
    # recompile limit is raised past the grid.
    torch._inductor.config.coordinate_descent_tuning = a.tuning == "on"
    torch._inductor.config.triton.unique_kernel_names = True
    torch._inductor.config.fx_graph_cache = True
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 256))

    ids = common.read_ids(a.ids)
    N = a.new_tokens
    model, args, tied = load_model(gf, a.hf_dir, block_size=max(a.context) + N)
    copy = common.copy_bandwidth(torch, a.copy_mib)
    print(f"gpt_fast_reference: copy bandwidth {copy / 1e9:.0f} GB/s (torch D2D copy of {a.copy_mib} MiB, "
          "read + write counted)", file=sys.stderr)
    decode = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
    tokens_out = open(a.tokens_out, "w") if a.tokens_out else None
    system = "gpt-fast, compiled decode step" + ("" if a.tuning == "on" else " (no coordinate-descent tuning)")

    for context in a.context:
        prompt_ids = common.prompt_of(ids, context)
        for batch in a.batch:
            with torch.no_grad():
                model.max_batch_size = model.max_seq_length = -1  # setup_caches keeps larger caches otherwise
                with torch.device("cuda"):
                    model.setup_caches(max_batch_size=batch, max_seq_length=context + N)
                for layer in model.layers:  # the graphs write the caches in place, at fixed addresses
                    torch._dynamo.mark_static_address(layer.attention.kv_cache.k_cache)
                    torch._dynamo.mark_static_address(layer.attention.kv_cache.v_cache)
                prompt = torch.tensor([prompt_ids] * batch, dtype=torch.int, device="cuda")
                for start in range(0, context, PREFILL_CHUNK):
                    end = min(start + PREFILL_CHUNK, context)
                    logits = model(prompt[:, start:end], torch.arange(start, end, device="cuda"))
                first = torch.argmax(logits[:, -1], dim=-1, keepdim=True).to(dtype=torch.int)
                del logits

                def steps(count):
                    """`count` decode steps from position `context`, as decode_n_tokens runs them."""
                    input_pos = torch.tensor([context], device="cuda", dtype=torch.long)
                    cur, new = first.clone(), []
                    with math_attention():
                        for _ in range(count):
                            nxt = decode(model, cur, input_pos)
                            input_pos += 1
                            new.append(nxt.clone())
                            cur = nxt.clone()
                    return new

                began = time.perf_counter()
                steps(WARMUP_STEPS)
                torch.cuda.synchronize()
                print(f"gpt_fast_reference: context {context} batch {batch}: compile and warm-up "
                      f"{time.perf_counter() - began:.1f} s", file=sys.stderr)
                times, new = [], None
                for _ in range(a.repeats):
                    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start_event.record()
                    new = steps(N - 1)
                    end_event.record()
                    torch.cuda.synchronize()
                    times.append(start_event.elapsed_time(end_event) / 1e3 / (N - 1))
                step = statistics.median(times)
                step_bytes = common.decode_step_bytes(
                    model, model.tok_embeddings.weight, tied, batch, common.mean_positions(context, N), args.n_layer,
                    args.n_local_heads, args.head_dim, 2)
                print(common.row(system, a.label, batch, context, N, None, step, step_bytes, copy), flush=True)
                if tokens_out:
                    generated = torch.cat([first] + new, dim=-1)[0].tolist()
                    common.write_ids_line(tokens_out, context, batch, generated)


if __name__ == "__main__":
    main()
