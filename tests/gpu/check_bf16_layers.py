#!/usr/bin/env python3
"""check_bf16_layers.py - part b of the GPU tier (tests/gpu/run.sh): ptc's bf16 layers against
torch.autocast on the same GPU, both judged against a float64 oracle.

Input: the folder that `tests/gpu/cuda_layers --bf16-dump DIR` writes: the inputs of a few layers
and ptc's outputs computed with --precision bf16, as raw little-endian float32 files in torch's
layout (NCHW activations, OIHW convolution weights, [out][in] linear weights), and DIR/manifest.json:

  {"version": 1,
   "layers": [{"name": "layer1.0.conv1", "op": "conv2d", "attrs": {"stride": 1, "padding": 1},
               "tensors": {"x": {"file": "l0.x.f32", "shape": [128, 64, 8, 8]}, ...}}, ...]}

ops, their attrs, inputs and the outputs ptc wrote (any output may be left out; inputs may not):
  conv2d         attrs stride, padding; inputs x, weight, dy; outputs y, dx, dweight (no bias)
  linear         inputs x, weight, bias, dy; outputs y, dx, dweight, dbias
  batchnorm2d    attrs eps; training mode (batch statistics); inputs x, weight, bias, dy;
                 outputs y, dx, dweight, dbias. x is taken as bf16 (as a bf16 network's
                 convolutions hand it over); the statistics in float32
  cross_entropy  inputs logits [N][C], target [N] (class indices as floats), mean reduction;
                 outputs loss [1], dlogits (autocast computes it in float32)
Backward outputs are the gradients for the upstream gradient dy (for cross_entropy: of the loss).

For each output t: torch computes the layer under torch.autocast(device, dtype=torch.bfloat16) from
the float32 inputs (dy rounded to the output's dtype, as a bf16 backward receives it) and again in
float64 (the oracle, from the same float32 inputs). err(t) = ||t - oracle|| / ||oracle||. Pass when
ptc's err <= 2 x torch autocast's err + 1e-6 (the 1e-6 for outputs both compute in float32, where
both errors are at float32's rounding).

--selftest DIR: writes a dump whose "ptc outputs" are torch's own autocast outputs on this device
(to check the plumbing on a CPU machine), then checks it.
Exit 0 when every output passes, 1 otherwise.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_common as g  # noqa: E402

PART = 'b'
SLACK = 1e-6
OPS = {
    'conv2d': (('x', 'weight', 'dy'), ('y', 'dx', 'dweight')),
    'linear': (('x', 'weight', 'bias', 'dy'), ('y', 'dx', 'dweight', 'dbias')),
    'batchnorm2d': (('x', 'weight', 'bias', 'dy'), ('y', 'dx', 'dweight', 'dbias')),
    'cross_entropy': (('logits', 'target'), ('loss', 'dlogits')),
}


def compute(op, attrs, ins, mode, dev):
    """The layer's outputs {name: float64 cpu tensor}. mode: 'autocast' or 'f64'."""
    import torch
    import torch.nn.functional as F
    dt = torch.float64 if mode == 'f64' else torch.float32
    t = {k: v.to(dev, dt).clone() for k, v in ins.items()}  # never the caller's tensors
    leaves = {}
    for k in ('x', 'weight', 'bias', 'logits'):
        if k in t:
            t[k].requires_grad_(True)
            leaves[k] = t[k]
    ctx = (torch.autocast(dev.type, dtype=torch.bfloat16) if mode == 'autocast'
           else torch.autocast(dev.type, enabled=False))
    with ctx:
        if op == 'conv2d':
            y = F.conv2d(t['x'], t['weight'], stride=int(attrs.get('stride', 1)),
                         padding=int(attrs.get('padding', 0)))
        elif op == 'linear':
            y = F.linear(t['x'], t['weight'], t['bias'])
        elif op == 'batchnorm2d':
            x = t['x'].to(torch.bfloat16) if mode == 'autocast' else t['x']
            y = F.batch_norm(x, None, None, t['weight'], t['bias'], training=True,
                             eps=float(attrs.get('eps', 1e-5)))
        elif op == 'cross_entropy':
            y = F.cross_entropy(t['logits'], t['target'].round().long().to(dev)).reshape(1)
        else:
            raise ValueError('unknown op %r' % op)
    if op == 'cross_entropy':
        y.sum().backward()
        return {'loss': y.detach().double().cpu(),
                'dlogits': leaves['logits'].grad.double().cpu()}
    y.backward(t['dy'].to(y.dtype))
    out = {'y': y.detach().double().cpu(), 'dx': leaves['x'].grad.double().cpu(),
           'dweight': leaves['weight'].grad.double().cpu()}
    if 'bias' in leaves:
        out['dbias'] = leaves['bias'].grad.double().cpu()
    return out


# The names tests/gpu/cuda_layers.c writes (its head comment, format "ptc-bf16-dump-1"): kinds
# "conv" (stride, pad) and "linear", tensors w, b, dw, db.
KINDS = {'conv': 'conv2d', 'linear': 'linear'}
TENSORS = {'w': 'weight', 'b': 'bias', 'dw': 'dweight', 'db': 'dbias'}


def from_cuda_layers(man):
    """cuda_layers' manifest in this script's version 1 form."""
    layers = []
    for L in man.get('layers', []):
        attrs = {}
        if L.get('kind') == 'conv':
            attrs = {'stride': L.get('stride', 1), 'padding': L.get('pad', 0)}
        layers.append({'name': L.get('name'), 'op': KINDS.get(L.get('kind'), L.get('kind')),
                       'attrs': attrs,
                       'tensors': {TENSORS.get(k, k): v for k, v in L.get('tensors', {}).items()}})
    return {'version': 1, 'layers': layers}


def read_dump(folder):
    import numpy as np
    import torch
    path = os.path.join(folder, 'manifest.json')
    with open(path) as f:
        man = json.load(f)
    if man.get('format') == 'ptc-bf16-dump-1':
        man = from_cuda_layers(man)
    if man.get('version') != 1 or not isinstance(man.get('layers'), list) or not man['layers']:
        raise ValueError('%s: not a version 1 manifest with a non-empty "layers" list' % path)

    def load(spec):
        shape = [int(s) for s in spec['shape']]
        a = np.fromfile(os.path.join(folder, spec['file']), dtype='<f4')
        n = int(np.prod(shape)) if shape else 1
        if a.size != n:
            raise ValueError('%s: %d floats, shape %s wants %d' % (spec['file'], a.size, shape, n))
        return torch.from_numpy(a.reshape(shape).copy())
    layers = []
    for i, L in enumerate(man['layers']):
        op = L.get('op')
        if op not in OPS:
            raise ValueError('layer %d (%s): unknown op %r' % (i, L.get('name'), op))
        need, outs = OPS[op]
        tens = L.get('tensors', {})
        missing = [k for k in need if k not in tens]
        if missing:
            raise ValueError('layer %s: inputs %s missing' % (L.get('name'), missing))
        ins = {k: load(tens[k]) for k in need}
        got = {k: load(tens[k]) for k in outs if k in tens}
        layers.append((L.get('name', 'layer%d' % i), op, L.get('attrs', {}), ins, got))
    return layers


def nrel(a, b):
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    s = b.norm().item()
    return (a - b).norm().item() / (s if s > 0 else 1.0)


def write_selftest(folder, dev):
    """A small dump: ptc's outputs are torch autocast's own (plumbing check only)."""
    import torch
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(1)
    specs = [
        ('conv1', 'conv2d', {'stride': 2, 'padding': 3},
         {'x': (8, 3, 32, 32), 'weight': (64, 3, 7, 7), 'dy': (8, 64, 16, 16)}),
        ('layer1.0.conv1', 'conv2d', {'stride': 1, 'padding': 1},
         {'x': (8, 64, 8, 8), 'weight': (64, 64, 3, 3), 'dy': (8, 64, 8, 8)}),
        ('bn1', 'batchnorm2d', {'eps': 1e-5},
         {'x': (8, 64, 8, 8), 'weight': (64,), 'bias': (64,), 'dy': (8, 64, 8, 8)}),
        ('fc', 'linear', {}, {'x': (8, 512), 'weight': (10, 512), 'bias': (10,), 'dy': (8, 10)}),
        ('loss', 'cross_entropy', {}, {'logits': (8, 10), 'target': (8,)}),
    ]
    man = {'version': 1, 'layers': []}
    for name, op, attrs, shapes in specs:
        ins = {k: torch.randn(s) for k, s in shapes.items()}
        if 'target' in ins:
            ins['target'] = torch.randint(0, 10, shapes['target']).float()
        outs = compute(op, attrs, ins, 'autocast', dev)
        tens = {}
        for k, v in list(ins.items()) + list(outs.items()):
            f = '%s.%s.f32' % (name, k)
            v.float().numpy().astype('<f4').tofile(os.path.join(folder, f))
            tens[k] = {'file': f, 'shape': list(v.shape)}
        man['layers'].append({'name': name, 'op': op, 'attrs': attrs, 'tensors': tens})
    with open(os.path.join(folder, 'manifest.json'), 'w') as f:
        json.dump(man, f, indent=1)


def check(folder):
    import torch
    dev = torch.device(g.DEVICE)
    g.torch_setup_f32()
    layers = read_dump(folder)
    for name, op, attrs, ins, got in layers:
        if not got:
            g.row(PART, '%s (%s)' % (name, op), 'no ptc output in the dump', 'FAIL')
            continue
        ac = compute(op, attrs, ins, 'autocast', dev)
        o = compute(op, attrs, ins, 'f64', dev)
        figs, ok = [], True
        for k, v in got.items():
            if tuple(v.shape) != tuple(o[k].shape):
                figs.append('%s: shape %s, torch %s' % (k, list(v.shape), list(o[k].shape)))
                ok = False
                continue
            ep, et = nrel(v, o[k]), nrel(ac[k], o[k])
            good = ep <= 2 * et + SLACK
            ok = ok and good
            figs.append('%s %.1e/%.1e%s' % (k, ep, et, '' if good else '!'))
        g.row(PART, 'bf16 %s (%s) ptc/torch err' % (name, op), ', '.join(figs),
              'PASS' if ok else 'FAIL')


if __name__ == '__main__':
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == '--selftest':
        import torch
        write_selftest(args[1], torch.device(g.DEVICE))
        args = args[1:]
    if len(args) != 1:
        sys.exit('usage: check_bf16_layers.py [--selftest] DUMPDIR')
    g.main(PART, lambda: check(args[0]))
