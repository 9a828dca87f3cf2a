#!/usr/bin/env python3
"""Reference timings for bench_attention: PyTorch SDPA with the flash and the cuDNN backends, causal,
bf16, at the same sizes, timed the same way (CUDA events around forward and backward, median after
warm-up). With --fathom PATH (bench_attention's --json output) it prints the comparison table.

Each backend gets its own best layout: contiguous [B, H, T, d] tensors; grouped KV heads through
enable_gqa=True where the backend accepts it, else K/V expanded to Hq heads before timing (noted).

With --table2 it times instead the shapes of the MoDA paper's Table 2 (no depth: the flash-attention
side of bench_moda_attention's table2, B = 1, d = 64): T in 4K..64K at G = 8 (Hq = 64, Hk = 8); G in
2..32 at T = 16K with Hk = 8 and Hq = 8 G; the L sweep at T = 16K, G = 8 has this one shape (no depth
here), so it is not repeated.

Usage: python3 bench/attention_reference.py [--fathom fathom.json] [--json out.json] [--max-t T] [--table2]
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SIZES = [
    ("gqa8-d64-T4K", 1, 4096, 64, 8, 64),
    ("gqa8-d64-T16K", 1, 16384, 64, 8, 64),
    ("gqa8-d64-T64K", 1, 65536, 64, 8, 64),
    ("mha-d128-B8-T2K", 8, 2048, 32, 32, 128),
]
# MoDA paper Table 2 sizes without depth: (name, B, T, Hq, Hk, d).
TABLE2_SIZES = [(f"T{T // 1024}K-G8", 1, T, 64, 8, 64) for T in (4096, 8192, 16384, 32768, 65536)] + [
    (f"T16K-G{G}", 1, 16384, 8 * G, 8, 64) for G in (2, 4, 16, 32)]
BACKENDS = [("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def forward_flops(B, T, Hq, d):
    return 2.0 * 2.0 * B * Hq * T * T * d / 2.0


def time_backend(backend, B, T, Hq, Hk, d, min_reps):
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev, dt = "cuda", torch.bfloat16

    def rand(*shape, amp):
        return ((torch.rand(*shape, generator=gen, device=dev) * 2 - 1) * amp).to(dt)

    q = rand(B, Hq, T, d, amp=2.0).requires_grad_()
    k = rand(B, Hk, T, d, amp=2.0)
    v = rand(B, Hk, T, d, amp=1.0)
    do = rand(B, Hq, T, d, amp=1.0)
    scale = 1.0 / math.sqrt(d)
    note = ""
    gqa = Hq != Hk

    def attempt(kk, vv, enable_gqa):
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, scale=scale, enable_gqa=enable_gqa)
        o.backward(do)
        torch.cuda.synchronize()

    k.requires_grad_()
    v.requires_grad_()
    kk, vv, enable = k, v, gqa
    try:
        attempt(kk, vv, enable)
    except RuntimeError:
        if not gqa:
            raise
        # This backend rejects enable_gqa: give it expanded K/V (expansion not timed).
        kk = k.detach().repeat_interleave(Hq // Hk, dim=1).requires_grad_()
        vv = v.detach().repeat_interleave(Hq // Hk, dim=1).requires_grad_()
        enable = False
        note = "K/V expanded to Hq heads"
        attempt(kk, vv, enable)

    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    fwd, bwd, total = [], [], []
    spent, rep = 0.0, -2
    while rep < min_reps or (spent < 2000 and rep < 50):
        q.grad = kk.grad = vv.grad = None
        e0.record()
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, scale=scale, enable_gqa=enable)
        e1.record()
        o.backward(do)
        e2.record()
        torch.cuda.synchronize()
        f, b = e0.elapsed_time(e1), e1.elapsed_time(e2)
        if rep >= 0:
            fwd.append(f)
            bwd.append(b)
            total.append(f + b)
            spent += f + b
        rep += 1
    del q, k, v, do, kk, vv, o
    torch.cuda.empty_cache()
    return statistics.median(fwd), statistics.median(bwd), statistics.median(total), len(total), note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fathom", help="bench_attention --json output to compare against")
    ap.add_argument("--json", help="write the reference timings here")
    ap.add_argument("--max-t", type=int, default=1 << 40)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--table2", action="store_true", help="time the MoDA paper's Table 2 shapes (no depth)")
    args = ap.parse_args()
    sizes = TABLE2_SIZES if args.table2 else SIZES

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}\n")
    results = {}
    print("| size | backend | fwd ms | bwd ms | fwd+bwd ms | fwd+bwd TFLOP/s | reps | note |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, B, T, Hq, Hk, d in sizes:
        if T > args.max_t:
            continue
        flops = 3.5 * forward_flops(B, T, Hq, d)
        for bname, backend in BACKENDS:
            try:
                f, b, t, reps, note = time_backend(backend, B, T, Hq, Hk, d, args.min_reps)
            except RuntimeError as e:
                print(f"| {name} | {bname} | - | - | - | - | 0 | failed: {str(e).splitlines()[0][:80]} |")
                continue
            results.setdefault(name, {})[bname] = {"fwd_ms": f, "bwd_ms": b, "total_ms": t, "note": note}
            print(f"| {name} | {bname} | {f:.3f} | {b:.3f} | {t:.3f} | {flops / t * 1e-9:.1f} | {reps} | {note} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)

    if args.fathom:
        with open(args.fathom) as fh:
            ours = {r["size"]: r for r in json.load(fh)}
        print("\nfathom against the references (ratio > 1: fathom is faster)\n")
        print("| size | fathom fwd+bwd ms | TFLOP/s | sdpa-flash ms | ratio | cudnn ms | ratio | "
              "fwd ratio flash / cudnn | bwd ratio flash / cudnn |")
        print("|---|---:|---:|---:|---:|---:|---:|---|---|")
        for name, B, T, Hq, Hk, d in sizes:
            if name not in ours:
                continue
            r = ours[name]
            flops = 3.5 * forward_flops(B, T, Hq, d)
            row = [name, f"{r['total_ms']:.3f}", f"{flops / r['total_ms'] * 1e-9:.1f}"]
            fr, br = [], []
            for bname, _ in BACKENDS:
                ref = results.get(name, {}).get(bname)
                if ref is None:
                    row += ["-", "-"]
                    fr.append("-")
                    br.append("-")
                    continue
                row += [f"{ref['total_ms']:.3f}", f"{ref['total_ms'] / r['total_ms']:.2f}"]
                fr.append(f"{ref['fwd_ms'] / r['fwd_ms']:.2f}")
                br.append(f"{ref['bwd_ms'] / r['bwd_ms']:.2f}")
            row += [" / ".join(fr), " / ".join(br)]
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
