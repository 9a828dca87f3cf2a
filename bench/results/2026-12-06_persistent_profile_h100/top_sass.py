import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors='replace')))
# find header row: the one containing 'Source'
hi = next(i for i, r in enumerate(rows) if any('Source' in c for c in r) and len(r) > 5)
h = rows[hi]
print("COLUMNS:", h)
def col(*keys):
    for k in keys:
        for i, c in enumerate(h):
            if k.lower() in c.lower(): return i
    return None
src = col('Source'); addr = col('Address'); samp = col('Warp Stall Sampling (All', 'Sampling (All')
nsamp = col('Warp Stall Sampling (Not'); ex = col('Instructions Executed')
data = []
for r in rows[hi + 1:]:
    if len(r) != len(h): continue
    try: v = float(r[samp].replace(',', '')) if samp is not None else 0
    except: v = 0
    data.append((v, r))
tot = sum(v for v, _ in data)
print("total samples", tot, "instructions", len(data))
for v, r in sorted(data, key=lambda x: -x[0])[:70]:
    print(f"{v:8.0f} {100*v/tot:5.1f}% | {r[addr] if addr is not None else ''} | {r[ex] if ex is not None else ''} | {r[src][:110]}")
