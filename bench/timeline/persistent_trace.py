#!/usr/bin/env python3
"""Where the persistent decoding kernel's step went, from a FATHOM_PERSISTENT_TRACE file.

The kernel (kernels/decode_step/persistent_decode.cu) records, per CTA, its SM clock at its start and at the end
of each phase, of attention's q/k and its tiles, and of each grid barrier (13 marks a layer), then after the head's input and its GEMM; the file
is the last step that ran. Per kind of interval this prints the time from the mark before, summed over the
layers, as the median and the maximum over the CTAs (microseconds, at the clock rate the file names). A
barrier's interval is the CTA's wait there: the slowest CTA's work before it, less its own.
  python3 persistent_trace.py trace.csv
"""
import argparse, collections, statistics

KINDS = ['q/k/v input', 'q/k/v GEMM', 'barrier 1', 'attention: q/k', 'attention: tiles', 'attention: merge',
         'barrier 2', 'o_proj input + GEMM', 'barrier 3',
         'gate/up input + GEMM', 'barrier 4', 'down input + GEMM', 'barrier 5']


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('trace')
    args = parser.parse_args()
    lines = open(args.trace).read().splitlines()
    header = lines[0].split()  # "# sm_clock_khz K layers L marks_per_layer M"
    khz, layers, per_layer = float(header[2]), int(header[4]), int(header[6])
    if per_layer != len(KINDS):
        raise SystemExit(f'{args.trace}: {per_layer} marks a layer, this script knows {len(KINDS)}')
    clocks = collections.defaultdict(dict)
    for line in lines[2:]:
        cta, mark, clock = line.split(',')
        clocks[int(cta)][int(mark)] = int(clock)
    us = lambda a, b: (b - a) / khz * 1e3
    totals = collections.defaultdict(list)
    for marks in clocks.values():
        spent = collections.Counter()
        for layer in range(layers):
            for k, kind in enumerate(KINDS):
                at = 1 + layer * per_layer + k
                spent[kind] += us(marks[at - 1], marks[at])
        head = 1 + layers * per_layer
        spent['head input'] = us(marks[head - 1], marks[head])
        spent['head GEMM'] = us(marks[head], marks[head + 1])
        spent['step'] = us(marks[0], marks[head + 1])
        for kind, t in spent.items():
            totals[kind].append(t)
    print(f'{args.trace}: {len(clocks)} CTAs, {layers} layers; us a step, summed over the layers: median, max over CTAs')
    for kind in KINDS + ['head input', 'head GEMM', 'step']:
        print(f'  {kind:22s} {statistics.median(totals[kind]):9.1f} {max(totals[kind]):9.1f}')


if __name__ == '__main__':
    main()
