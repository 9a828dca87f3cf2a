# Pivot bench_generate rows (label "SIZE trigger_X prefetch_Y") into one table: ms/step (% of roofline).
import sys, collections
rows = collections.OrderedDict(); cols = []
for line in open(sys.argv[1]):
    f = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(f) < 12 or not f[0].startswith('fathom'): continue
    size, variant = f[1].split(' ', 1)
    key = (size, f[2], f[3])
    if variant not in cols: cols.append(variant)
    rows.setdefault(key, {})[variant] = f'{float(f[6]):.3f} ({float(f[11]):.1f}%)'
print('| model | batch / context | ' + ' | '.join(cols) + ' |')
print('|---|---|' + '---:|' * len(cols))
for (size, b, c), v in rows.items():
    print(f'| {size} | {b} / {c} | ' + ' | '.join(v.get(k, '') for k in cols) + ' |')
