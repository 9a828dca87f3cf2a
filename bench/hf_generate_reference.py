#!/usr/bin/env python3
"""The PyTorch reference for fathom's generation: HF transformers' generate on the same weights (a folder
that `fathom export --format hf` wrote), greedy, bf16, a static KV cache, and torch.compile of the forward
where it works (--compile).

  hf_generate_reference.py HF_DIR --ids FILE [--context 128,4096] [--batch 1,8,32] [--new-tokens N]
                           [--repeats 3] [--compile] [--label NAME] [--tokens-out FILE] [--copy-mib 1024]

The prompt of each context is FILE's ids (whitespace separated, as `fathom tokenizer encode` prints them)
repeated until C and cut there, the same for every sequence of a batch (bench_generate's rule; without
--context, the ids as they are). Every run goes to exactly N new tokens (min_new_tokens = N, no EOS).
Prefill is timed as a generate of one new token; a decode step is the rest of a full generate's time over
its N - 1 steps. After a warm-up generate of each length (the first compiles), each figure is the median
of --repeats runs, timed with CUDA events. Rows in bench_generate's columns, with its bytes per step
(bench/generate_bench_common.py) and the copy bandwidth measured here (torch D2D copy):
  | system | model | batch | context | new | prefill ms | decode ms/step | decode tok/s | MB/step | GB/s |
    copy GB/s | % of roofline |
--tokens-out writes sequence 0's N greedy ids per context and batch, for bench/compare_generate_tokens.py.
"""
import argparse
import os
import statistics
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_bench_common as common  # noqa: E402


def timed(fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("hf_dir")
    p.add_argument("--ids", required=True)
    p.add_argument("--context", type=common.int_list, default=None)
    p.add_argument("--batch", type=common.int_list, default=[1, 32])
    p.add_argument("--new-tokens", "--max-new-tokens", dest="new_tokens", type=int, default=256)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--label", default="model")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens-out")
    p.add_argument("--copy-mib", type=int, default=1024)
    a = p.parse_args()
    if a.new_tokens < 2:
        sys.exit("hf_generate_reference: --new-tokens must be >= 2 (one prefill token, then decode steps)")
    ids = common.read_ids(a.ids)
    model = AutoModelForCausalLM.from_pretrained(a.hf_dir, dtype=torch.bfloat16).cuda().eval()
    if a.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    copy = common.copy_bandwidth(torch, a.copy_mib)
    print(f"hf_generate_reference: copy bandwidth {copy / 1e9:.0f} GB/s (torch D2D copy of {a.copy_mib} MiB, "
          "read + write counted)", file=sys.stderr)
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    tied = bool(getattr(config, "tie_word_embeddings", False))
    tokens_out = open(a.tokens_out, "w") if a.tokens_out else None
    system = "HF generate, static cache" + (" + torch.compile" if a.compile else "")
    N = a.new_tokens
    for context in a.context or [len(ids)]:
        prompt_ids = common.prompt_of(ids, context)
        for batch in a.batch:
            prompt = torch.tensor([prompt_ids] * batch, device="cuda")
            mask = torch.ones_like(prompt)

            def run(n):
                with torch.no_grad():
                    return model.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                          do_sample=False, cache_implementation="static", pad_token_id=0,
                                          eos_token_id=None)

            generated = run(N)
            run(1)
            prefill = statistics.median(timed(lambda: run(1)) for _ in range(a.repeats))
            full = statistics.median(timed(lambda: run(N)) for _ in range(a.repeats))
            step = (full - prefill) / (N - 1)
            step_bytes = common.decode_step_bytes(model, model.get_input_embeddings().weight, tied, batch,
                                                  common.mean_positions(context, N), config.num_hidden_layers,
                                                  kv_heads, head_dim, 2)
            print(common.row(system, a.label, batch, context, N, prefill, step, step_bytes, copy), flush=True)
            if tokens_out:
                common.write_ids_line(tokens_out, context, batch, generated[0, context:].tolist())
            del generated
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
