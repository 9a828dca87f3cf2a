#!/usr/bin/env python3
"""Where the GPU sat idle, and on what it was busy, in a timeline from timeline_injection.cpp.

With --steps the window is cut into training steps, from one AdamW kernel's end to the next one's
(host work between steps included); the last N are kept.
  python3 gaps.py timeline.csv [--steps 3 | --skip-fraction 0.5] [--min-us 5]
"""
import argparse, collections, csv


def short(name, n=90):
    return name.split("(")[0][:n]


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=0, help="report the last N training steps")
    ap.add_argument("--skip-fraction", type=float, default=0.5, help="without --steps: ignore this leading share")
    ap.add_argument("--min-us", type=float, default=5.0, help="smallest gap listed")
    a = ap.parse_args()
    device, api = load(a.csv)
    if not device:
        raise SystemExit(f"{a.csv}: no device work recorded (was the program run with CUDA_INJECTION64_PATH?)")
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
