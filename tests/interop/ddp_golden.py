#!/usr/bin/env python3
"""Golden test of ptc's data-parallel training (2 ranks under mpirun) against PyTorch 2.6's
DistributedDataParallel (gloo, 2 processes): torch and torchvision are the oracle.

The data and the initial weights are train_golden.py's, through its helpers: 47 images in
CIFAR-10's binary format (the first Fashion-MNIST images, or random ones without the Debian
package), so that DistributedSampler pads the 2 shards to 24 images each (rank 1's last image is
image 0 again), and a torchvision resnet18(num_classes=10) initialised by torch (seed 0).

The recipe on both sides: DistributedSampler(shuffle=False), no augmentation, train_golden's
normalisation, batch 8 per process, SGD(lr 0.01, momentum 0.9, weight_decay 5e-4), one thread per
process, 3 steps. DDP averages the gradients of the two ranks and broadcasts rank 0's BatchNorm
buffers before every forward; rank 0 saves model.module.state_dict().

Checks, for each backend ptc has (ref, and dnnl when built), with
`mpirun -np 2 ptc train ... --max-steps K --checkpoint C` for K = 1, 2, 3:

  1. each step from the same state: ptc's step K against one torch DDP step from the state
     (weights, buffers and momentum) ptc's checkpoint of step K-1 holds, as train_golden does: the
     update of every parameter (after - before) within relative error 1e-3 tensor-wise
     (||ptc - torch|| / ||torch update||, the measure train_golden.py uses; the max-norm figure
     is printed beside it), every running_mean/var within 1e-3 relative, every
     num_batches_tracked exact, every momentum buffer within 1e-3. Free-running comparisons drift
     far beyond 1e-3 here: BatchNorm over 8 images, and over a 1x1 map in layer4, amplifies float
     noise step after step: torch's own DDP (1 thread per rank) against a one-process emulation
     of it at 2 threads (only the order of float operations differs) is about 1e-4 after one step
     and 1e-2 after three; that figure is printed beside ptc's.
  2. the 3 free-running steps against torch DDP's: printed, bounded only loosely (update error
     in the Frobenius norm at most 0.5, as train_golden does), num_batches_tracked == 3
     everywhere, and the saved state dict loads into torchvision's resnet18 with strict keys.
Then, once, with the ref backend:
  3. `mpirun --mca btl tcp,self` (TCP only, as between machines) and `ptc train --nproc 2` give
     the same bits as plain `mpirun -np 2` (two ranks: every sum has two terms, so the transport
     cannot change the order of additions);
  4. a 1-process run on rank 0's shard alone differs from the 2-rank result by far more than the
     bound (the test fails if the gradients were not averaged).

Exit 0 when everything holds, 1 otherwise, 77 (with a SKIP line) without torch/torchvision or
mpirun, or when ptc was built without MPI, 99 when ptc is not built. Uses about 70 CPU-seconds
(11 runs of ptc, one torch DDP group): 40 to 60 s on two idle cores, more on a busy machine.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_golden as tg  # noqa: E402  (exits 77 without torch/torchvision; defines only)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torchvision  # noqa: E402

WORLD, BATCH, STEPS = 2, 8, 3
LR, MOMENTUM, WD = 0.01, 0.9, 5e-4
N_IMAGES = 47  # DistributedSampler pads to 48: 3 full batches of 8 per rank
BOUND = 1e-3
FREE_BOUND = 0.5
PTC = tg.PTC
check, rel = tg.check, tg.rel
NOT_BUILT = re.compile(r'not built with MPI|built without MPI|without MPI support|'
                       r'MPI support (is )?not (built|compiled)|no MPI support', re.I)


def shards(n):
    """Every rank's indices, as torch's DistributedSampler(shuffle=False) gives them."""
    ds = torch.utils.data.TensorDataset(torch.zeros(n))
    return [list(torch.utils.data.DistributedSampler(ds, num_replicas=WORLD, rank=r, shuffle=False))
            for r in range(WORLD)]


def write_split(folder, images, labels, test_images, test_labels):
    os.makedirs(folder)
    for name, im, lab in (('data_batch_1.bin', images, labels),
                          ('test_batch.bin', test_images, test_labels)):
        with open(os.path.join(folder, name), 'wb') as f:
            for i in range(len(lab)):
                f.write(bytes([lab[i]]) + im[i].tobytes())


# ---- torch DDP ----------------------------------------------------------------------------------
def ddp_worker(rank, port, tmp, jobs):
    """One rank of torch DDP. jobs: (name, start checkpoint or None, first step, steps); rank 0
    saves {"model": state dict, "optimizer": SGD state dict} to tmp/torch-NAME.pth for each."""
    import datetime
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    xy = torch.load(os.path.join(tmp, 'xy.pt'), weights_only=True)
    ds = torch.utils.data.TensorDataset(xy['x'], xy['y'])
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=WORLD, rank=rank, shuffle=False)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler))
    init = torch.load(os.path.join(tmp, 'init.pth'), weights_only=True)
    for name, start, first, n in jobs:
        model = torchvision.models.resnet18(num_classes=10)
        ck = torch.load(start, weights_only=True) if start else None
        model.load_state_dict(ck['model_state_dict'] if ck else init)
        model.train()
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcast_buffers=True
        opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
        if ck:
            opt.load_state_dict(ck['optimizer_state_dict'])  # ptc's layout, read by torch
        for s in range(first, first + n):
            xb, yb = batches[s]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
        if rank == 0:
            torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()},
                       os.path.join(tmp, 'torch-%s.pth' % name))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torch_ddp(tmp, jobs):
    """Runs the jobs in one 2-process gloo group; returns {name: result} or None."""
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    try:
        mp.spawn(ddp_worker, args=(free_port(), tmp, jobs), nprocs=WORLD, join=True)
    except Exception as ex:  # noqa: BLE001 (ProcessRaisedException and friends)
        check(False, 'torch DDP failed: %s' % str(ex)[-800:])
        return None
    return {j[0]: tg.load(os.path.join(tmp, 'torch-%s.pth' % j[0])) for j in jobs}


def torch_emulated(init_sd, x, y, sh):
    """The same 3 DDP steps in one process at 2 threads: each rank's forward on its batch (rank
    1's buffer updates discarded, as broadcast_buffers does), the mean of the two losses. At 1
    thread this gives DDP's bits; at 2 only the order of float operations differs, which shows how
    far torch drifts from itself."""
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(init_sd)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for s in range(STEPS):
        opt.zero_grad()
        losses = []
        for r in range(WORLD):
            if r == 1:
                kept = {k: v.clone() for k, v in model.named_buffers()}
            b = sh[r][s * BATCH:(s + 1) * BATCH]
            losses.append(torch.nn.functional.cross_entropy(model(x[b]), y[b]))
        (sum(losses) / WORLD).backward()  # before the buffers change again: autograd saw them
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(kept[k])
        opt.step()
    torch.set_num_threads(saved)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---- ptc ----------------------------------------------------------------------------------------
def ptc_train(tmp, tag, steps, backend='ref', launch='mpirun', data='cifar', mca=()):
    """Runs ptc train; returns (state dict, checkpoint, output) or (None, None, output)."""
    save = os.path.join(tmp, 'ptc-%s.pth' % tag)
    ckpt = os.path.join(tmp, 'ckpt-%s.pth' % tag)
    args = ['train', '--dataset', 'cifar10', '--data', os.path.join(tmp, data),
            '--init', os.path.join(tmp, 'init.pth'), '--max-steps', str(steps), '--no-shuffle',
            '--no-augment', '--batch-size', str(BATCH), '--epochs', '1', '--eval-every', '0',
            '--lr', str(LR), '--momentum', str(MOMENTUM), '--weight-decay', str(WD),
            '--threads', '1', '--backend', backend, '--save', save, '--checkpoint', ckpt,
            '--no-progress']
    if launch == 'mpirun':
        cmd = [shutil.which('mpirun'), '--allow-run-as-root', '--oversubscribe']
        for m in mca:
            cmd += ['--mca'] + list(m)
        cmd += ['-np', str(WORLD), PTC] + args
    elif launch == 'nproc':
        cmd = [PTC, args[0], '--nproc', str(WORLD)] + args[1:]  # adds --allow-run-as-root itself
    else:
        cmd = [PTC] + args
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=300)
        out, rc = p.stdout.decode(errors='replace'), p.returncode
    except subprocess.TimeoutExpired:
        out, rc = 'timed out after 300 s', -1
    if rc != 0:
        return None, None, out
    return tg.load(save), tg.load(ckpt), out


def ran(result, what):
    return check(result[0] is not None, '%s failed: %s' % (what, result[2][-1200:]))


def compare_step(what, got_ck, want, before):
    """ptc's checkpoint after a step against torch's result of the same step from the same
    state: updates of parameters, running statistics, counters, momentum buffers."""
    got = got_ck['model_state_dict']
    check(list(got.keys()) == list(want['model'].keys()), '%s: state dict keys differ' % what)
    w_par = w_run = fro = 0.0
    n_par = n_run = ''
    for k, v in want['model'].items():
        if k not in got:
            continue
        if k.endswith('num_batches_tracked'):
            check(int(got[k]) == int(v), '%s: %s = %s, torch %s' % (what, k, int(got[k]), int(v)))
        elif 'running' in k:
            e = tg.nrel(got[k], v)
            if e >= w_run:
                w_run, n_run = e, k
            check(e <= BOUND, '%s: %s relative error %.2e > %g' % (what, k, e, BOUND))
        else:
            # asserted tensor-wise (Frobenius), as train_golden does; the max-norm is reported
            e = tg.nrel(got[k] - before[k], v - before[k])
            if e >= fro:
                fro, n_par = e, k
            w_par = max(w_par, rel(got[k] - before[k], v - before[k]))
            check(e <= BOUND, '%s: %s update relative error %.2e > %g' % (what, k, e, BOUND))
    want_st = want['optimizer']['state']
    got_st = got_ck['optimizer_state_dict']['state']
    mom = 0.0
    for i in want_st:
        if i not in got_st:
            check(False, '%s: no momentum buffer %s in ptc checkpoint' % (what, i))
            continue
        mom = max(mom, tg.nrel(got_st[i]['momentum_buffer'], want_st[i]['momentum_buffer']))
    check(mom <= BOUND, '%s: momentum buffers relative error %.2e > %g' % (what, mom, BOUND))
    return w_par, n_par, w_run, n_run, mom, fro


def update_rel(got, want, before):
    """Worst parameter-update relative error and worst running-statistics relative error, both
    max-norm (rel), and the worst parameter-update error in the Frobenius norm (nrel)."""
    keys = [k for k in want if not k.endswith('num_batches_tracked')]
    par = max(rel(got[k] - before[k], want[k] - before[k]) for k in keys if 'running' not in k)
    run = max(rel(got[k], want[k]) for k in keys if 'running' in k)
    fro = max(tg.nrel(got[k] - before[k], want[k] - before[k]) for k in keys if 'running' not in k)
    return par, run, fro


def same_bits(a, b):
    return list(a.keys()) == list(b.keys()) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k])
        for k in a)


def main():
    if not os.access(PTC, os.X_OK):
        print('cannot run: %s not built' % PTC)
        return 99
    if not shutil.which('mpirun'):
        print('SKIP: no mpirun on PATH (install OpenMPI)')
        return 77
    helptext = subprocess.run([PTC, 'train', '--help'], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT).stdout.decode(errors='replace')
    if '--nproc' not in helptext:
        print('cannot run: `ptc train --help` lists no --nproc (ptc without data-parallel training)')
        return 99
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(20261130)
    tmp = tempfile.mkdtemp(prefix='ptc-ddp-golden-')
    try:
        kept, tg.N_IMAGES = tg.N_IMAGES, N_IMAGES  # source_images() reads its module's count
        images, labels, kind = tg.source_images(rng)
        tg.N_IMAGES = kept
        print('data: %d %s images in CIFAR-10 binary format: 2 shards of 24 (rank 1 ends with '
              'image 0 again), batch %d per rank' % (N_IMAGES, kind, BATCH))
        write_split(os.path.join(tmp, 'cifar'), images, labels, images[:16], labels[:16])
        sh = shards(N_IMAGES)
        write_split(os.path.join(tmp, 'rank0'), images[sh[0]], labels[sh[0]], images[:16],
                    labels[:16])
        x = tg.normalise(images)
        y = torch.from_numpy(labels.astype(np.int64))
        torch.save({'x': x, 'y': y}, os.path.join(tmp, 'xy.pt'))
        model = torchvision.models.resnet18(num_classes=10)
        init_sd = {k: v.clone() for k, v in model.state_dict().items()}
        torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))

        # `ptc train --nproc 2` first: a ptc built without MPI says so, and the test is skipped.
        nproc = ptc_train(tmp, 'nproc', STEPS, launch='nproc')
        if nproc[0] is None and NOT_BUILT.search(nproc[2]):
            line = next(ln for ln in nproc[2].splitlines() if NOT_BUILT.search(ln))
            print('SKIP: ptc was built without MPI: %s' % line.strip())
            return 77
        ran(nproc, 'ptc train --nproc 2')

        # `ptc train --backend X --help` succeeds for any X; an evaluation of one image does not.
        backends = ['ref']
        probe = subprocess.run([PTC, 'eval', '--weights', os.path.join(tmp, 'init.pth'),
                                '--dataset', 'cifar10', '--data', os.path.join(tmp, 'cifar'),
                                '--backend', 'dnnl', '--max-samples', '1', '--batch-size', '1'],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if probe.returncode == 0:
            backends.append('dnnl')
        else:
            print('dnnl: not tested: %s' % probe.stdout.decode(errors='replace').strip()[-200:])
        runs = {}
        for b in backends:
            runs[b] = [ptc_train(tmp, '%s-%d' % (b, k), k, backend=b) for k in range(1, STEPS + 1)]
            for k, r in enumerate(runs[b], 1):
                ran(r, 'mpirun -np 2 ptc train --backend %s --max-steps %d' % (b, k))
        tcp = ptc_train(tmp, 'tcp', STEPS, mca=[('btl', 'tcp,self')])
        ran(tcp, 'mpirun --mca btl tcp,self -np 2 ptc train')
        single = ptc_train(tmp, 'single', STEPS, launch='single', data='rank0')
        ran(single, 'ptc train (1 process, rank 0\'s shard)')

        jobs = [('free', None, 0, STEPS), ('step1', None, 0, 1)]
        for b in backends:
            for k in range(2, STEPS + 1):
                if runs[b][k - 2][1] is not None:
                    jobs.append(('%s-%d' % (b, k), os.path.join(tmp, 'ckpt-%s-%d.pth' % (b, k - 1)),
                                 k - 1, 1))
        want = torch_ddp(tmp, jobs)
        if want is None:
            print('%d failures' % len(tg.failures))
            return 1
        emulated = torch_emulated(init_sd, x, y, sh)
        torch_free = want['free']['model']
        noise = update_rel(emulated, torch_free, init_sd)
        check(noise[2] <= FREE_BOUND, 'torch DDP against its one-process emulation: %.2e' % noise[2])

        for b in backends:
            worst = [0.0, '', 0.0, '', 0.0, 0.0]
            for k in range(1, STEPS + 1):
                r = runs[b][k - 1]
                if r[1] is None or (k > 1 and runs[b][k - 2][1] is None):
                    continue
                before = init_sd if k == 1 else runs[b][k - 2][1]['model_state_dict']
                w = compare_step('%s: step %d' % (b, k), r[1], want['step1' if k == 1 else
                                                               '%s-%d' % (b, k)], before)
                check(r[1].get('epoch') == 1 and r[1].get('step') == k,
                      '%s: checkpoint of step %d says epoch %s, step %s'
                      % (b, k, r[1].get('epoch'), r[1].get('step')))
                if w[5] >= worst[5]:
                    worst[5], worst[1] = w[5], w[1]
                if w[2] >= worst[2]:
                    worst[2:4] = w[2:4]
                worst[0] = max(worst[0], w[0])
                worst[4] = max(worst[4], w[4])
            print('%s: each of %d DDP steps from the same state: worst update error %.1e (%s; '
                  'tensor-wise; max-norm %.1e), running stats %.1e (%s), momentum %.1e (bound %g)'
                  % (b, STEPS, worst[5], worst[1], worst[0], worst[2], worst[3], worst[4], BOUND))
            final = runs[b][-1][0]
            if final is None:
                continue
            free = update_rel(final, torch_free, init_sd)
            check(free[2] <= FREE_BOUND, '%s: %d free-running steps differ from torch DDP by %.2e'
                  % (b, STEPS, free[2]))
            counts = sorted({int(v) for k, v in final.items() if k.endswith('num_batches_tracked')})
            check(counts == [STEPS], '%s: num_batches_tracked %s, not %d' % (b, counts, STEPS))
            loaded = tg.loads_strictly(final)
            check(loaded, '%s: torchvision does not load the saved state dict strictly' % b)
            print('%s: %d free-running steps against torch DDP: update %.1e (Frobenius %.1e, bound '
                  '%g), running stats %.1e; torch DDP against its emulation at 2 threads: %.1e '
                  '(Frobenius %.1e), %.1e; num_batches_tracked %s; torchvision loads it strictly: '
                  '%s' % (b, STEPS, free[0], free[2], FREE_BOUND, free[1], noise[0], noise[2],
                          noise[1], counts, loaded))

        ref3 = runs['ref'][-1][0]
        if ref3 is not None:
            for name, r in (('mpirun --mca btl tcp,self', tcp), ('ptc train --nproc 2', nproc)):
                if r[0] is not None:
                    same = same_bits(r[0], ref3)
                    check(same, '%s: state dict differs from plain mpirun\'s (worst update %.2e)'
                          % (name, update_rel(r[0], ref3, init_sd)[0]))
                    print('ref: %s gives the same bits as mpirun -np 2: %s' % (name, same))
            if single[0] is not None:
                apart = update_rel(single[0], ref3, init_sd)[0]
                check(apart >= 100 * BOUND, '1 process on rank 0\'s shard is only %.2e from 2 ranks: '
                      'were the gradients averaged?' % apart)
                print('ref: 1 process on rank 0\'s shard against 2 ranks: update differs by %.2e '
                      '(must be >= %g)' % (apart, 100 * BOUND))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failures' % len(tg.failures))
    return 1 if tg.failures else 0


if __name__ == '__main__':
    sys.exit(main())
