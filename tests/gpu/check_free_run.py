#!/usr/bin/env python3
"""check_free_run.py - part c of the GPU tier (tests/gpu/run.sh): 3 and 10 free-running training
steps of ptc on the GPU against torch on the same GPU, both judged against a float64 oracle
(torch float64 on the GPU).

The approach and data conventions are tests/interop/free_run.py's (read its top comment): random
CIFAR-10 records (free_run.write_data), torchvision resnet18(num_classes=10) initialised by torch
with seed 0, `ptc train --init INIT --max-steps K --no-shuffle --no-augment` (K = 3 and 10, one
process, batch 32, lr 0.01, SGD momentum 0.9, weight decay 5e-4), and the update error
||(w - s) - (o - s)|| / ||o - s|| over every floating entry of the state dict against the
oracle's o, from the start s.

float32: ptc's cuda backend with TF32 off (its default) against torch float32 with TF32 off.
  The floor is free_run's: torch float32's own error, the median over the runs that differ only in
  the order of their float32 sums (on a GPU: cuDNN's algorithm choice, default / benchmark /
  deterministic, in place of free_run's thread counts), or float32 storage's error where larger
  (float64 arithmetic with every stored value rounded to float32: free_run._store_float32). Pass
  when ptc's error <= 2 x floor + 1e-5; a case where torch float32 is itself more than 1e-2 from
  the oracle is chaotic and left out (both as free_run.py).
bf16: `ptc train --precision bf16` against torch.autocast("cuda", dtype=torch.bfloat16) with
  float32 master weights (the median of cuDNN's default and benchmark choices). Pass when ptc's
  error <= 2 x torch autocast's + 1e-5. bf16's rounding is 2^-9, so torch autocast's own error is
  large; a case where it exceeds 0.5 says nothing and is left out.
num_batches_tracked equal to the oracle's after K steps.

PTC_GPU_FREE_STEPS (default "3,10") changes the steps; PTC_GPU_SELFTEST=1 runs ptc on dnnl and
torch on the CPU (the variants are then thread counts 1, 2, 2).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'interop'))
import gpu_common as g  # noqa: E402

PART = 'c'
SLACK = 1e-5
CHAOTIC = 1e-2
BF16_MEANINGLESS = 0.5
PTC_TIMEOUT = 60


def torch_runs(case, init, x, y, kinds, steps):
    """{(kind name, step): state dict} for each (name, kind, variant) of kinds; kind: 'f64',
    'i32' (float32 storage), 'f32', 'bf16'; variant: what changes the order of sums."""
    import torch
    import torchvision
    import free_run as fr
    dev = torch.device(g.DEVICE)
    batches = fr.shard_batches(case, 0)
    out = {}
    for name, kind, variant in kinds:
        if g.DEVICE == 'cuda':
            torch.backends.cudnn.benchmark = variant == 'benchmark'
            torch.backends.cudnn.deterministic = variant == 'deterministic'
        else:
            torch.set_num_threads(int(variant))
        dtype = torch.float64 if kind in ('f64', 'i32') else torch.float32
        model = torchvision.models.resnet18(num_classes=10)
        model.load_state_dict(init)
        model = model.to(dev, dtype)
        if kind == 'i32':
            fr._store_float32(model)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=case.lr, momentum=fr.MOMENTUM,
                              weight_decay=fr.WD)
        for s in range(max(steps)):
            idx = batches[s]
            xb, yb = x[idx].to(dev, dtype), y[idx].to(dev)
            opt.zero_grad()
            if kind == 'bf16':
                with torch.autocast(g.DEVICE, dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(xb), yb)
            else:
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            if kind == 'i32':
                fr._round_state(model, opt)
            if s + 1 in steps:
                keep = torch.float64 if kind == 'f64' else torch.float32
                out[(name, s + 1)] = {k: (v.detach().to('cpu', keep).clone() if v.is_floating_point()
                                          else v.detach().cpu().clone())
                                      for k, v in model.state_dict().items()}
        print('torch %s (%s): done' % (name, variant))
        sys.stdout.flush()
    return out


def run_ptc(tmp, case, k, precision):
    import subprocess
    import torch
    import free_run as fr
    save = os.path.join(tmp, 'ptc-%s-%d.pth' % (precision, k))
    args = [g.PTC, 'train', '--dataset', 'cifar10', '--data', os.path.join(tmp, 'cifar'),
            '--init', os.path.join(tmp, 'init.pth'), '--max-steps', str(k), '--no-shuffle',
            '--no-augment', '--batch-size', str(case.batch), '--epochs', '1', '--eval-every',
            '0', '--lr', repr(case.lr), '--momentum', repr(fr.MOMENTUM), '--weight-decay',
            repr(fr.WD), '--save', save, '--no-progress'] + g.BACKEND_ARGS
    if precision == 'bf16':
        args += ['--precision', 'bf16']
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=PTC_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, 'no result after %d s' % PTC_TIMEOUT
    text = p.stdout.decode(errors='replace')
    print('$ ' + ' '.join(args) + '\n' + text)
    if p.returncode != 0:
        return None, 'ptc train exited %d: %s' % (p.returncode, text.strip()[-300:])
    return torch.load(save, weights_only=True, map_location='cpu'), ''


def median(v):
    s = sorted(v)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def check():
    import tempfile
    import torch
    import torchvision
    import free_run as fr
    g.torch_setup_f32()
    steps = sorted(int(s) for s in os.environ.get('PTC_GPU_FREE_STEPS', '3,10').split(','))
    case = fr.Case(1, 32, 0.01, steps, seed=20261201)
    has_bf16 = g.ptc_has_option('--precision')
    with tempfile.TemporaryDirectory(prefix='free-', dir=g.WORK) as tmp:
        x, y = fr.write_data(os.path.join(tmp, 'cifar'), case, case.seed)
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)
        init = {k: v.clone() for k, v in model.state_dict().items()}
        torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))
        ptc = {}
        for prec in ('f32', 'bf16'):
            if prec == 'bf16' and not has_bf16:
                continue
            for k in steps:
                ptc[(prec, k)] = run_ptc(tmp, case, k, prec)
        if g.DEVICE == 'cuda':
            v32, v16 = ('default', 'benchmark', 'deterministic'), ('default', 'benchmark')
        else:
            v32, v16 = ('1', '2', '3'), ('2',)
        kinds = [('f64', 'f64', v32[0]), ('i32', 'i32', v32[0])]
        kinds += [('f32-%s' % v, 'f32', v) for v in v32]
        kinds += [('bf16-%s' % v, 'bf16', v) for v in v16]
        got = torch_runs(case, init, x, y, kinds, steps)
    for prec in ('f32', 'bf16'):
        for k in steps:
            what = '%s, %d free steps (batch 32)' % (prec, k)
            if prec == 'bf16' and not has_bf16:
                g.row(PART, what, 'ptc train has no --precision',
                      'not run: no --precision' if g.SELFTEST else 'FAIL')
                continue
            sd, why = ptc[(prec, k)]
            if sd is None:
                g.row(PART, what, why, 'FAIL')
                continue
            o = got[('f64', k)]
            err = fr.update_error(sd, o, init)
            if not fr.counters_equal(sd, o):
                g.row(PART, what + ': num_batches_tracked', 'differ from torch\'s', 'FAIL')
            if prec == 'f32':
                per = [fr.update_error(got[('f32-%s' % v, k)], o, init) for v in v32]
                i32 = fr.update_error(got[('i32', k)], o, init)
                floor = max(median(per), i32)
                fig = 'ptc %.2e; torch32 %s (median %.2e), f32-storage %.2e; bound %.2e' % (
                    err, '/'.join('%.1e' % e for e in per), median(per), i32, 2 * floor + SLACK)
                if per[0] > CHAOTIC:
                    g.row(PART, what, fig, 'left out: chaotic')
                    continue
            else:
                per = [fr.update_error(got[('bf16-%s' % v, k)], o, init) for v in v16]
                floor = median(per)
                fig = 'ptc %.2e; torch autocast %s (median %.2e); bound %.2e' % (
                    err, '/'.join('%.1e' % e for e in per), floor, 2 * floor + SLACK)
                if floor > BF16_MEANINGLESS:
                    g.row(PART, what, fig, 'left out: torch bf16 > %g' % BF16_MEANINGLESS)
                    continue
            g.row(PART, what, fig, 'PASS' if err <= 2 * floor + SLACK else 'FAIL')


if __name__ == '__main__':
    g.main(PART, check)
