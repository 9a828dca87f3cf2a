#!/usr/bin/env python3
"""Where the GPU sat idle, and on what it was busy, in a timeline from timeline_injection.cpp.

With --steps the window is cut into training steps, from one AdamW kernel's end to the next one's
(host work between steps included); the last N are kept. With --decode-steps the last N decoding steps
(each from one embedding_forward_kernel's start to the next one's) are reported instead, as each kernel's cost
per step: how much later than all the work ahead of it it ends (kernels that overlap the one ahead, as
dependent launches do, cost only what they add), and the idle time; medians over the steps. With --launches as well,
each launch of a step in order, its duration and cost, the block of launches that repeats (a model's layers) folded
into one row per place in the block.
  python3 gaps.py timeline.csv [--steps 3 | --skip-fraction 0.5 | --decode-steps 12 [--launches]] [--min-us 5]
"""
import argparse, collections, csv, statistics


def short(name, n=90):
    """A kernel's own name: a mangled C++ name (_ZN...) read up to its function's identifier, namespaces and
    template arguments left out."""
    name = name.split("(")[0]
    if name.startswith("_ZN"):
        i, parts = 3, []
        while i < len(name) and name[i].isdigit():
            j = i
            while j < len(name) and name[j].isdigit():
                j += 1
            parts.append(name[j:j + int(name[i:j])])
            i = j + int(name[i:j])
        if parts and parts[-1]:
            name = parts[-1]
    return name[:n]


def load(path):
    device, api = [], []
    with open(path) as f:
        for row in csv.DictReader(f):
            item = (int(row["start_ns"]), int(row["end_ns"]), row["kind"], row["name"])
            (api if row["kind"] == "A" else device).append(item)
    return sorted(device), sorted(api)


def step_windows(device, n):
    ends = [d[1] for d in device if "adamw" in d[3]]
    return list(zip(ends[:-1], ends[1:]))[-n:]


def decode_steps(device, n):
    """The last n decoding steps, each from one embedding kernel's start to the next's: (launches, length), where a
    launch is (name, duration, cost) and its cost is how much later than all the work ahead of it in the step it ends
    (a kernel that overlaps the one ahead, as a dependent launch does, costs only what it adds)."""
    starts = [i for i, d in enumerate(device) if short(d[3]) == "embedding_forward_kernel"]
    steps = list(zip(starts[:-1], starts[1:]))[-n:]
    if not steps:
        raise SystemExit("fewer than two embedding kernels, so no decoding step to cut out")
    out = []
    for first, after in steps:
        launches, end = [], device[first][0]
        for s, e, _, name in device[first:after]:
            launches.append((short(name, 70), e - s, max(0, e - max(s, end))))
            end = max(end, e)
        out.append((launches, device[after][0] - device[first][0]))
    return out


def decode_step_costs(device, n):
    steps = decode_steps(device, n)
    costs, lengths = collections.defaultdict(list), []
    for launches, length in steps:
        cost = collections.Counter()
        for name, _, c in launches:
            cost[name] += c
        cost["(idle)"] = length - sum(cost.values())
        lengths.append(length)
        for key, v in cost.items():
            costs[key].append(v)
    print(f"decoding step: median {statistics.median(lengths)/1e3:.1f} us over the last {len(steps)} steps")
    print("cost per step (us, median), by kernel:")
    for key, v in sorted(costs.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"{statistics.median(v)/1e3:9.1f}  {key}")


def repeating_block(names):
    """(first, period, end): launches first .. end - 1 repeat a block of `period` launches (a model's layers), at
    least three whole times, the last run perhaps in part; the longest such stretch, the shortest period among
    equals; None if no block repeats three whole times. The block starts where the repetition does, not
    necessarily at a layer's first launch (a decoding step's first q/k/v differs from the others, so its block
    begins at attention and ends with the next layer's q/k/v)."""
    best = None
    for period in range(1, len(names) // 3 + 1):
        i = 0
        while i + period < len(names):
            j = i
            while j + period < len(names) and names[j] == names[j + period]:
                j += 1
            if (j - i) // period + 1 >= 3 and (best is None or j + period - i > best[2] - best[0]):
                best = (i, period, j + period)
            i = j + 1
    return best


def decode_launch_costs(device, n):
    """Each launch of a decoding step, in order, its duration and cost medians over the last n steps; launches that
    repeat as a block (the layers) folded into one row per place in the block, medians over every repeat."""
    steps = decode_steps(device, n)
    names = [name for name, _, _ in steps[0][0]]
    if any([name for name, _, _ in launches] != names for launches, _ in steps):
        raise SystemExit(f"the last {len(steps)} decoding steps do not run the same launches; take fewer steps")
    first, period, end = repeating_block(names) or (len(names), 1, len(names))

    def row(label, positions):
        durations = [steps[k][0][p][1] for k in range(len(steps)) for p in positions]
        costs = [steps[k][0][p][2] for k in range(len(steps)) for p in positions]
        print(f"{statistics.median(durations)/1e3:9.1f} {statistics.median(costs)/1e3:9.1f}  {label}")

    print(f"decoding step: {len(names)} launches; medians over the last {len(steps)} steps")
    print(" duration      cost  launch (us)")
    for p in range(first):
        row(f"{p}: {names[p]}", [p])
    if end > first:
        whole, part = divmod(end - first, period)
        print(f"launches {first}-{end - 1}: a block of {period} run {whole} times"
              + (f", then its first {part}" if part else "") + "; each place's medians over every run:")
        for r in range(period):
            row(f"+{r}: {names[first + r]}", range(first + r, end, period))
    for p in range(end, len(names)):
        row(f"{p}: {names[p]}", [p])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=0, help="report the last N training steps")
    ap.add_argument("--skip-fraction", type=float, default=0.5, help="without --steps: ignore this leading share")
    ap.add_argument("--min-us", type=float, default=5.0, help="smallest gap listed")
    ap.add_argument("--decode-steps", type=int, default=0, help="each kernel's cost in the last N decoding steps")
    ap.add_argument("--launches", action="store_true", help="with --decode-steps: launch by launch, the layers folded")
    a = ap.parse_args()
    device, api = load(a.csv)
    if not device:
        raise SystemExit(f"{a.csv}: no device work recorded (was the program run with CUDA_INJECTION64_PATH?)")
    if a.launches and not a.decode_steps:
        raise SystemExit("--launches reports decoding steps: give --decode-steps N as well")
    if a.decode_steps:
        return (decode_launch_costs if a.launches else decode_step_costs)(device, a.decode_steps)
    if a.steps:
        windows = step_windows(device, a.steps)
        if not windows:
            raise SystemExit(f"{a.csv}: fewer than two AdamW kernels, so no training step to cut out; "
                             "drop --steps to see the whole timeline")
    else:
        t0 = device[0][0] + a.skip_fraction * (device[-1][1] - device[0][0])
        windows = [(t0, device[-1][1])]
    busy_total = span_total = 0
    gaps, kernels, counts = [], collections.Counter(), collections.Counter()
    for w0, w1 in windows:
        inside = [d for d in device if d[0] >= w0 and d[1] <= w1]
        if not inside:
            continue
        busy, end, prev = 0, inside[0][0], None
        for s, e, kind, name in inside:
            kernels[short(name)] += e - s
            counts[short(name)] += 1
            if s > end and prev is not None:
                gaps.append((s - end, end, s, prev, name))
            if e > end:
                busy += e - max(s, end)
                end, prev = e, name
        span = w1 - w0
        busy_total += busy
        span_total += span
        print(f"window {span/1e6:9.2f} ms: busy {busy/1e6:9.2f} ms, idle {(span-busy)/1e6:7.2f} ms")
    n = len(windows)
    print(f"per window: busy {busy_total/n/1e6:.2f} ms of {span_total/n/1e6:.2f} ms "
          f"({100*(span_total-busy_total)/span_total:.1f}% idle)")
    print("\ndevice time per window (ms, launches):")
    for key, v in kernels.most_common(30):
        print(f"{v/n/1e6:9.3f} {counts[key]//n:5d}  {key}")
    big = [g for g in gaps if g[0] >= a.min_us * 1e3]
    by_pair, pair_count, by_api = collections.Counter(), collections.Counter(), collections.Counter()
    for length, s, e, prev, nxt in big:
        key = short(prev, 70) + "  ->  " + short(nxt, 50)
        by_pair[key] += length
        pair_count[key] += 1
        for a0, a1, _, name in api:
            if a0 < e and a1 > s:
                by_api[name] += min(e, a1) - max(s, a0)
    print(f"\nidle gaps of at least {a.min_us} us, by the work before -> after (ms per window, count):")
    for key, v in by_pair.most_common(15):
        print(f"{v/n/1e6:9.3f} {pair_count[key]:5d}  {key}")
    print("\nhost API calls during those gaps (ms per window):")
    for key, v in by_api.most_common(10):
        print(f"{v/n/1e6:9.3f}  {key}")


if __name__ == "__main__":
    main()
