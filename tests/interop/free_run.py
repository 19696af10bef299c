"""free_run.py - ptc's training against a float64 oracle: free-running, as a user runs it, and
step by step. Used by train_golden.py (one process), ddp_golden.py (several processes) and the
sweep in tests/bench/golden/.

A case is a recipe (world size W, batch B per process, learning rate, the numbers of steps N to
check, and how the training images are split into CIFAR-10 files). For a case, on the same
random images and the same torchvision resnet18(num_classes=10) initialisation (torch, seed 0):

  oracle       torch float64 (model.double(), float64 inputs): N steps of SGD (momentum 0.9,
               weight decay 5e-4); with W > 1, DistributedDataParallel over gloo in W processes;
  torch32      the same in float32, 2 threads in one process and 1 thread per rank under DDP;
               and again at each thread count of THREADS, which changes only the order in which
               float32 sums are taken;
  f32-storage  float64 arithmetic whose every stored value is rounded to float32 (each layer's
               output; after each step the weights, buffers and momentum buffers): what no
               implementation that keeps float32 tensors can avoid;
  ptc          `ptc train --init ... --max-steps K --no-shuffle --no-augment` (under
               `mpirun -np W` for W > 1), K = 1 .. max N, each run writing its checkpoint.

The update error of a state dict w against the oracle's o, both reached from the start s, is
    ||(w - s) - (o - s)|| / ||o - s||
over every floating entry of the state dict together (parameters and running statistics).
ptc passes a comparison when its error is at most 2 x the floor (below) + 1e-5. A case where
torch32 (at the recipe's thread count) is itself more than 1e-2 from the oracle is chaotic:
float32's rounding alone sends it elsewhere, so it says nothing; it is left out, and said so.

Free-running: ptc's state after N steps from the initialisation against the oracle's N steps.
Step by step: ptc's step K, taken in its free run, from its state after K - 1 steps (the
checkpoint, momentum buffers included) against one oracle step from that same state, momentum
buffers compared the same way. The floor of both is torch float32's own error, the median of
its errors at the thread counts of THREADS, or float32 storage's error where that is larger.
A free run catches what a program carries from step to step; the steps of a free run, each
judged from the state the run itself reached, show where an error entered.

Why the floor is not one torch32 run. A ReLU that follows a batchnorm masks by the sign of its
input, and an input within the rounding error of zero gets one mask in float32 and the other in
float64; that one element moves its channel's bias gradient, and every gradient below, by up to
1e-2 (relative). Every float32 implementation meets such elements, at a rate set by its accuracy,
and so does the oracle after a step whose state differs from its own by a float32 rounding: the
exact dynamics themselves jump there. Whether a given float32 run lands on the oracle's side is
chance: on 2 ranks x batch 8, lr 0.05, torch DDP in float32 ends 2 steps 1.6e-5, 6.3e-4, 1.6e-3
and 1.6e-3 from the oracle with 1, 2, 3 and 4 threads per rank, the arithmetic otherwise the same.
One sample of that spread is no yardstick (the one at the recipe's thread count is printed
first); its median is torch float32's own error. And no float32 implementation is held below
what float32 storage alone costs: on 2 ranks x batch 16, lr 0.01, after 3 steps, the
float32-storage run ends 1.0e-4 from the oracle where torch's median is 4.0e-5.
"""
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
MOMENTUM, WD = 0.9, 5e-4
CHAOTIC = 1e-2
SLACK = 1e-5
TIMEOUT = 1500  # seconds for one ptc run: the ref backend under the sanitizers is slow


class Case:
    """A recipe: W processes, batch B each, learning rate lr, checks after each N in steps.
    files: images per CIFAR-10 training file (5 files), or None for one file of n_images
    (default W x B x max(steps), all shards full). seed: of the random images."""

    def __init__(self, world, batch, lr, steps, files=None, n_images=None, seed=20261201):
        self.world, self.batch, self.lr, self.seed = world, batch, lr, seed
        self.steps = sorted(steps)
        self.files = files
        need = world * batch * self.steps[-1]
        self.n = 5 * files if files else (n_images or need)
        self.name = '%d %s x batch %d, lr %g%s' % (
            world, 'process' if world == 1 else 'ranks', batch, lr,
            ', files of %d images' % files if files else
            (', %d images' % self.n if self.n != need else ''))
        self.tag = 'w%d-b%d-lr%g-%s' % (world, batch, lr, files or self.n)


def normalise(images):
    x = torch.from_numpy(images).float() / 255.0
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - mean) / std


def write_data(folder, case, seed):
    """Random CIFAR-10 records for the case (the files ptc reads) and the same images as torch
    tensors: (x float32 normalised [n][3][32][32], y int64)."""
    os.makedirs(folder)
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(case.n, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, size=case.n, dtype=np.uint8)
    bounds = ([(i * case.files, (i + 1) * case.files) for i in range(5)] if case.files
              else [(0, case.n)])
    for k, (a, b) in enumerate(bounds):
        with open(os.path.join(folder, 'data_batch_%d.bin' % (k + 1)), 'wb') as f:
            for i in range(a, b):
                f.write(bytes([labels[i]]) + images[i].tobytes())
    with open(os.path.join(folder, 'test_batch.bin'), 'wb') as f:
        for i in range(min(8, case.n)):
            f.write(bytes([labels[i]]) + images[i].tobytes())
    return normalise(images), torch.from_numpy(labels.astype(np.int64))


def shard_batches(case, rank):
    """Rank's batches of sample indices, as DistributedSampler(shuffle=False) and DataLoader give
    them (one process: the images in order)."""
    ds = torch.utils.data.TensorDataset(torch.zeros(case.n))
    idx = list(torch.utils.data.DistributedSampler(ds, num_replicas=case.world, rank=rank,
                                                   shuffle=False))
    return [idx[i:i + case.batch] for i in range(0, len(idx), case.batch)]


# ---- torch ----------------------------------------------------------------------------------------

def _momenta(opt):
    return [opt.state[p]['momentum_buffer'].detach().clone()
            for g in opt.param_groups for p in g['params']]


IDEAL32 = 'float32 storage'  # the third kind of run: see _store_float32
# torch.autocast("cpu", dtype=torch.bfloat16) over a float32 model: the yardstick of ptc's
# --precision bf16 (bf16_golden.py); the loss is computed inside the autocast region, as a user
# writes it (cross_entropy is on autocast's float32 list).
AUTOCAST = 'autocast bf16'


def _compute_dtype(kind):
    return {IDEAL32: torch.float64, AUTOCAST: torch.float32}.get(kind, kind)


def _round_output(module, inputs, output):
    return output.float().double()


def _store_float32(model):
    """Float64 arithmetic whose every stored value is rounded to float32: the output of every
    layer (convolution, batchnorm, relu, pooling, linear), and after each step the weights,
    buffers and momentum buffers. This is the best any implementation that keeps float32
    tensors can do: its error to the oracle is the part of the noise floor that float32 storage
    alone causes, whatever the arithmetic inside each layer."""
    for m in model.modules():
        if not list(m.children()):
            m.register_forward_hook(_round_output)


def _round_state(model, opt):
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.copy_(t.float().double())
        for st in opt.state.values():
            if 'momentum_buffer' in st:
                st['momentum_buffer'].copy_(st['momentum_buffer'].float().double())


def _run_steps(model, opt, x, y, batches, first, count, kind, after, inner=None):
    for s in range(first, first + count):
        idx = batches[s]
        opt.zero_grad()
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=kind == AUTOCAST):
            loss = torch.nn.functional.cross_entropy(model(x[idx].to(_compute_dtype(kind))),
                                                     y[idx])
        loss.backward()
        opt.step()
        if kind == IDEAL32:
            _round_state(inner if inner is not None else model, opt)
        after(s + 1)


def _start(case, init, start, kind, wrap=None):
    """Model and optimizer at the start of a job: init, or a ptc checkpoint (weights, buffers,
    momentum buffers), for a run of the kind (float64, float32 or IDEAL32)."""
    model = torchvision.models.resnet18(num_classes=10)
    ck = torch.load(start, weights_only=True, map_location='cpu') if start else None
    model.load_state_dict(ck['model_state_dict'] if ck else init)
    model = model.to(_compute_dtype(kind))
    if kind == IDEAL32:
        _store_float32(model)
    model.train()
    net = wrap(model) if wrap else model
    opt = torch.optim.SGD(net.parameters(), lr=case.lr, momentum=MOMENTUM, weight_decay=WD)
    if ck:
        opt.load_state_dict(ck['optimizer_state_dict'])  # ptc's layout; cast to dtype by torch
    return model, net, opt


def _result(model, opt):
    return {'model': {k: v.detach().clone() for k, v in model.state_dict().items()},
            'momentum': _momenta(opt)}


class Results:
    """{(key, step): result} of torch runs, kept on disk in tmp (one file each: a ResNet-18 state
    and momentum buffers in float64 are 190 MB, and a case has dozens) and read when asked for.
    The files go with tmp."""

    def __init__(self, tmp):
        self.tmp = tmp

    def path(self, key, step):
        return os.path.join(self.tmp, 'torch-%s-%d.pt' % (key, step))

    def __getitem__(self, ks):
        return torch.load(self.path(*ks), weights_only=True)


def torch_local(tmp, case, init, x, y, jobs):
    """Jobs in this process (W = 1): (key, kind, start checkpoint or None, first step, count,
    threads). Returns Results for every step of every job."""
    saved = torch.get_num_threads()
    out = Results(tmp)
    batches = shard_batches(case, 0)
    for key, dtype, start, first, count, threads in jobs:
        torch.set_num_threads(threads)
        model, net, opt = _start(case, init, start, dtype)
        _run_steps(net, opt, x, y, batches, first, count, dtype,
                   lambda s: torch.save(_result(model, opt), out.path(key, s)), model)
    torch.set_num_threads(saved)
    return out


def _ddp_worker(rank, port, tmp, case, jobs):
    import datetime
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(port)
    dist.init_process_group('gloo', rank=rank, world_size=case.world,
                            timeout=datetime.timedelta(seconds=300))
    data = torch.load(os.path.join(tmp, 'xy.pt'), weights_only=True)
    init = torch.load(os.path.join(tmp, 'init.pth'), weights_only=True)
    batches = shard_batches(case, rank)
    for key, dtype, start, first, count, threads in jobs:
        torch.set_num_threads(threads)
        model, net, opt = _start(case, init, start, dtype,
                                 torch.nn.parallel.DistributedDataParallel)

        def after(s, key=key, model=model, opt=opt):
            if rank == 0:
                torch.save(_result(model, opt), os.path.join(tmp, 'torch-%s-%d.pt' % (key, s)))
        _run_steps(net, opt, data['x'], data['y'], batches, first, count, dtype, after, model)
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torch_ddp(tmp, case, x, y, jobs):
    """The jobs in one gloo group of W processes (DistributedDataParallel's defaults:
    broadcast_buffers, gradients averaged); results as torch_local's."""
    torch.save({'x': x, 'y': y}, os.path.join(tmp, 'xy.pt'))
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    mp.spawn(_ddp_worker, args=(_free_port(), tmp, case, jobs), nprocs=case.world, join=True)
    return Results(tmp)


# ---- ptc ------------------------------------------------------------------------------------------

def mpirun_cmd():
    m = shutil.which('mpirun')
    if not m:
        return None
    cmd = [m, '--oversubscribe', '--bind-to', 'none']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    return cmd


def mpi_env():
    """The environment for ptc under mpirun, as tests/dist/mpi_env.sh sets it: under the sanitizer
    build, LeakSanitizer ignores OpenMPI's own allocations (by library, so MPI's components stay
    mapped and stacks are unwound fully) and still checks ptc's."""
    src = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    supp = 'suppressions=' + os.path.join(src, 'tests', 'dist', 'lsan-mpi.supp')
    env['LSAN_OPTIONS'] = supp + (':' + env['LSAN_OPTIONS'] if env.get('LSAN_OPTIONS') else '')
    env['ASAN_OPTIONS'] = 'fast_unwind_on_malloc=0' + (
        ':' + env['ASAN_OPTIONS'] if env.get('ASAN_OPTIONS') else '')
    env['OMPI_MCA_mca_base_component_disable_dlclose'] = '1'
    return env


def run_ptc(ptc, tmp, case, backend, steps, extra=()):
    """`ptc train` for the case (extra: more options, such as --precision bf16); returns (state
    dict, checkpoint) or raises RuntimeError."""
    save = os.path.join(tmp, 'ptc-%s-%d.pth' % (backend, steps))
    ckpt = os.path.join(tmp, 'ckpt-%s-%d.pth' % (backend, steps))
    args = [ptc, 'train', '--dataset', 'cifar10', '--data', os.path.join(tmp, 'cifar'),
            '--init', os.path.join(tmp, 'init.pth'), '--max-steps', str(steps), '--no-shuffle',
            '--no-augment', '--batch-size', str(case.batch), '--epochs', '1', '--eval-every',
            '0', '--lr', repr(case.lr), '--momentum', repr(MOMENTUM), '--weight-decay',
            repr(WD), '--backend', backend, '--save', save, '--checkpoint', ckpt, '--no-progress']
    args += list(extra)
    if case.world > 1:
        args = mpirun_cmd() + ['-np', str(case.world)] + args
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT,
                           env=mpi_env() if case.world > 1 else None)
    except subprocess.TimeoutExpired:
        raise RuntimeError('%s: no result after %d s' % (' '.join(args[:3]), TIMEOUT))
    if p.returncode != 0:
        raise RuntimeError('ptc train exited %d: %s' % (p.returncode,
                                                        p.stdout.decode(errors='replace')[-800:]))
    load = lambda f: torch.load(f, weights_only=True, map_location='cpu')  # noqa: E731
    return load(save), load(ckpt)


def ptc_momenta(ckpt):
    st = ckpt['optimizer_state_dict']['state']
    return [st[i]['momentum_buffer'].double() for i in sorted(st)]


# ---- the measure ----------------------------------------------------------------------------------

def floating(sd):
    return [k for k, v in sd.items() if v.is_floating_point()]


def update_error(got, want, start):
    """||(got - start) - (want - start)|| / ||want - start|| over every floating entry."""
    num = den = 0.0
    for k in floating(want):
        s = start[k].double()
        num += ((got[k].double() - s) - (want[k].double() - s)).norm().item() ** 2
        den += (want[k].double() - s).norm().item() ** 2
    return (num / den) ** 0.5 if den > 0 else 0.0


def list_error(got, want, start=None):
    """The same over lists of tensors (momentum buffers); start None: zeros."""
    num = den = 0.0
    for i, w in enumerate(want):
        s = start[i].double() if start is not None else torch.zeros_like(w, dtype=torch.float64)
        num += ((got[i].double() - s) - (w.double() - s)).norm().item() ** 2
        den += (w.double() - s).norm().item() ** 2
    return (num / den) ** 0.5 if den > 0 else 0.0


# torch float32 at these thread counts (per process or rank): each sums in another order.
THREADS = (1, 2, 3, 4)


def peer_errors(results, want, start, measure, threads):
    """The reference runs' errors, as printed beside ptc's: torch32 at the recipe's thread count,
    the median over THREADS, float32 storage; and torch32 at each of THREADS."""
    per = [measure(results['32-%d' % n], want, start) for n in THREADS]
    mid = sorted(per)
    median = (mid[(len(mid) - 1) // 2] + mid[len(mid) // 2]) / 2
    return [('torch32', per[THREADS.index(threads)]), ('torch32-median', median),
            ('f32-storage', measure(results['i32'], want, start))], per


def FLOOR(peers):
    """The floor of a comparison: torch float32's own error (the median over the thread counts
    it runs with), or float32 storage's where that is larger (see the top comment)."""
    return max(peers[1][1], peers[2][1])


def bound(t32):
    return 2 * t32 + SLACK


def counters_equal(got, want):
    return all(int(got[k]) == int(want[k]) for k in want if not want[k].is_floating_point())


class Verdicts:
    """Collects the checks of a run and prints them as they come."""

    def __init__(self):
        self.failures = []
        self.left_out = []
        self.checked = 0

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
            print('FAIL:', what)
        return cond

    def judge(self, what, peers, got, floor, extra='', threads=None, chaotic=CHAOTIC):
        """One comparison: ptc's error got against 2 x floor + SLACK. peers: [(name, error)] of the
        reference runs, torch32 first, printed beside ptc's (threads: torch32's error at each of
        THREADS, printed after them). A case where torch32 is chaotic (its error above chaotic;
        None: never) is left out."""
        t32 = peers[0][1]
        figures = '  '.join('%s %.2e' % p for p in peers) + '  ptc %.2e' % got
        if threads:
            extra = ' (%s at %s threads: %s)%s' % (
                peers[0][0], ', '.join(map(str, THREADS)), ' '.join('%.1e' % e for e in threads),
                extra)
        if chaotic is not None and t32 > chaotic:
            self.left_out.append(what)
            print('  %-52s %s  left out: torch32 > %g (chaotic)%s'
                  % (what, figures, chaotic, extra))
            return True
        self.checked += 1
        ok = got <= bound(floor)
        print('  %-52s %s  bound %.2e  %s%s'
              % (what, figures, bound(floor), 'ok' if ok else 'FAIL', extra))
        if not ok:
            self.failures.append('%s: ptc %.2e > 2 x %.2e + %g' % (what, got, floor, SLACK))
        return ok


def golden_case(ptc, tmp, case, backends, v, per_step=True, keep=None):
    """Runs one case on every backend: ptc runs, the oracle and torch32 (free, and one step from
    each of ptc's states), then judges. keep: a dict to receive ptc's final state dicts by
    backend (for checks of the caller). Returns nothing; verdicts go to v."""
    print('case: %s, steps %s' % (case.name, ', '.join(map(str, case.steps))))
    x, y = write_data(os.path.join(tmp, 'cifar'), case, case.seed)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    init = {k: v_.clone() for k, v_ in model.state_dict().items()}
    torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))
    last = case.steps[-1]
    runs = {}
    for b in backends:
        runs[b] = {}
        todo = range(1, last + 1) if per_step else case.steps
        for k in todo:
            try:
                runs[b][k] = run_ptc(ptc, tmp, case, b, k)
            except RuntimeError as ex:
                v.check(False, '%s, %s: ptc train --max-steps %d: %s' % (case.name, b, k, ex))
    # torch32 runs with 2 threads in one process and 1 per rank; the same float32 computation at
    # every other thread count of THREADS sums in other orders (see FLOOR).
    t = 2 if case.world == 1 else 1
    kinds = (('64', torch.float64, t), ('i32', IDEAL32, t)) + tuple(
        ('32-%d' % n, torch.float32, n) for n in THREADS)
    jobs = [('free' + name, kind, None, 0, last, th) for name, kind, th in kinds]
    if per_step:
        for b in backends:
            for k in range(2, last + 1):
                if k - 1 in runs[b]:
                    path = os.path.join(tmp, 'ckpt-%s-%d.pth' % (b, k - 1))
                    jobs += [('%s-%d-%s' % (b, k, name), kind, path, k - 1, 1, th)
                             for name, kind, th in kinds]
    try:
        got = (torch_local(tmp, case, init, x, y, jobs) if case.world == 1
               else torch_ddp(tmp, case, x, y, jobs))
    except Exception as ex:  # noqa: BLE001 (a torch DDP group that fails raises from spawn)
        v.check(False, '%s: torch failed: %s' % (case.name, str(ex)[-800:]))
        return
    keys = [name for name, _, _ in kinds]
    for b in backends:
        for n in case.steps:
            if n not in runs[b]:
                continue
            o = got[('free64', n)]['model']
            w = runs[b][n][0]
            v.check(counters_equal(w, o), '%s, %s: num_batches_tracked after %d steps' %
                    (case.name, b, n))
            peers, per = peer_errors({key: got[('free' + key, n)]['model'] for key in keys}, o,
                                     init, update_error, t)
            v.judge('%s, %s: %d free steps' % (case.name, b, n), peers, update_error(w, o, init),
                    FLOOR(peers), threads=per)
        if keep is not None and last in runs[b]:
            keep[b] = runs[b][last][0]
        if not per_step:
            continue
        for k in range(1, last + 1):
            if k not in runs[b] or (k > 1 and k - 1 not in runs[b]):
                continue
            if k == 1:
                start, mstart = init, None
                res = {key: got[('free' + key, 1)] for key in keys}
            else:
                prev = runs[b][k - 1][1]
                start, mstart = prev['model_state_dict'], ptc_momenta(prev)
                res = {key: got[('%s-%d-%s' % (b, k, key), k)] for key in keys}
            o = res['64']
            ck = runs[b][k][1]
            v.check(ck.get('step') == k and counters_equal(ck['model_state_dict'], o['model']),
                    '%s, %s: checkpoint of step %d says step %s, counters equal torch\'s'
                    % (case.name, b, k, ck.get('step')))
            peers, _ = peer_errors({key: r['model'] for key, r in res.items()}, o['model'], start,
                                   update_error, t)
            mom, _ = peer_errors({key: r['momentum'] for key, r in res.items()}, o['momentum'],
                                 mstart, list_error, t)
            got_m = list_error(ptc_momenta(ck), o['momentum'], mstart)
            v.judge('%s, %s: step %d from ptc\'s state' % (case.name, b, k), peers,
                    update_error(ck['model_state_dict'], o['model'], start), FLOOR(peers),
                    '; momentum: %s, ptc %.1e' % (', '.join('%s %.1e' % m for m in mom), got_m))
            if mom[0][1] <= CHAOTIC:
                v.check(got_m <= bound(FLOOR(mom)), '%s, %s: step %d: momentum buffers %.2e '
                        '> 2 x %.2e + %g' % (case.name, b, k, got_m, FLOOR(mom), SLACK))
    shutil.rmtree(os.path.join(tmp, 'cifar'))
    for f in os.listdir(tmp):
        if f.startswith('torch-') and f.endswith('.pt'):
            os.remove(os.path.join(tmp, f))


def available_backends(ptc, tmp):
    """ref, and dnnl when ptc has it (an evaluation of one image on dnnl succeeds)."""
    folder = os.path.join(tmp, 'probe')
    write_data(folder, Case(1, 1, 0.01, [1], n_images=2), 1)
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(),
               os.path.join(tmp, 'probe.pth'))
    p = subprocess.run([ptc, 'eval', '--weights', os.path.join(tmp, 'probe.pth'), '--dataset',
                        'cifar10', '--data', folder, '--backend', 'dnnl', '--max-samples', '1',
                        '--batch-size', '1'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    shutil.rmtree(folder)
    if p.returncode == 0:
        return ['ref', 'dnnl'], ''
    return ['ref'], p.stdout.decode(errors='replace').strip()[-300:]


def summary(v):
    print('%d comparisons checked, %d left out as chaotic, %d failures'
          % (v.checked, len(v.left_out), len(v.failures)))
    sys.stdout.flush()
