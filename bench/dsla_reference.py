#!/usr/bin/env python3
"""Reference timings for bench_dsla: flash-linear-attention's chunk_gla (one gated-linear-attention state
per call) called twice, once per state, on the same q, k, v with two gates: what a two-state DSLA mixer
costs with it. Same sizes and timing as bench_dsla (bf16 q, k, v, grad_o; gates logsigmoid(x) / 16; CUDA
events around forward + backward, median after warm-up). With --fathom PATH (bench_dsla's --json output)
it prints the ratio fathom / reference per size.

The package is not a dependency of fathom: put it on PYTHONPATH (../shared/reference/README.md).
Usage: python3 bench/dsla_reference.py [--fathom fathom.json] [--sizes B8-T2048,B1-T16384]
"""
import argparse
import json
import statistics

import torch
from fla.ops.gla import chunk_gla

SIZES = {"B8-T2048": (8, 2048), "B1-T16384": (1, 16384)}
H, D = 32, 128


def timed(fn, reps=10):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fathom")
    ap.add_argument("--sizes", default="B8-T2048,B1-T16384")
    args = ap.parse_args()
    fathom = {}
    if args.fathom:
        for r in json.load(open(args.fathom)):
            if r.get("kind") == "train":
                fathom[(r["size"], r["states"])] = r["total_ms"]
    torch.manual_seed(0)
    print("| size | chunk_gla x2 fwd+bwd ms | chunk_gla x1 ms | fathom two states ms | ratio fathom / x2 |")
    print("|---|---:|---:|---:|---:|")
    for name in args.sizes.split(","):
        B, T = SIZES[name]
        mk = lambda: torch.empty(B, T, H, D, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        q, k, v, do = mk(), mk(), mk(), mk()
        gates = [torch.nn.functional.logsigmoid(torch.empty(B, T, H, D, device="cuda").uniform_(-4, 4)).div(16)
                 for _ in range(2)]
        leaves = [x.requires_grad_() for x in (q, k, v, *gates)]

        def one_state():
            o, _ = chunk_gla(q, k, v, gates[0], scale=D ** -0.5)
            o.backward(do)

        def two_states():  # o = 0.5 o1 + 0.5 o2, both states backpropagated
            o1, _ = chunk_gla(q, k, v, gates[0], scale=D ** -0.5)
            o2, _ = chunk_gla(q, k, v, gates[1], scale=D ** -0.5)
            torch.autograd.backward([o1, o2], [0.5 * do, 0.5 * do])

        t1, t2 = timed(one_state), timed(two_states)
        for x in leaves:
            x.grad = None
        f = fathom.get((name, 2))
        ratio = f"{f / t2:.2f}" if f else "-"
        print(f"| {name} | {t2:.3f} | {t1:.3f} | {f if f else '-'} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
