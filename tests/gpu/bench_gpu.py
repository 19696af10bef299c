#!/usr/bin/env python3
"""bench_gpu.py - part e of the GPU tier (tests/gpu/run.sh): training images/s and peak GPU memory
of `ptc train --backend cuda` against PyTorch on the same GPU, at batch 128 and 512, and the
targets of issue 14 section 6 (one H200):

  bf16 images/s >= 1.5 x torch eager channels_last + bf16 autocast at batch 512, and >= torch.compile;
  float32 images/s >= torch eager float32 (both with TF32 off); peak memory <= torch's.

ptc: `ptc train` on the carried Fashion-MNIST subset (its own input pipeline: dataset held on the
device, shuffle and augmentation on the GPU), float32 and --precision bf16, its summary's "training  N steps,
X images/s after warm-up" row (10 warm-up steps left out). torch: a full SGD training step (zero_grad,
forward, cross-entropy, backward, SGD momentum 0.9 weight decay 5e-4) of torchvision
resnet18(num_classes=10) on 32x32 inputs already on the GPU, cudnn.benchmark on, in three kinds:
eager float32 (TF32 off, as ptc's float32), eager channels_last with bf16 autocast, and
torch.compile(model) of the latter (at batch 512 only unless PTC_GPU_COMPILE_BATCHES says more,
within what is left of the time: it compiles for a minute or more). Each run is a process of its
own; its peak memory is the GPU's used memory above what was used before it (gpu_common).

Targets print MET or MISS and never fail the part, unless PTC_GPU_PERF_STRICT=1 (a MISS is then a
FAIL). A ptc or torch run that does not complete is a FAIL. PTC_GPU_BENCH_SECONDS bounds the whole
part (run.sh passes what is left of its deadline).

`bench_gpu.py torch KIND BATCH STEPS WARMUP` is one torch run (used by the driver): prints
"RESULT {json}".
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_common as g  # noqa: E402

PART = 'e'
STRICT = os.environ.get('PTC_GPU_PERF_STRICT') == '1'
GIB = 2.0**30


def torch_one(kind, batch, steps, warmup):
    import torch
    import torchvision
    dev = torch.device(g.DEVICE)
    torch.manual_seed(0)
    if g.DEVICE == 'cuda':
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cl = kind != 'eager32'
    bf16 = kind != 'eager32'
    model = torchvision.models.resnet18(num_classes=10).to(dev)
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    if cl:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    net = torch.compile(model) if kind == 'compile_bf16_cl' else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    sync = torch.cuda.synchronize if g.DEVICE == 'cuda' else (lambda: None)
    t0 = time.time()
    for _ in range(warmup):
        step()
    sync()
    t1 = time.time()
    for _ in range(steps):
        step()
    sync()
    t2 = time.time()
    res = {'images_per_sec': batch * steps / (t2 - t1), 'warmup_s': t1 - t0}
    if g.DEVICE == 'cuda':
        res['max_allocated'] = torch.cuda.max_memory_allocated()
        res['max_reserved'] = torch.cuda.max_memory_reserved()
    print('RESULT ' + json.dumps(res))


class Clock:
    def __init__(self, seconds):
        self.end = time.time() + seconds

    def left(self):
        return self.end - time.time()


def ptc_run(clock, batch, prec, steps, data, extra):
    name = 'ptc %s b%d' % (prec, batch)
    args = [g.PTC, 'train', '--dataset', 'fashion-mnist', '--data', data, '--batch-size',
            str(batch), '--epochs', '1000', '--max-steps', str(steps), '--eval-every', '0',
            '--no-progress', '--save', os.path.join(g.WORK, 'bench.pth')] + g.BACKEND_ARGS + extra
    if prec == 'bf16':
        if not g.ptc_has_option('--precision'):
            return name, None, ('not run: ' if g.SELFTEST else '') + 'ptc train has no --precision'
        args += ['--precision', 'bf16']
    t = min(90, clock.left() - 5)
    if t < 10:
        return name, None, 'not run: out of time'
    rc, out, peak, secs = g.run_sampled(args, t, os.path.join(g.WORK, 'logs',
                                                                 'e-ptc-%s-%d.log' % (prec, batch)))
    if rc is None:
        return name, None, 'no result after %d s' % t
    m = re.search(r'training:? +\d+ steps, ([\d.]+) images/s after warm-up', out)
    if rc != 0 or not m:
        return name, None, 'exit %s%s: %s' % (rc, '' if m else ', no images/s line',
                                              out.strip()[-200:])
    return name, {'images_per_sec': float(m.group(1)), 'peak': peak, 'seconds': secs}, ''


def torch_run(clock, kind, batch, steps, warmup, limit):
    name = 'torch %s b%d' % (kind, batch)
    t = min(limit, clock.left() - 5)
    if t < 15:
        return name, None, 'not run: out of time'
    rc, out, peak, secs = g.run_sampled(
        [sys.executable, os.path.abspath(__file__), 'torch', kind, str(batch), str(steps),
         str(warmup)], t, os.path.join(g.WORK, 'logs', 'e-torch-%s-%d.log' % (kind, batch)))
    if rc is None:
        return name, None, 'not run: no result within %d s%s' % (
            t, ' (compiling)' if kind.startswith('compile') else '')
    m = re.search(r'^RESULT (.*)$', out, re.M)
    if rc != 0 or not m:
        return name, None, 'exit %s: %s' % (rc, out.strip()[-200:])
    r = json.loads(m.group(1))
    r['peak'], r['seconds'] = peak, secs
    return name, r, ''


def bench():
    clock = Clock(float(os.environ.get('PTC_GPU_BENCH_SECONDS', '240')))
    data = os.path.join(g.CARRY, 'data', 'fashion-mnist')
    if g.SELFTEST:
        batches, extra = (8, 16), ['--max-samples', '256']
        steps = {8: 14, 16: 14}
        tsteps, twarm = 4, 2
        compile_batches = [int(b) for b in os.environ.get('PTC_GPU_COMPILE_BATCHES', '').split(',') if b]
    else:
        batches, extra = (128, 512), []
        steps = {128: 110, 512: 60}  # 10 warm-up steps, then 100 and 50 timed
        tsteps, twarm = 50, 15
        compile_batches = [int(b) for b in os.environ.get('PTC_GPU_COMPILE_BATCHES', '512').split(',') if b]
    res = {}

    def record(key, name, r, why):
        res[key] = r
        if r is None:
            g.row(PART, name, why, 'not run' if why.startswith('not run') else 'FAIL')
        else:
            extra_fig = ''
            if 'max_reserved' in r:
                extra_fig = ' (torch reserved %.2f GiB)' % (r['max_reserved'] / GIB)
            g.row(PART, name, '%.0f images/s, peak %.2f GiB%s' % (
                r['images_per_sec'], r['peak'] / GIB, extra_fig), '-')
    for b in batches:
        for prec in ('f32', 'bf16'):
            name, r, why = ptc_run(clock, b, prec, steps[b], data, extra)
            record(('ptc', prec, b), name, r, why)
    for b in batches:
        for kind in ('eager32', 'eager_bf16_cl'):
            name, r, why = torch_run(clock, kind, b, tsteps, twarm, 90)
            record((kind, b), name, r, why)
    for b in compile_batches:
        name, r, why = torch_run(clock, 'compile_bf16_cl', b, tsteps, twarm, 240)
        record(('compile_bf16_cl', b), name, r, why)

    def target(what, pairs, want):
        """pairs: [(label, ptc result, torch result)]; want(ptc, torch) -> (ok, ratio)."""
        figs, ok_all, have = [], True, False
        for label, p, t in pairs:
            if p is None or t is None:
                figs.append('%s: n/a' % label)
                continue
            ok, ratio = want(p, t)
            have = True
            ok_all = ok_all and ok
            figs.append('%s %.2fx' % (label, ratio))
        if not have:
            g.row(PART, 'target: ' + what, ', '.join(figs), 'not run')
            return
        verdict = 'MET' if ok_all else ('FAIL' if STRICT else 'MISS')
        g.row(PART, 'target: ' + what, ', '.join(figs), verdict)

    big = max(batches)
    speed = lambda k: (lambda p, t: (p['images_per_sec'] >= k * t['images_per_sec'],  # noqa: E731
                                     p['images_per_sec'] / t['images_per_sec']))
    target('bf16 b%d >= 1.5x torch eager CL bf16' % big,
           [('ratio', res.get(('ptc', 'bf16', big)), res.get(('eager_bf16_cl', big)))], speed(1.5))
    target('bf16 b%d >= torch.compile' % big,
           [('ratio', res.get(('ptc', 'bf16', big)), res.get(('compile_bf16_cl', big)))], speed(1.0))
    target('f32 >= torch eager f32 (TF32 off)',
           [('b%d' % b, res.get(('ptc', 'f32', b)), res.get(('eager32', b))) for b in batches],
           speed(1.0))
    target('peak memory <= torch\'s (ptc/torch)',
           [('%s b%d' % (prec, b), res.get(('ptc', prec, b)), res.get((kind, b)))
            for b in batches for prec, kind in (('f32', 'eager32'), ('bf16', 'eager_bf16_cl'))],
           lambda p, t: (p['peak'] <= t['peak'], p['peak'] / t['peak'] if t['peak'] else 0))


if __name__ == '__main__':
    if len(sys.argv) == 6 and sys.argv[1] == 'torch':
        torch_one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    g.main(PART, bench)
