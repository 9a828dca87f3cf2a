#!/usr/bin/env python3
"""The PyTorch reference for fathom's training step: HF transformers' Olmo2ForCausalLM at fathom's named
sizes, bf16 autocast over fp32 weights, torch.compile, fused torch AdamW, gradient clipping.

  hf_train_reference.py [--steps N] [--warmup N] [--loss compiled|eager] [CONFIG...]

CONFIG is one of fathom's size names with its benchmark shape (default: all):
  olmo2_190M   d 768,  12 layers, 12 heads, FFN 3072, batch 16 x 2048 tokens
  olmo2_1B     d 2048, 16 layers, 16 heads, FFN 8192, batch  4 x 4096 tokens
(vocab 100352, untied, RoPE theta 500000, RMSNorm eps 1e-6, as layers/model_config.cpp names them).

Each step draws fresh random tokens; the loss is HF's (labels = input_ids, shifted inside the model).
--loss compiled (default) computes it inside the compiled model, so Inductor fuses the fp32 upcast of the
logits into the cross-entropy; --loss eager has the compiled model return the bf16 logits and calls HF's
loss function on them outside the graph, which materialises fp32 copies of the logits (a far higher
peak memory at a 100k vocabulary; measured on the H200 for the default only).
After the warm-up steps (the first one compiles), every step is timed with CUDA events; the median step
time gives tokens/s. MFU counts 6 N + 6 L d T FLOPs per token (N: parameters without the embedding
table, as train/measure/throughput.cpp counts them) over the H200's dense bf16 peak, 989 TFLOP/s. Peak memory
is torch.cuda.max_memory_allocated over the whole run of a config (weights, gradients, AdamW moments,
activations); held is torch.cuda.max_memory_reserved, what PyTorch's caching allocator took from the
driver (live, cached and fragmented blocks). Prints one markdown row per config, in the columns bench/bench_train_step prints.
Needs a CUDA GPU, torch and transformers (5.x).

Under torchrun (WORLD_SIZE set) it is PyTorch DDP: one process per GPU (LOCAL_RANK), NCCL, every rank at
the batch above (global batch = batch x world, each rank drawing its own tokens), the model wrapped in
DistributedDataParallel before torch.compile. Rank 0 prints one row per config with the world size, the
global tokens/s and tokens/s per GPU (median step over CUDA events, the slowest rank's event time each
step), MFU per GPU and rank 0's peak memory (the ranks hold the same tensors).
  torchrun --standalone --nproc-per-node 8 bench/hf_train_reference.py olmo2_1B
"""
import argparse
import gc
import os
import statistics

import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

PEAK_FLOPS = 989e12
VOCAB = 100352

# name: (d_model, n_layers, n_heads, ffn_hidden, batch, seq_len)
CONFIGS = {
    "olmo2_190M": (768, 12, 12, 3072, 16, 2048),
    "olmo2_1B": (2048, 16, 16, 8192, 4, 4096),
}

DDP_HEADER = ("| system | model | world | batch x seq per GPU | step ms (median) | tokens/s | tokens/s per GPU | MFU | "
              "peak GiB | held GiB |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
HEADER = ("| system | model | batch x seq | step ms (median) | tokens/s | MFU | peak GiB | held GiB |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")


def build_model(d, layers, heads, ffn, seq):
    config = Olmo2Config(vocab_size=VOCAB, hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=seq,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, attention_bias=False, initializer_range=0.02,
                         pad_token_id=None, bos_token_id=None, eos_token_id=None)
    return Olmo2ForCausalLM(config).to("cuda", dtype=torch.float32).train()


def run_config(name, steps, warmup, lr, clip, loss_mode, world):
    d, layers, heads, ffn, batch, seq = CONFIGS[name]
    torch.cuda.reset_peak_memory_stats()
    model = build_model(d, layers, heads, ffn, seq)
    weights = sum(p.numel() for p in model.parameters()) - VOCAB * d  # the lookup table does no FLOPs
    flops_per_token = 6.0 * weights + 6.0 * layers * d * seq
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    # DDP wraps the eager module first, so its gradient hooks bucket the all-reduce under compiled code.
    wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()]) \
        if world > 1 else model
    compiled = torch.compile(wrapped)

    def step():
        ids = torch.randint(0, VOCAB, (batch, seq), device="cuda")
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if loss_mode == "compiled":
                loss = compiled(input_ids=ids, labels=ids).loss
            else:
                logits = compiled(input_ids=ids).logits
                loss = model.loss_function(logits=logits, labels=ids, vocab_size=VOCAB)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        optimizer.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times_ms = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times_ms.append(start.elapsed_time(end))
    if world > 1:  # a step lasts as long as its slowest rank
        slowest = torch.tensor(times_ms, device="cuda")
        torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)
        times_ms = slowest.tolist()
    assert torch.isfinite(loss).item(), f"{name}: loss is not finite"
    median_ms = statistics.median(times_ms)
    tokens_per_s = batch * seq / (median_ms / 1e3)
    mfu = tokens_per_s * flops_per_token / PEAK_FLOPS
    peak_gib = torch.cuda.max_memory_allocated() / 2**30
    held_gib = torch.cuda.max_memory_reserved() / 2**30
    system = "HF+torch.compile" + (" (eager loss)" if loss_mode == "eager" else "")
    if world == 1:
        print(f"| {system} | {name} | {batch} x {seq} | {median_ms:.1f} | {tokens_per_s:,.0f} | "
              f"{100 * mfu:.1f}% | {peak_gib:.1f} | {held_gib:.1f} |", flush=True)
    elif torch.distributed.get_rank() == 0:
        print(f"| {system} DDP | {name} | {world} | {batch} x {seq} | {median_ms:.1f} | {world * tokens_per_s:,.0f} | "
              f"{tokens_per_s:,.0f} | {100 * mfu:.1f}% | {peak_gib:.1f} | {held_gib:.1f} |", flush=True)

    del compiled, wrapped, model, optimizer
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", choices=list(CONFIGS), metavar="CONFIG")
    parser.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps first, compile included (default 8)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--loss", choices=["compiled", "eager"], default="compiled",
                        help="HF's loss inside the compiled graph (default) or eagerly on its logits")
    parser.add_argument("--clip", type=float, default=1.0, help="max gradient norm (fathom's default 1.0)")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # torchrun: one process per GPU
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")
    rank = torch.distributed.get_rank() if world > 1 else 0
    torch.manual_seed(rank)  # each rank draws its own batches; DDP broadcasts rank 0's initial weights
    if rank == 0:
        print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
        print(HEADER if world == 1 else DDP_HEADER, flush=True)
    for name in args.configs or list(CONFIGS):
        run_config(name, args.steps, args.warmup, args.lr, args.clip, args.loss, world)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
