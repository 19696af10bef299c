#!/usr/bin/env python3
"""Checks data-parallel `ptc train` end to end under mpirun (2 ranks), with the standard library.

On a small dataset written here in CIFAR-10's binary format:
  1. `mpirun -np 2 ptc train`: exits 0; rank 0 alone prints (one header line) and says 2
     processes; every evaluation counts each of the 100 test images once (sharded without
     padding); the metrics summary says world 2; the training checkpoint records world 2;
  2. `ptc train --nproc 2` (ptc starts mpirun itself) reaches the same weights bit for bit
     (`ptc diff --rtol 0 --atol 0` finds no difference);
  3. a rank killed with SIGKILL in the middle of epoch 2 ends the whole job within 30 s with a
     non-zero exit and a message naming the rank, and leaves no process behind; `--resume` from
     the last checkpoint on 2 ranks then reaches the same final weights as the uninterrupted run,
     bit for bit;
  4. a failure on one rank only (rank 0 cannot write its metrics file) ends the whole job with a
     message naming the rank, instead of leaving rank 1 waiting in a collective;
  5. resuming with another number of processes is refused with a message (on one rank and on two);
     `--nproc` under mpirun is a usage error;
  6. `--lr-scaling sqrt` on 2 ranks trains at lr x sqrt(2).

Exit 0 when all hold, 1 otherwise, 77 when mpirun is missing or ptc was built without MPI.
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get('top_builddir') or SRC
PTC = os.path.join(BUILD, 'tools', 'ptc')
QUICK = os.environ.get('PTC_TRAIN_CHECK') == 'quick'  # the sanitizer build: fewer images
N_TRAIN, N_TEST, BATCH, EPOCHS = (256, 100, 16, 3) if QUICK else (512, 100, 16, 3)
KILL_DEADLINE = 30.0

failures = []


def check(cond, what):
    print(('ok: ' if cond else 'FAIL: ') + what)
    if not cond:
        failures.append(what)
    return cond


def mpirun_cmd():
    if os.environ.get('MPIRUN_CMD'):  # from mpi_env.sh (check_ddp_cli.sh)
        return os.environ['MPIRUN_CMD'].split()
    m = shutil.which('mpirun')
    if not m:
        return None
    cmd = [m, '--oversubscribe', '--bind-to', 'none']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    return cmd


def write_cifar(folder):
    """Records of 1 label byte + 3072 image bytes; images tied to their label so the task is
    learnable, with a fixed pseudo-random texture."""
    os.makedirs(folder)
    state = 12345

    def rnd():
        nonlocal state
        state = (state * 1103515245 + 12345) & 0x7fffffff
        return state

    def records(n):
        out = bytearray()
        for i in range(n):
            label = i % 10
            out.append(label)
            base = 25 * label
            out += bytes((base + (rnd() >> 16) % 40) % 256 for _ in range(3072))
        return bytes(out)

    with open(os.path.join(folder, 'data_batch_1.bin'), 'wb') as f:
        f.write(records(N_TRAIN))
    with open(os.path.join(folder, 'test_batch.bin'), 'wb') as f:
        f.write(records(N_TEST))


def train_args(data, out, extra=()):
    return ['train', '--dataset', 'cifar10', '--data', data, '--epochs', str(EPOCHS),
            '--batch-size', str(BATCH), '--threads', '1', '--eval-every', '1', '--no-progress',
            '--checkpoint', os.path.join(out, 'ck.pth'), '--save', os.path.join(out, 'final.pth'),
            '--metrics', os.path.join(out, 'metrics.jsonl')] + list(extra)


def run(cmd, timeout=600):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode(errors='replace'), time.monotonic() - t0


def same_weights(a, b):
    """Bit for bit: zero tolerance (ptc diff's defaults would pass values that merely agree
    within rtol 1e-5, atol 1e-8)."""
    rc, out, _ = run([PTC, 'diff', '--rtol', '0', '--atol', '0', a, b])
    if rc != 0:
        print(out[-1500:])
    return rc == 0


def rank_pids(marker):
    """{rank: pid} of the ptc processes whose command line contains marker."""
    found = {}
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % d, 'rb') as f:
                cmdline = f.read().split(b'\0')
            with open('/proc/%s/environ' % d, 'rb') as f:
                env = f.read().split(b'\0')
        except OSError:
            continue
        if not any(marker.encode() in a for a in cmdline) or b'train' not in cmdline:
            continue
        for e in env:
            if e.startswith(b'OMPI_COMM_WORLD_RANK='):
                found[int(e.split(b'=', 1)[1])] = int(d)
    return found


def main():
    mpi = mpirun_cmd()
    if not mpi:
        print('SKIP: mpirun not found (apt-get install openmpi-bin)')
        return 77
    probe = subprocess.run([PTC, 'train', '--nproc', '1', '--dataset', 'cifar10', '--data',
                            '/nonexistent-ptc-probe'], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    if b'without MPI' in probe.stdout:
        print('SKIP: ptc was built without MPI')
        return 77
    tmp = tempfile.mkdtemp(prefix='ptc-ddp-')
    try:
        data = os.path.join(tmp, 'cifar')
        write_cifar(data)
        a, b, c = (os.path.join(tmp, x) for x in ('a', 'b', 'c'))
        for d in (a, b, c):
            os.makedirs(d)

        # 1. the uninterrupted run
        rc, out, secs = run(mpi + ['-np', '2', PTC] + train_args(data, a))
        print(out[-2500:])
        check(rc == 0, '2-rank run exits 0 (%.1f s)' % secs)
        check(out.count('ptc train: resnet18') == 1, 'one header line (rank 0 alone prints)')
        check('2 processes (mpi' in out, 'the header says 2 processes over mpi')
        evals = [l for l in open(os.path.join(a, 'metrics.jsonl')) if '"eval"' in l]
        check(len(evals) == EPOCHS and all('"images": %d,' % N_TEST in l for l in evals),
              'every evaluation counts the %d test images once (%d evaluations)' % (N_TEST, len(evals)))
        summary = open(os.path.join(a, 'metrics.jsonl')).read().strip().splitlines()[-1]
        check('"world": 2' in summary and 'allreduce_hidden_fraction' in summary,
              'the metrics summary says world 2 and how much all-reduce was hidden')
        # the summary's all-reduce row: two measures, each against its own base (the second may
        # exceed the first on busy cores, so it is never worded as a part of it)
        ar = re.search(r'^  all-reduce +(.*)$', out, re.M)
        check(ar is not None and re.fullmatch(r'[\d.]+ ms per step run alone; [\d.]+ ms per step '
                                              r'waited for after backward \(\d+% hidden\)',
                                              ar.group(1)) is not None,
              'the all-reduce row: %r' % (ar.group(1) if ar else None))
        rc2, ins, _ = run([PTC, 'inspect', os.path.join(a, 'ck.pth')])
        check(rc2 == 0 and 'world' in ins, 'the training checkpoint records its world size')

        # 2. --nproc 2: the same bits
        rc, out, secs = run([PTC] + train_args(data, c, ['--nproc', '2']))
        check(rc == 0, 'ptc train --nproc 2 exits 0 (%.1f s)' % secs)
        check(same_weights(os.path.join(a, 'final.pth'), os.path.join(c, 'final.pth')),
              '--nproc 2 reaches the same weights as mpirun -np 2, bit for bit')

        # 3. a rank killed in the middle of epoch 2
        ck = os.path.join(b, 'ck.pth')
        p = subprocess.Popen(mpi + ['-np', '2', PTC] + train_args(data, b),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = time.monotonic() + 300
        while not os.path.exists(ck) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = rank_pids(b)
        killed = False
        if check(os.path.exists(ck) and 1 in pids, 'the checkpoint of epoch 1 appeared; rank 1 is '
                 'pid %s' % pids.get(1)):
            time.sleep(0.3)  # into epoch 2
            os.kill(pids[1], signal.SIGKILL)
            killed = True
        t0 = time.monotonic()
        try:
            out = p.communicate(timeout=KILL_DEADLINE + 30)[0].decode(errors='replace')
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out = p.communicate()[0].decode(errors='replace')
        ended = time.monotonic() - t0
        print(out[-1500:])
        if killed:
            check(p.returncode != 0, 'the job exits non-zero after a rank died (%d)' % p.returncode)
            check(ended < KILL_DEADLINE, 'the whole job ended %.1f s after the kill (limit %.0f s)'
                  % (ended, KILL_DEADLINE))
            check('rank 1' in out, 'the message names rank 1')
            time.sleep(0.5)
            check(not rank_pids(b), 'no rank of the job is left running')
            rc, ins, _ = run([PTC, 'inspect', ck])
            check(rc == 0, 'the last checkpoint is whole (ptc inspect reads it)')
            rc, out, secs = run(mpi + ['-np', '2', PTC] + train_args(data, b, ['--resume', ck]))
            print(out[-800:])
            check(rc == 0 and '(resumed)' in out, 'the resumed 2-rank run exits 0 (%.1f s)' % secs)
            check(same_weights(os.path.join(a, 'final.pth'), os.path.join(b, 'final.pth')),
                  'resumed after the kill == uninterrupted, bit for bit')

        # 4. one rank fails alone
        bad = train_args(data, c)
        bad[bad.index('--metrics') + 1] = os.path.join(tmp, 'no-such-folder', 'm.jsonl')
        rc, out, secs = run(mpi + ['-np', '2', PTC] + bad, timeout=120)
        print(out[-800:])
        check(rc != 0 and 'cannot write' in out and 'rank 0 of 2 failed' in out,
              'rank 0 failing alone ends the job with its message (exit %d)' % rc)
        check(secs < KILL_DEADLINE + 20, 'and it ended in %.1f s' % secs)

        # 5. world-size mismatches and misuse
        rc, out, _ = run([PTC] + train_args(data, c, ['--resume', os.path.join(a, 'ck.pth')]))
        check(rc != 0 and 'run of 2 process(es)' in out,
              'one process refuses a 2-process checkpoint: ' + out.strip().splitlines()[-1][:160])
        one = os.path.join(tmp, 'one')
        os.makedirs(one)
        rc, out, _ = run([PTC] + train_args(data, one, ['--max-steps', '2']))
        check(rc == 0, 'a one-process run for the next check')
        rc, out, secs = run(mpi + ['-np', '2', PTC] + train_args(data, c, ['--resume',
                            os.path.join(one, 'ck.pth')]), timeout=120)
        check(rc != 0 and 'run of 1 process(es)' in out,
              'two processes refuse a 1-process checkpoint (exit %d, %.1f s)' % (rc, secs))
        rc, out, _ = run(mpi + ['-np', '1', PTC] + train_args(data, c, ['--nproc', '2']))
        check(rc != 0 and 'leave it out' in out, '--nproc under mpirun is refused')

        # 6. --lr-scaling: the rate for 2 processes
        lrs = os.path.join(tmp, 'lrs')
        os.makedirs(lrs)
        rc, out, _ = run(mpi + ['-np', '2', PTC] + train_args(data, lrs, [
            '--lr-scaling', 'sqrt', '--max-steps', '2', '--lr', '0.01']))
        epochs = [json.loads(l) for l in open(os.path.join(lrs, 'metrics.jsonl'))
                  if '"epoch"' in l and '"event": "epoch"' in l] if rc == 0 else []
        lr = epochs[0]['lr'] if epochs else None
        check(lr is not None and abs(lr - 0.01 * math.sqrt(2)) < 1e-9,
              '--lr-scaling sqrt on 2 ranks trains at %s (0.01 x sqrt(2))' % lr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('ddp cli: %d failure(s)' % len(failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
