#!/usr/bin/env python3
"""sweep.py - the wide version of the golden tests: ptc's training against a float64 oracle over
many recipes, one table. A benchmark of numerics, not a CI test (make check runs the fixed cases
of tests/interop/train_golden.py and ddp_golden.py).

    python3 tests/bench/golden/sweep.py [--build DIR] [--backends ref,dnnl] [--quick]
        [--worlds 1,2,3] [--out FILE]

For each case (tests/interop/free_run.py: random CIFAR-10-format images, torchvision's
resnet18(num_classes=10) initialisation, SGD momentum 0.9, weight decay 5e-4) it runs torch
float64 (the oracle), torch float32 (at the recipe's thread count, and at 1 to 4 threads), the
float32-storage run (float64 arithmetic on float32-rounded tensors) and `ptc train` on each
backend, free-running for every N listed and
step by step, and prints one row per comparison: the three errors to the oracle, the bound
(2 x the floor + 1e-5, the floor being torch32's median error over 1 to 4 threads or the
float32-storage run's error, whichever is larger) and the verdict. The last lines count, per backend, free runs and
single steps apart, the comparisons within the bound, the chaotic ones left out (torch32 > 1e-2),
and how often ptc and torch32 (at the recipe's thread count) each exceeded twice the other's error
plus 1e-5, a measure that treats the two float32 implementations alike.

The grid (about 1 h on 2 cores; --quick: a third of it):
  1 process:  batch 8, 16, 32, 64 x lr 0.01, 0.05 x N = 1 .. 5
  2 ranks:    batch 8, 16 x lr 0.01, 0.05 x N = 1 .. 4, on one file and on files of 16 images
  3 ranks:    batch 8 x lr 0.01, 0.05 x N = 1 .. 3
"""
import argparse
import contextlib
import io
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(SRC, 'tests', 'interop'))
import free_run as fr  # noqa: E402


def grid(quick, worlds):
    cases = []
    seed = 7000
    for world, batches, lrs, steps, layouts in (
            (1, (8, 16, 32, 64), (0.01, 0.05), 5, (None,)),
            (2, (8, 16), (0.01, 0.05), 4, (None, 16)),
            (3, (8,), (0.01, 0.05), 3, (None,))):
        if world not in worlds:
            continue
        for b in batches:
            for lr in lrs:
                for files in layouts:
                    if files and world * b * steps > 5 * files:
                        steps_here = 5 * files // (world * b)
                    else:
                        steps_here = steps
                    seed += 1
                    if quick and seed % 3:
                        continue
                    cases.append(fr.Case(world, b, lr, range(1, steps_here + 1), files=files,
                                         seed=seed))
    return cases


ROW = re.compile(r"^\s+(.*?)\s+torch32 (\S+)\s+torch32-median (\S+)\s+f32-storage (\S+)\s+ptc (\S+)\s+"
                 r"(?:bound (\S+)\s+(ok|FAIL)|left out)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.environ.get('top_builddir', SRC))
    ap.add_argument('--backends', default='ref,dnnl')
    ap.add_argument('--worlds', default='1,2,3')
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--out')
    a = ap.parse_args()
    ptc = os.path.join(a.build, 'tools', 'ptc')
    backends = a.backends.split(',')
    cases = grid(a.quick, [int(w) for w in a.worlds.split(',')])
    print('%d cases, backends %s' % (len(cases), ', '.join(backends)), flush=True)
    rows = []
    v = fr.Verdicts()
    for case in cases:
        buf = io.StringIO()
        with tempfile.TemporaryDirectory(prefix='ptc-sweep-') as tmp, \
                contextlib.redirect_stdout(buf):
            fr.golden_case(ptc, tmp, case, backends, v)
        text = buf.getvalue()
        sys.stdout.write(text)
        sys.stdout.flush()
        for line in text.splitlines():
            m = ROW.match(line)
            if m:
                rows.append(m.groups())
    print()
    print('| comparison | torch32 | torch32, median of 1-4 threads | float32 storage | ptc | bound | verdict |')
    print('|---|---:|---:|---:|---:|---:|---|')
    for what, t, t2, i, p, b, ok in rows:
        print('| %s | %s | %s | %s | %s | %s | %s |' % (what, t, t2, i, p, b or '-',
                                                    ok or 'left out'))
    print()
    for b in backends:
        mine = [r for r in rows if (', %s: ' % b) in r[0]]
        judged = [r for r in mine if r[5]]
        for kind, sel in (('free runs', lambda r: 'free steps' in r[0]),
                          ('single steps', lambda r: 'free steps' not in r[0])):
            rs = [r for r in judged if sel(r)]
            t32, p_ = ([float(r[k]) for r in rs] for k in (1, 4))
            beyond = lambda a, b: sum(1 for x, y in zip(a, b) if x > 2 * y + fr.SLACK)  # noqa
            print('%s, %s: %d of %d within the bound; against torch32 at the recipe\'s thread '
                  'count alone, ptc beyond 2 x torch32 + 1e-5: %d, torch32 beyond 2 x ptc + 1e-5: '
                  '%d' % (b, kind, sum(1 for r in rs if r[6] == 'ok'), len(rs), beyond(p_, t32),
                          beyond(t32, p_)))
        print('%s: %d comparisons left out as chaotic' % (b, len(mine) - len(judged)))
    if a.out:
        with open(a.out, 'w') as f:
            for r in rows:
                f.write('\t'.join(x or '' for x in r) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
