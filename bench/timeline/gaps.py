#!/usr/bin/env python3
"""Where the GPU sat idle, and on what it was busy, in a timeline from timeline_injection.cpp.

With --steps the window is cut into training steps, from one AdamW kernel's end to the next one's
(host work between steps included); the last N are kept. With --decode-steps the last N decoding steps
(each from one embedding_forward_kernel's start to the next one's) are reported instead, as each kernel's cost
per step: how much later than all the work ahead of it it ends (kernels that overlap the one ahead, as
dependent launches do, cost only what they add), and the idle time; medians over the steps.
  python3 gaps.py timeline.csv [--steps 3 | --skip-fraction 0.5 | --decode-steps 12] [--min-us 5]
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


def decode_step_costs(device, n):
    starts = [i for i, d in enumerate(device) if short(d[3]) == "embedding_forward_kernel"]
    steps = list(zip(starts[:-1], starts[1:]))[-n:]
    if not steps:
        raise SystemExit("fewer than two embedding kernels, so no decoding step to cut out")
    costs, lengths = collections.defaultdict(list), []
    for first, after in steps:
        cost, end = collections.Counter(), device[first][0]
        for s, e, _, name in device[first:after]:
            cost[short(name, 70)] += max(0, e - max(s, end))
            end = max(end, e)
        length = device[after][0] - device[first][0]
        cost["(idle)"] = length - sum(cost.values())
        lengths.append(length)
        for key, v in cost.items():
            costs[key].append(v)
    print(f"decoding step: median {statistics.median(lengths)/1e3:.1f} us over the last {len(steps)} steps")
    print("cost per step (us, median), by kernel:")
    for key, v in sorted(costs.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"{statistics.median(v)/1e3:9.1f}  {key}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=0, help="report the last N training steps")
    ap.add_argument("--skip-fraction", type=float, default=0.5, help="without --steps: ignore this leading share")
    ap.add_argument("--min-us", type=float, default=5.0, help="smallest gap listed")
    ap.add_argument("--decode-steps", type=int, default=0, help="each kernel's cost in the last N decoding steps")
    a = ap.parse_args()
    device, api = load(a.csv)
    if not device:
        raise SystemExit(f"{a.csv}: no device work recorded (was the program run with CUDA_INJECTION64_PATH?)")
    if a.decode_steps:
        return decode_step_costs(device, a.decode_steps)
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
