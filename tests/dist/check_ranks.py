#!/usr/bin/env python3
"""Checks that every rank of a data-parallel `ptc train` holds the same model, bit for bit.

DDP's contract is that the ranks stay in lockstep: the same parameters after every step, because
every rank applies the same averaged gradients to the same weights. A rank that fell out of step
(a different reduction result, a different batch count, state carried differently) would train a
different model while rank 0 alone saves, and nothing else would show it.

For 2 and 3 ranks and each backend (ref and dnnl; dnnl when built), `mpirun -np W ptc train
--checkpoint C --checkpoint-all-ranks` writes each rank's training checkpoint to C.rank<r>. The
test reads every tensor's SHA-256 with `ptc inspect --json --hash` and requires, on every rank:
  - every parameter, num_batches_tracked and every SGD momentum buffer equal to rank 0's, bit for
    bit;
  - the running statistics to differ from rank 0's on at least one tensor (each rank's forward
    updates them from its own shard after rank 0's were broadcast), which shows that the files
    are the ranks' own and not one file written W times.
The data are written here in CIFAR-10's binary format as 5 files of 24 images, so that the steps
cross from one file to the next; 4 steps of 8 images per rank, shuffled (seed 3), with
augmentation, lr 0.05.

Exit 0 when all hold, 1 otherwise, 77 when mpirun is missing or ptc was built without MPI.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get('top_builddir') or SRC
PTC = os.path.join(BUILD, 'tools', 'ptc')
QUICK = os.environ.get('PTC_TRAIN_CHECK') == 'quick'  # the sanitizer build: fewer runs
FILES, PER_FILE, BATCH, STEPS = 5, 24, 8, 4

failures = []


def check(cond, what):
    print(('ok: ' if cond else 'FAIL: ') + what)
    if not cond:
        failures.append(what)
    return cond


def mpirun_cmd():
    if os.environ.get('MPIRUN_CMD'):  # from mpi_env.sh (check_ranks.sh)
        return os.environ['MPIRUN_CMD'].split()
    m = shutil.which('mpirun')
    if not m:
        return None
    cmd = [m, '--oversubscribe', '--bind-to', 'none']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    return cmd


def write_cifar(folder):
    """FILES training files and a test file of pseudo-random images (a fixed LCG)."""
    os.makedirs(folder)
    state = 2026

    def records(n):
        nonlocal state
        out = bytearray()
        for i in range(n):
            out.append(i % 10)
            for _ in range(3072):
                state = (state * 1103515245 + 12345) & 0x7fffffff
                out.append(state >> 23)
        return bytes(out)

    for k in range(FILES):
        with open(os.path.join(folder, 'data_batch_%d.bin' % (k + 1)), 'wb') as f:
            f.write(records(PER_FILE))
    with open(os.path.join(folder, 'test_batch.bin'), 'wb') as f:
        f.write(records(10))


def hashes(path):
    p = subprocess.run([PTC, 'inspect', '--json', '--hash', path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        check(False, 'ptc inspect %s: %s' % (path, p.stderr.decode(errors='replace')[-300:]))
        return None
    return {t['path']: t['sha256'] for t in json.loads(p.stdout)['tensors']}


def run_case(tmp, mpirun, world, backend):
    ck = os.path.join(tmp, 'ck-%s-%d.pth' % (backend, world))
    cmd = mpirun + ['-np', str(world), PTC, 'train', '--dataset', 'cifar10', '--data',
                    os.path.join(tmp, 'cifar'), '--backend', backend, '--batch-size', str(BATCH),
                    '--max-steps', str(STEPS), '--epochs', '1', '--eval-every', '0', '--lr',
                    '0.05', '--seed', '3', '--threads', '1', '--save',
                    os.path.join(tmp, 'out.pth'), '--checkpoint', ck, '--checkpoint-all-ranks',
                    '--no-progress']
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1500)
    if not check(p.returncode == 0, '%s, %d ranks: ptc train exits 0 (%d): %s' % (
            backend, world, p.returncode, p.stdout.decode(errors='replace')[-500:])):
        return
    base = hashes(ck + '.rank0')
    if base is None:
        return
    same = [k for k in base if '.running_' not in k]
    moments = [k for k in same if 'momentum_buffer' in k]
    check(len(moments) == 62, '%s, %d ranks: the checkpoint holds 62 momentum buffers (%d)'
          % (backend, world, len(moments)))
    for r in range(1, world):
        h = hashes('%s.rank%d' % (ck, r))
        if h is None:
            continue
        check(sorted(h) == sorted(base), '%s: rank %d holds the same tensors as rank 0'
              % (backend, r))
        differ = [k for k in same if h.get(k) != base[k]]
        check(not differ, '%s, %d ranks: rank %d: parameters, counters and momentum buffers '
              'equal to rank 0\'s, bit for bit (%d tensors compared; differing: %s)'
              % (backend, world, r, len(same), ', '.join(differ[:4]) or 'none'))
        own = [k for k in base if '.running_' in k and h.get(k) != base[k]]
        check(own, '%s, %d ranks: rank %d\'s running statistics are its own (%d of %d tensors '
              'differ from rank 0\'s)' % (backend, world, r, len(own),
                                          len([k for k in base if '.running_' in k])))


def main():
    if not os.access(PTC, os.X_OK):
        print('cannot run: %s not built' % PTC)
        return 99
    mpirun = mpirun_cmd()
    if not mpirun:
        print('SKIP: mpirun not found')
        return 77
    if not os.access(os.path.join(BUILD, 'tests', 'dist', 'test_dist'), os.X_OK):
        print('SKIP: ptc was built without MPI (no tests/dist/test_dist)')
        return 77
    backends = ['ref']
    if subprocess.run([PTC, 'train', '--backend', 'dnnl', '--help'], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE).returncode == 0:
        backends.append('dnnl')
    with tempfile.TemporaryDirectory(prefix='ptc-ranks-') as tmp:
        write_cifar(os.path.join(tmp, 'cifar'))
        for backend in backends:
            for world in (2, 3):
                if QUICK and backend == 'ref' and world == 3:
                    continue
                run_case(tmp, mpirun, world, backend)
    print('%d failures' % len(failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
