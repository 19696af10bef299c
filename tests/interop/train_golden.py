#!/usr/bin/env python3
"""Golden tests of ptc's ResNet-18 training in one process against a float64 oracle.

torch float64 is the oracle and torch float32 the yardstick: ptc passes a comparison when its
error to the oracle is at most 2 x torch float32's own error + 1e-5 (free_run.py says why, and
how cases are run). For each backend ptc has (ref, and dnnl when built: a build configured with
oneDNN that cannot train on dnnl fails here):

  1. one forward and backward from the initialisation (tests/interop/train_step on the first 16
     of 48 Fashion-MNIST training images in CIFAR-10 format, padded to 32x32: flat backgrounds
     give the max pool exact ties), each against the oracle: eval-mode logits, train-mode logits,
     the loss, every parameter's gradient (all together), the running statistics after that
     forward; num_batches_tracked exact. The dnnl backend's logits and gradients also against
     ref's (parity within 1e-4 and 1e-3 relative, as before);
  2. free-running cases, on random images (free_run.Case): 1 process at batch 32, lr 0.01,
     after 2 and 3 steps; 1 process at batch 16, lr 0.05, after 2 steps. Each step K also from
     ptc's own state after K - 1 steps (its checkpoint), momentum buffers included;
  3. the state dict ptc saved loads into torchvision's resnet18 with strict keys.

PTC_TRAIN_CHECK=quick (the sanitizer build) runs item 1 and the case at batch 16 only.
Exit 0 when everything holds, 1 otherwise, 77 without torch/torchvision, 99 when ptc is not built.
"""
import gzip
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as ex:  # pragma: no cover
    print('SKIP: %s' % ex)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import free_run as fr  # noqa: E402

SRC = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get('top_builddir') or SRC
STEP = os.path.join(BUILD, 'tests', 'interop', 'train_step')
PTC = os.path.join(BUILD, 'tools', 'ptc')
QUICK = os.environ.get('PTC_TRAIN_CHECK') == 'quick'
FASHION = '/usr/share/datasets/fashion-mnist'
N_IMAGES, BATCH = 48, 16

CASES = [fr.Case(1, 16, 0.05, [2], seed=20261202)] if QUICK else [
    fr.Case(1, 32, 0.01, [2, 3], seed=20261201),
    fr.Case(1, 16, 0.05, [2], seed=20261202),
]

v = fr.Verdicts()


def nrel(a, b):
    """||a - b|| / ||b|| in float64."""
    a, b = a.detach().double(), b.detach().double()
    scale = b.norm().item()
    return (a - b).norm().item() / (scale if scale > 0 else 1.0)


def joint(ts):
    return torch.cat([t.detach().double().reshape(-1) for t in ts])


def built_with(feature):
    """Whether config.h of the build says PTC_HAVE_<feature>."""
    try:
        with open(os.path.join(BUILD, 'config.h')) as f:
            return ('#define PTC_HAVE_%s 1' % feature) in f.read()
    except OSError:
        return False


def fashion_images():
    """The first Fashion-MNIST training images, padded to 32x32 and replicated to 3 channels as
    ptc presents them."""
    with gzip.open(os.path.join(FASHION, 'train-images-idx3-ubyte.gz')) as f:
        raw = f.read(16 + N_IMAGES * 784)
    with gzip.open(os.path.join(FASHION, 'train-labels-idx1-ubyte.gz')) as f:
        lab = f.read(8 + N_IMAGES)
    gray = np.frombuffer(raw[16:], dtype=np.uint8).reshape(N_IMAGES, 28, 28)
    images = np.zeros((N_IMAGES, 3, 32, 32), np.uint8)
    images[:, :, 2:30, 2:30] = gray[:, None]
    return images, np.frombuffer(lab[8:], dtype=np.uint8).copy()


def write_cifar(folder, images, labels):
    os.makedirs(folder)
    for name, n in (('data_batch_1.bin', len(labels)), ('test_batch.bin', 16)):
        with open(os.path.join(folder, name), 'wb') as f:
            for i in range(n):
                f.write(bytes([labels[i]]) + images[i].tobytes())


def loads_strictly(state_dict):
    try:
        torchvision.models.resnet18(num_classes=10).load_state_dict(state_dict, strict=True)
        return True
    except Exception as ex:  # noqa: BLE001
        print(ex)
        return False


def torch_step(init, x, y, dtype):
    """Eval logits, train logits, loss, gradients and state after one training forward."""
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(init)
    model = model.to(dtype)
    model.eval()
    with torch.no_grad():
        eval_logits = model(x.to(dtype))
    model.train()
    train_logits = model(x.to(dtype))
    loss = torch.nn.functional.cross_entropy(train_logits, y)
    loss.backward()
    return {'eval_logits': eval_logits.detach(), 'train_logits': train_logits.detach(),
            'loss': loss.item(), 'grads': {n: p.grad for n, p in model.named_parameters()},
            'state': model.state_dict()}


def golden_step(tmp, init, x, y, backend, oracle, t32):
    out = os.path.join(tmp, 'step-%s.pth' % backend)
    p = subprocess.run([STEP, backend, os.path.join(tmp, 'init.pth'), os.path.join(tmp, 'fashion'),
                        str(BATCH), out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not v.check(p.returncode == 0, '%s: train_step failed: %s' % (backend,
                                                                      p.stdout.decode()[-500:])):
        return None
    got = torch.load(out, weights_only=True)
    names = list(oracle['grads'])
    v.check(list(got['grads'].keys()) == names, '%s: gradient names differ' % backend)
    running = [k for k in oracle['state'] if '.running_' in k]
    figures = [
        ('eval logits', lambda r: r['eval_logits']),
        ('train logits', lambda r: r['train_logits']),
        ('loss', lambda r: torch.tensor([float(r['loss'])], dtype=torch.float64)),
        ('every gradient', lambda r: joint([r['grads'][n] for n in names])),
        ('running statistics', lambda r: joint([r['state'][k] for k in running])),
    ]
    print('%s: one step from the initialisation (16 Fashion-MNIST images), error to the oracle:'
          % backend)
    for what, get in figures:
        t = nrel(get(t32), get(oracle))
        v.judge('%s: %s' % (backend, what), [('torch32', t)], nrel(get(got), get(oracle)), t)
    worst = max(names, key=lambda n: nrel(got['grads'][n], oracle['grads'][n]))
    print('  (worst single gradient: %s, %.2e; torch32 %.2e)'
          % (worst, nrel(got['grads'][worst], oracle['grads'][worst]),
             nrel(t32['grads'][worst], oracle['grads'][worst])))
    for k, val in oracle['state'].items():
        if k.endswith('num_batches_tracked'):
            v.check(int(got['state'][k]) == int(val), '%s: %s = %s, torch %s'
                    % (backend, k, int(got['state'][k]), int(val)))
    return got


def main():
    for f in (STEP, PTC):
        if not os.access(f, os.X_OK):
            print('cannot run: %s not built' % f)
            return 99
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix='ptc-golden-') as tmp:
        backends, why = fr.available_backends(PTC, tmp)
        if 'dnnl' not in backends:
            if built_with('DNNL'):
                v.check(False, 'ptc was built with oneDNN but cannot run the dnnl backend: %s'
                        % why)
            else:
                print('dnnl: not built (configure found no oneDNN); ref only')
        # 1. one step from the initialisation, on Fashion-MNIST images
        if os.path.isdir(FASHION):
            images, labels = fashion_images()
            write_cifar(os.path.join(tmp, 'fashion'), images, labels)
            torch.manual_seed(0)
            model = torchvision.models.resnet18(num_classes=10)
            init = {k: t.clone() for k, t in model.state_dict().items()}
            torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))
            x = fr.normalise(images[:BATCH])
            y = torch.from_numpy(labels[:BATCH].astype(np.int64))
            oracle = torch_step(init, x, y, torch.float64)
            t32 = torch_step(init, x, y, torch.float32)
            results = {b: golden_step(tmp, init, x, y, b, oracle, t32) for b in backends}
            r, d = results.get('ref'), results.get('dnnl')
            if r is not None and d is not None:
                e = max(nrel(d['train_logits'], r['train_logits']),
                        nrel(d['eval_logits'], r['eval_logits']))
                g = nrel(joint(d['grads'].values()), joint(r['grads'].values()))
                v.check(e <= 1e-4 and g <= 1e-3, 'dnnl vs ref: logits %.1e, gradients %.1e'
                        % (e, g))
                print('parity dnnl vs ref: logits %.1e, gradients %.1e' % (e, g))
        else:
            v.check(False, '%s is missing (apt-get install dataset-fashion-mnist)' % FASHION)
        # 2. free-running cases and each step from ptc's own state
        finals = {}
        for case in CASES:
            fr.golden_case(PTC, tmp, case, backends, v, keep=finals)
        # 3. the saved state dicts load into torchvision
        for b, sd in finals.items():
            v.check(loads_strictly(sd), '%s: torchvision does not load the saved state dict '
                    'strictly' % b)
    fr.summary(v)
    v.check(v.checked > 0, 'nothing was compared')
    return 1 if v.failures else 0


if __name__ == '__main__':
    sys.exit(main())
