# Diagnostic only: summarises cta_trace.cuh records (attention.bin, skinny.bin) per kind of launch.
import sys, numpy as np
dt = np.dtype([('kind', '<u4'), ('grid', '<u4'), ('block', '<u4'), ('sm', '<u4'), ('g0', '<u8'), ('gend', '<u8'), ('c', '<u4', (8,))])
recs = np.concatenate([np.fromfile(f, dtype=dt) for f in sys.argv[1:]])
code = recs['kind'] & 0xff
last = np.where(code == 1, 7, 5)
c_end = np.array([r['c'][l] if r['c'][l] else max(r['c']) for r, l in zip(recs, last)], dtype=np.float64)
dur = (recs['gend'] - recs['g0']).astype(np.float64)
ok = dur > 3000
clk = np.median(c_end[ok] / dur[ok])  # cycles per ns
print(f"records {len(recs)}; clock {clk:.3f} GHz (median cycles / globaltimer ns); globaltimer steps seen: "
      f"{np.unique(np.diff(np.unique(recs['g0'][:2000].astype(np.int64))))[:5]}")
tw = recs['g0'] + recs['c'][:, 1] / clk
order = np.argsort(tw, kind='stable'); recs, tw = recs[order], tw[order]
code = recs['kind'] & 0xff
def name(r):
    k, cd = int(r['kind']) >> 8, int(r['kind']) & 0xff
    if cd == 1: return 'attention'
    return {2: 'plain', 3: 'post-step', 4: 'pre-step'}.get(cd & 7, str(cd)) + ('+gated' if cd & 8 else '') + \
        ('+cluster' if cd & 16 else '') + f" K{k} grid{int(r['grid'])}"
launches, cur, key = [], [], None
for i, r in enumerate(recs):
    k = (int(r['kind']) & 0xff if (int(r['kind']) & 0xff) == 1 else int(r['kind']), int(r['grid']))
    if cur and (k != key or tw[i] - tw[cur[0]] > 200000):
        launches.append((key, cur)); cur = []
    key = k; cur.append(i)
if cur: launches.append((key, cur))
launches = launches[len(launches) // 5:]  # drop the oldest fifth (wrapped or partial)
rows = {}
prev_end = None
for key, idx in launches:
    R = recs[idx]; t = tw[idx]
    g0 = R['g0'].astype(np.float64); end = R['gend'].astype(np.float64); c = R['c'].astype(np.float64) / clk
    m = {}
    m['ctas'] = len(idx)
    if prev_end is not None:
        m['handoff'] = t.min() - prev_end
        m['cost'] = end.max() - prev_end
    m['span'] = end.max() - t.min()
    m['first_entry_before_wait'] = t.min() - g0.min()
    m['late_starts'] = float(np.mean(g0 > t.min() + 500))
    m['last_start'] = g0.max() - t.min()
    m['tail_p90'] = end.max() - np.percentile(end, 90)
    nph = 7 if key[0] == 1 else 5
    for p in range(1, nph + 1):
        d = c[:, p] - c[:, p - 1] if p > 1 else c[:, 1]
        valid = (R['c'][:, p] > 0) if p > 1 else np.ones(len(idx), bool)
        if valid.any():
            m[f'ph{p}_med'] = np.median(d[valid]); m[f'ph{p}_max'] = d[valid].max()
    rows.setdefault(name(R[0]), []).append(m)
    prev_end = end.max()
print("ns; medians over launches (n). ph1: entry -> past the wait; attention ph2 prologue, ph3 loop over keys, ph4 warp "
      "merges, ph5 cluster wait 1, ph6 cluster wait 2, ph7 combine; GEMM ph2 residual step, ph3 loads+MMAs (thread 0's "
      "warp), ph4 partials + barrier, ph5 outputs")
for nm, ms in sorted(rows.items(), key=lambda kv: -len(kv[1])):
    if len(ms) < 8: continue
    keys = [k for k in ms[0] if all(k in x for x in ms)]
    print(f"\n{nm}  (n={len(ms)})")
    print("  " + "  ".join(f"{k}={np.median([x[k] for x in ms]):.0f}" if k != 'late_starts' else
                           f"{k}={np.median([x[k] for x in ms]):.2f}" for k in keys))
