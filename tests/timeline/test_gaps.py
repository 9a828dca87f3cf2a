#!/usr/bin/env python3
"""bench/timeline/gaps.py's decoding-step reports on a timeline whose answers are known: each kernel's cost a step, the
launches of a step with its repeating block (the layers) folded, and the refusals of --launches without
--decode-steps and of steps that run different launches. Standard library only.
  python3 tests/timeline/test_gaps.py
"""
import importlib.util
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'support'))
from script_check import TIMELINE, run_script, verdict  # noqa: E402


def timeline(steps, blocks=(4,)):
    """A CSV of `steps` decoding steps 100 us apart (ns): an embedding (1 us), then blocks[k % len(blocks)] layers of
    attention (2 us) and a GEMM that starts 1 us before attention ends (a dependent launch: it costs its duration less
    1 us), the last layer without its GEMM, then the head. The first layer's GEMM takes 9 us, the others 3 (medians
    over every layer and step: 3, cost 2); the first step's head takes 50 us, the others' 5 (the last steps' median:
    5). One API record, which the reports ignore."""
    rows = ['kind,start_ns,end_ns,stream,name', 'A,0,5000,0,"cudaLaunchKernel"']
    for k in range(steps + 1):  # the step after the last closes it
        t = 1000 + 100000 * k
        rows.append(f'K,{t},{t + 1000},7,"embedding_forward_kernel"')
        t += 1000
        layers = blocks[k % len(blocks)]
        for layer in range(layers):
            rows.append(f'K,{t},{t + 2000},7,"attention"')
            t += 2000
            if layer + 1 < layers:
                gemm_us = 9 if layer == 0 else 3
                rows.append(f'K,{t - 1000},{t + (gemm_us - 1) * 1000},7,"_ZN6fathom4cuda4gemmEv"')
                t += (gemm_us - 1) * 1000
        head_us = 50 if k == 0 else 5
        rows.append(f'K,{t},{t + head_us * 1000},7,"head"')
    return '\n'.join(rows) + '\n'


def main():
    failures = []
    spec = importlib.util.spec_from_file_location('gaps', TIMELINE / 'gaps.py')
    gaps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gaps)
    # The repeating block: its start, period and end, a partial last run included; none under three whole runs.
    # The longest stretch wins over the first found, and the shortest period over its multiples.
    for names, want in [(list('eabababah'), (1, 2, 8)), (list('eababah'), None), (list('eabah'), None),
                        (list('xabcabcabcaby'), (1, 3, 12)), (list('aaaa'), (0, 1, 4)), ([], None), (list('aa'), None),
                        (list('aaaaaa'), (0, 1, 6)), (list('ab' * 6), (0, 2, 12)),
                        (list('abababxcdecdecde'), (7, 3, 16))]:
        got = gaps.repeating_block(names)
        if got != want:
            failures.append(f'repeating_block({"".join(names)}): {got}, expected {want}')

    # Each kernel's cost a step (the last two steps): 4 attentions of 2 us, 3 GEMMs costing 8 + 2 + 2 us, the head, the
    # embedding; the rest of the 100 us is idle.
    result = run_script(TIMELINE / 'gaps.py', timeline(3), '--decode-steps', '2')
    want = {'attention': 8.0, 'gemm': 12.0, 'head': 5.0, 'embedding_forward_kernel': 1.0, '(idle)': 74.0}
    got = {}
    for line in result.stdout.splitlines()[2:]:
        value, key = line.split(maxsplit=1)
        got[key] = float(value)
    if result.returncode != 0 or got != want:
        failures.append(f'--decode-steps: rc {result.returncode}, {got}, expected {want}: {result.stderr.strip()}')

    # Launch by launch: the embedding, the block of (attention, GEMM) run 3 times and then its attention, the head.
    result = run_script(TIMELINE / 'gaps.py', timeline(3), '--decode-steps', '2', '--launches')
    lines = result.stdout.splitlines()
    want = ['decoding step: 9 launches; medians over the last 2 steps',
            ' duration      cost  launch (us)',
            '      1.0       1.0  0: embedding_forward_kernel',
            'launches 1-7: a block of 2 run 3 times, then its first 1; each place\'s medians over every run:',
            '      2.0       2.0  +0: attention',
            '      3.0       2.0  +1: gemm',
            '      5.0       5.0  8: head']
    if result.returncode != 0 or lines != want:
        failures.append('--launches:\n' + '\n'.join(lines) + f'\nexpected\n' + '\n'.join(want) + result.stderr)

    # Refusals, by name.
    result = run_script(TIMELINE / 'gaps.py', timeline(3), '--launches')
    if result.returncode == 0 or '--decode-steps' not in result.stderr:
        failures.append(f'--launches alone was not refused by name: rc {result.returncode}, {result.stderr.strip()}')
    result = run_script(TIMELINE / 'gaps.py', timeline(3, blocks=(4, 5)), '--decode-steps', '2', '--launches')
    if result.returncode == 0 or 'do not run the same launches' not in result.stderr:
        failures.append(f'steps of different launches were not refused: rc {result.returncode}, {result.stderr}')

    return verdict('gaps.py', failures)


if __name__ == '__main__':
    sys.exit(main())
