# Variants of where the few-rows decode attention lets the next grid (o_proj) launch, and of the skinny GEMM's L2 prefetch.
import sys
def patch(path, old, new):
    s = open(path).read(); assert s.count(old) == 1, old; open(path, 'w').write(s.replace(old, new))
A = 'kernels/attention/decode_attention.cu'
S = 'kernels/matmul/skinny_matmul.cu'
v = sys.argv[1]
if v in ('trig_loop', 'trig_end'):
    patch(A, '  follow_previous_grid();                            // dependent_launch.cuh\n',
          '  wait_for_previous_grid();  // dependent_launch.cuh\n')
if v == 'trig_loop':
    patch(A, '  // Two softmax partials (m, l, acc) of the same row as one.',
          '  allow_dependent_grids();  // every load of the cache is done\n  // Two softmax partials (m, l, acc) of the same row as one.')
if v == 'nopf':
    patch(S, '  if (kVector && rank == 0) {\n', '  if (false && kVector && rank == 0) {\n')
print('patched', v)
