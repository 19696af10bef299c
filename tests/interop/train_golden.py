#!/usr/bin/env python3
"""Golden tests of ptc's ResNet-18 against PyTorch 2.6 (torch and torchvision are the oracle).

A small dataset is written in CIFAR-10's binary format (random images, fixed seed) and a
torchvision resnet18(num_classes=10) is initialised by torch (seed 0) and saved. Then, for each
backend ptc has (ref, and dnnl when built):

  1. logits: tests/interop/train_step runs ptc's model on the first N images in eval mode and in
     training mode; each must be within relative error 1e-4 of torch's (max |a - b| / max |b|);
  2. gradients: after one backward of the mean cross-entropy, every parameter's gradient within
     relative error 1e-3 of torch's, tensor-wise, and the loss within 1e-5;
  3. running statistics after that training forward within 1e-4, num_batches_tracked exact;
  4. three SGD steps: `ptc train --init INIT --max-steps 3 --no-shuffle --no-augment` (batch 8,
     lr 0.01, momentum 0.9, weight decay 5e-4) against the same three steps in torch; every
     parameter's update (after - before) within relative error 1e-3, every running statistic
     within 1e-3, num_batches_tracked exact; and the state dict ptc saved loads into torchvision's
     resnet18 with strict keys.
Parity: the dnnl backend's logits and gradients within the same bounds of the ref backend's.

Exit 0 when everything holds, 1 otherwise, 77 without torch/torchvision.
"""
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
SRC = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get('top_builddir') or SRC
STEP = os.path.join(BUILD, 'tests', 'interop', 'train_step')
PTC = os.path.join(BUILD, 'tools', 'ptc')
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
N_IMAGES, BATCH, STEPS, LR = 48, 16, 3, 0.01

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print('FAIL:', what)
    return cond


def rel(a, b):
    """Max-norm relative error: max |a - b| / max |b|."""
    a = a.detach().double()
    b = b.detach().double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def nrel(a, b):
    """Tensor-wise (Frobenius) relative error: ||a - b|| / ||b||."""
    a = a.detach().double()
    b = b.detach().double()
    scale = b.norm().item()
    return (a - b).norm().item() / (scale if scale > 0 else 1.0)


FASHION = '/usr/share/datasets/fashion-mnist'


def source_images(rng):
    """The first Fashion-MNIST training images, padded to 32x32 and replicated to 3 channels as
    ptc presents them (real images: flat backgrounds give maxpool exact ties to break), or random
    images when the Debian package is not installed."""
    try:
        import gzip
        with gzip.open(os.path.join(FASHION, 'train-images-idx3-ubyte.gz')) as f:
            raw = f.read(16 + N_IMAGES * 784)
        with gzip.open(os.path.join(FASHION, 'train-labels-idx1-ubyte.gz')) as f:
            lab = f.read(8 + N_IMAGES)
        gray = np.frombuffer(raw[16:], dtype=np.uint8).reshape(N_IMAGES, 28, 28)
        images = np.zeros((N_IMAGES, 3, 32, 32), np.uint8)
        images[:, :, 2:30, 2:30] = gray[:, None]
        return images, np.frombuffer(lab[8:], dtype=np.uint8).copy(), 'Fashion-MNIST'
    except OSError:
        return (rng.integers(0, 256, size=(N_IMAGES, 3, 32, 32), dtype=np.uint8),
                rng.integers(0, 10, size=N_IMAGES, dtype=np.uint8), 'random')


def write_cifar(folder, rng):
    os.makedirs(folder)
    images, labels, kind = source_images(rng)
    print('data: %d %s images in CIFAR-10 binary format' % (N_IMAGES, kind))
    with open(os.path.join(folder, 'data_batch_1.bin'), 'wb') as f:
        for i in range(N_IMAGES):
            f.write(bytes([labels[i]]) + images[i].tobytes())
    with open(os.path.join(folder, 'test_batch.bin'), 'wb') as f:
        for i in range(16):
            f.write(bytes([labels[i]]) + images[i].tobytes())
    return images, labels


def loads_strictly(state_dict):
    """Whether torchvision's resnet18(num_classes=10) loads state_dict with strict keys."""
    try:
        torchvision.models.resnet18(num_classes=10).load_state_dict(state_dict, strict=True)
        return True
    except Exception as ex:  # noqa: BLE001
        print(ex)
        return False


def normalise(images):
    x = torch.from_numpy(images).float() / 255.0
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - mean) / std


def load(path):
    return torch.load(path, weights_only=True, map_location='cpu')


def golden_step(tmp, init_sd, x, y, backend):
    out = os.path.join(tmp, 'step-%s.pth' % backend)
    p = subprocess.run([STEP, backend, os.path.join(tmp, 'init.pth'), os.path.join(tmp, 'cifar'),
                        str(BATCH), out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not check(p.returncode == 0, '%s: train_step failed: %s' % (backend, p.stdout.decode()[-500:])):
        return None
    got = load(out)
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(init_sd)
    model.eval()
    with torch.no_grad():
        eval_logits = model(x[:BATCH])
    model.train()
    train_logits = model(x[:BATCH])
    loss = torch.nn.functional.cross_entropy(train_logits, y[:BATCH])
    loss.backward()
    e1 = rel(got['eval_logits'], eval_logits)
    e2 = rel(got['train_logits'], train_logits)
    check(e1 <= 1e-4, '%s: eval logits relative error %.2e > 1e-4' % (backend, e1))
    check(e2 <= 1e-4, '%s: train logits relative error %.2e > 1e-4' % (backend, e2))
    check(abs(got['loss'] - loss.item()) <= 1e-5 * max(1.0, abs(loss.item())),
          '%s: loss %.8f, torch %.8f' % (backend, got['loss'], loss.item()))
    worst_g, worst_name = 0.0, ''
    params = dict(model.named_parameters())
    check(list(got['grads'].keys()) == list(params.keys()), '%s: gradient names differ' % backend)
    for name, p_ in params.items():
        e = rel(got['grads'][name], p_.grad)
        if e > worst_g:
            worst_g, worst_name = e, name
        check(e <= 1e-3, '%s: gradient of %s relative error %.2e > 1e-3' % (backend, name, e))
    sd = model.state_dict()
    worst_s = 0.0
    for k, v in sd.items():
        if k.endswith('num_batches_tracked'):
            check(int(got['state'][k]) == int(v), '%s: %s = %s, torch %s' % (backend, k, got['state'][k], v))
        elif 'running' in k:
            e = rel(got['state'][k], v)
            worst_s = max(worst_s, e)
            check(e <= 1e-4, '%s: %s relative error %.2e' % (backend, k, e))
    print('%s: logits eval %.1e train %.1e; loss %.6f (torch %.6f); worst gradient %.1e (%s); '
          'running stats %.1e' % (backend, e1, e2, got['loss'], loss.item(), worst_g, worst_name,
                                  worst_s))
    return got


def torch_steps(init_sd, x, y, threads):
    """STEPS steps of torch.optim.SGD in torch with the given number of threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(init_sd)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
    for s in range(STEPS):
        xb, yb = x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    torch.set_num_threads(saved)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def ptc_train(tmp, backend, steps):
    """ptc train --max-steps steps; returns (state dict, training checkpoint) or None."""
    save = os.path.join(tmp, 'after-%s-%d.pth' % (backend, steps))
    ckpt = os.path.join(tmp, 'ckpt-%s-%d.pth' % (backend, steps))
    cmd = [PTC, 'train', '--dataset', 'cifar10', '--data', os.path.join(tmp, 'cifar'),
           '--init', os.path.join(tmp, 'init.pth'), '--max-steps', str(steps), '--no-shuffle',
           '--no-augment', '--batch-size', str(BATCH), '--epochs', '1', '--eval-every', '0',
           '--lr', str(LR), '--backend', backend, '--save', save, '--checkpoint', ckpt,
           '--no-progress']
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not check(p.returncode == 0, '%s: ptc train failed: %s' % (backend, p.stdout.decode()[-800:])):
        return None
    return load(save), load(ckpt)


def compare_state(backend, what, got, want, before, bound):
    """Parameters by their update from before, buffers by value, counters exactly."""
    worst, name = 0.0, ''
    check(list(got.keys()) == list(want.keys()), '%s: %s: state dict keys differ' % (backend, what))
    for k, v in want.items():
        if k.endswith('num_batches_tracked'):
            check(int(got[k]) == int(v), '%s: %s: %s = %s, torch %s' % (backend, what, k, got[k], v))
            continue
        e = nrel(got[k], v) if 'running' in k else nrel(got[k] - before[k], v - before[k])
        if e > worst:
            worst, name = e, k
        check(e <= bound, '%s: %s: %s relative error %.2e > %g' % (backend, what, k, e, bound))
    return worst, name


def golden_train(tmp, init_sd, x, y, backend):
    """Each of STEPS steps of ptc train against one torch step from the same state (ptc's model
    and optimizer state after the steps before, loaded into torch.optim.SGD), then the free
    run of STEPS steps against torch's, beside torch's own difference between 1 and 2 threads."""
    runs = [ptc_train(tmp, backend, k) for k in range(1, STEPS + 1)]
    if any(r is None for r in runs):
        return
    worst_step = 0.0
    for k in range(1, STEPS + 1):
        model = torchvision.models.resnet18(num_classes=10)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
        if k == 1:
            before = init_sd
            model.load_state_dict(init_sd)
        else:
            prev = runs[k - 2][1]
            before = prev['model_state_dict']
            model.load_state_dict(before)
            opt.load_state_dict(prev['optimizer_state_dict'])  # ptc's layout, read by torch
        model.train()
        xb, yb = x[(k - 1) * BATCH:k * BATCH], y[(k - 1) * BATCH:k * BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        got = runs[k - 1][1]
        w, name = compare_state(backend, 'step %d' % k, got['model_state_dict'],
                                model.state_dict(), before, 1e-3)
        # the momentum buffers ptc saved against torch's after the same step
        st = opt.state_dict()['state']
        mom = max(nrel(got['optimizer_state_dict']['state'][i]['momentum_buffer'],
                       st[i]['momentum_buffer']) for i in st)
        check(mom <= 1e-3, '%s: step %d: momentum buffers relative error %.2e' % (backend, k, mom))
        check(got['epoch'] == 1 and got['step'] == k, '%s: checkpoint epoch/step %s/%s'
              % (backend, got['epoch'], got['step']))
        worst_step = max(worst_step, w, mom)
    final = runs[-1][0]
    want = torch_steps(init_sd, x, y, 2)
    other = torch_steps(init_sd, x, y, 1)
    keys = [k for k in want if not k.endswith('num_batches_tracked') and 'running' not in k]
    noise = max(nrel(other[k] - init_sd[k], want[k] - init_sd[k]) for k in keys)
    free = max(nrel(final[k] - init_sd[k], want[k] - init_sd[k]) for k in keys)
    check(free <= 0.5, '%s: %d free-running steps differ from torch by %.2e' % (backend, STEPS, free))
    for k in want:
        if k.endswith('num_batches_tracked'):
            check(int(final[k]) == int(want[k]) == STEPS, '%s: %s = %s' % (backend, k, final[k]))
    loaded = loads_strictly(final)
    check(loaded, '%s: torchvision does not load the saved state dict strictly' % backend)
    print('%s: each of %d SGD steps from the same state: worst relative error %.1e (bound 1e-3; '
          'momentum buffers included); %d free-running steps: %.1e (torch 1 thread against 2: '
          '%.1e); torchvision loads the state dict strictly: %s'
          % (backend, STEPS, worst_step, STEPS, free, noise, loaded))


def main():
    for f in (STEP, PTC):
        if not os.access(f, os.X_OK):
            print('cannot run: %s not built' % f)
            return 99
    torch.manual_seed(0)
    torch.set_num_threads(2)
    rng = np.random.default_rng(20261130)
    with tempfile.TemporaryDirectory(prefix='ptc-golden-') as tmp:
        images, labels = write_cifar(os.path.join(tmp, 'cifar'), rng)
        x = normalise(images)
        y = torch.from_numpy(labels.astype(np.int64))
        model = torchvision.models.resnet18(num_classes=10)
        init_sd = {k: v.clone() for k, v in model.state_dict().items()}
        torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))
        backends = ['ref']
        probe = subprocess.run([PTC, 'train', '--backend', 'dnnl', '--help'],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        step_probe = subprocess.run([STEP, 'dnnl', '-', '-', '1', '-'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        if b'unknown backend' not in step_probe.stderr and probe.returncode == 0:
            backends.append('dnnl')
        results = {}
        for b in backends:
            results[b] = golden_step(tmp, init_sd, x, y, b)
            golden_train(tmp, init_sd, x, y, b)
        if results.get('ref') is not None and results.get('dnnl') is not None:
            r, d = results['ref'], results['dnnl']
            e = max(rel(d['train_logits'], r['train_logits']), rel(d['eval_logits'], r['eval_logits']))
            g = max(rel(d['grads'][k], r['grads'][k]) for k in r['grads'])
            check(e <= 1e-4 and g <= 1e-3, 'dnnl vs ref: logits %.1e, gradients %.1e' % (e, g))
            print('parity dnnl vs ref: logits %.1e, worst gradient %.1e' % (e, g))
    print('%d failures' % len(failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
