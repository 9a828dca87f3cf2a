"""What the generation benchmark's Python peers share with bench/bench_generate.cpp: the prompt of each
context, the bytes a decoding step must read, the copy bandwidth, the markdown row and the greedy-ids file.

The conventions are bench_generate's (see its header): the prompt of context C is the ids file repeated
until C and cut there; a step's bytes are every weight in its stored dtype (the input embedding only for
the batch's rows, the LM head whole) plus the KV cache at the mean length the measured steps attend to,
C + N // 2; the copy bandwidth is a device-to-device copy of a >= 1 GiB buffer, median of 7 samples of 5
copies, read + write bytes counted; % of roofline is (bytes / step time) / copy bandwidth.
"""
import statistics

COLUMNS = ("| system | model | batch | context | new | prefill ms | decode ms/step | decode tok/s | MB/step | GB/s "
           "| copy GB/s | % of roofline |")


def int_list(text):
    """'1,8,32' -> [1, 8, 32], each >= 1."""
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(f"expected a comma-separated list of integers >= 1, got '{text}'")
    return values


def read_ids(path):
    ids = [int(t) for t in open(path).read().split()]
    if not ids:
        raise ValueError(f"{path} holds no token ids")
    return ids


def prompt_of(ids, context):
    """The ids repeated until `context` and cut there (bench_generate's prompt)."""
    return [ids[i % len(ids)] for i in range(context)]


def mean_positions(context, new_tokens):
    """The mean length the N - 1 decoding steps after the prompt's attend to: C + 1 .. C + N - 1."""
    return context + new_tokens // 2


def decode_step_bytes(model, embedding, tied, batch, positions, n_layers, kv_heads, head_dim, cache_element_bytes):
    """What one step of an attention-only decoder reads: every parameter once (shared ones once) in its
    dtype, but of the input embedding table only the batch's rows unless it is also the head (tied), and
    K and V of every layer over `positions` positions of `batch` sequences."""
    seen, weights = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        weights += p.numel() * p.element_size()
    table = embedding.numel() * embedding.element_size()
    rows = batch * embedding.shape[1] * embedding.element_size()
    kv = 2 * n_layers * kv_heads * head_dim * cache_element_bytes * positions * batch
    return weights - (0 if tied else table) + rows + kv


def copy_bandwidth(torch, mib=1024):
    """Bytes/s of a device-to-device copy on the current GPU, read + write counted (CUDA events)."""
    n = mib << 20
    src = torch.zeros(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    samples = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        samples.append(2.0 * n * 5 / (start.elapsed_time(end) / 1e3))
    del src, dst
    torch.cuda.empty_cache()
    return statistics.median(samples)


def row(system, label, batch, context, new_tokens, prefill_s, step_s, step_bytes, copy):
    """One markdown row in bench_generate's columns; prefill_s None prints '-' (not measured)."""
    rate = step_bytes / step_s
    prefill = "-" if prefill_s is None else f"{1e3 * prefill_s:.1f}"
    return (f"| {system} | {label} | {batch} | {context} | {new_tokens} | {prefill} | {1e3 * step_s:.3f} | "
            f"{batch / step_s:.0f} | {step_bytes / 1e6:.3f} | {rate / 1e9:.1f} | {copy / 1e9:.1f} | "
            f"{100 * rate / copy:.1f} |")


def write_ids_line(out, context, batch, ids):
    """bench_generate's --tokens-out line: 'C B id id ...' (sequence 0's greedy ids)."""
    out.write(f"{context} {batch} " + " ".join(str(int(i)) for i in ids) + "\n")
    out.flush()


def read_ids_lines(path):
    """{(context, batch): [ids]} of a --tokens-out file."""
    rows = {}
    for line in open(path):
        values = [int(v) for v in line.split()]
        if len(values) >= 2:
            rows[(values[0], values[1])] = values[2:]
    return rows
