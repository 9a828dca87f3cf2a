#!/usr/bin/env python3
"""The PyTorch reference for fathom's generation: HF transformers' generate on the same weights (a folder
that `fathom export --format hf` wrote), greedy, bf16, a static KV cache, and torch.compile of the forward
where it works (--compile).

  hf_generate_reference.py HF_DIR --ids FILE --max-new-tokens N [--batch B ...] [--compile] [--label NAME]

FILE holds the prompt's token ids (whitespace separated, as `fathom tokenizer encode` prints them); every
sequence of a batch is that prompt. Every run goes to exactly N new tokens (min_new_tokens = N, no EOS).
Prefill is timed as a generate of one new token; decode tokens/s is B * (N - 1) over the rest of a full
generate's time. After a warm-up generate of each length (the first compiles), each figure is the median
of --repeats runs (3), timed with CUDA events. Prints one markdown row per batch size:
  | system | model | batch | prompt | new | prefill ms | prefill tok/s | decode ms/step | decode tok/s |
"""
import argparse
import statistics

import torch
from transformers import AutoModelForCausalLM


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
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--label", default="model")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    ids = [int(t) for t in open(a.ids).read().split()]
    model = AutoModelForCausalLM.from_pretrained(a.hf_dir, dtype=torch.bfloat16).cuda().eval()
    if a.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    system = "HF generate, static cache" + (" + torch.compile" if a.compile else "")
    for batch in a.batch:
        prompt = torch.tensor([ids] * batch, device="cuda")
        mask = torch.ones_like(prompt)

        def run(n):
            with torch.no_grad():
                return model.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                      cache_implementation="static", pad_token_id=0, eos_token_id=None)

        run(a.max_new_tokens)
        run(1)
        prefill = statistics.median(timed(lambda: run(1)) for _ in range(a.repeats))
        full = statistics.median(timed(lambda: run(a.max_new_tokens)) for _ in range(a.repeats))
        step = (full - prefill) / (a.max_new_tokens - 1)
        print(f"| {system} | {a.label} | {batch} | {len(ids)} | {a.max_new_tokens} | {1e3 * prefill:.1f} | "
              f"{batch * len(ids) / prefill:,.0f} | {1e3 * step:.2f} | {batch / step:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
