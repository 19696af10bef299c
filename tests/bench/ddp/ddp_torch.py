#!/usr/bin/env python3
"""ddp_torch.py - the PyTorch peer of tests/bench/ddp/run.sh: torchvision's resnet18(num_classes=10)
trained with DistributedDataParallel (gloo) in --world processes of --threads threads each, at
--batch images per process, on batches built before anything is timed (so that torch's data path
costs nothing), with ptc train's recipe: 3x32x32 inputs, cross-entropy, SGD(lr 0.01, momentum 0.9,
weight_decay 5e-4).

Images come from Fashion-MNIST as ptc presents it (zero-padded to 32x32, gray replicated to 3
channels, normalised), read from --data (default /usr/share/datasets/fashion-mnist), or are random
when that folder is missing or --synthetic is given: the speed does not depend on the values.

Throughput is counted as ptc counts it: from the end of step --warmup (10, ptc's WARMUP_STEPS) to
the end of step --steps, images of every rank together, with a barrier at both ends. Rank 0
prints one JSON line:
  {"peer": "torch_ddp", "torch": "2.6.0", "world": 2, "threads": 1, "batch": 64, "steps": 30,
   "warmup": 10, "data": "fashion-mnist", "images_per_sec": ..., "seconds": ...,
   "step_ms": {"min": ..., "median": ...}}
step_ms are rank 0's times per step (forward, backward with DDP's bucketed all-reduce, SGD).

Usage: ddp_torch.py [--world 2] [--threads 1] [--batch 64] [--steps 30] [--warmup 10]
                    [--data DIR | --synthetic]
"""
import argparse
import datetime
import gzip
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

FASHION = '/usr/share/datasets/fashion-mnist'
MEAN, STD = 0.2860, 0.3530  # about Fashion-MNIST's; the values do not change the speed


def batches(args, rank):
    """This rank's batches, DistributedSampler(shuffle=False)'s shard of the first
    world x batch x steps images (rank r: images r, r + world, ...), as float tensors."""
    n = args.world * args.batch * args.steps
    kind = 'synthetic'
    gray = None
    if not args.synthetic:
        try:
            with gzip.open(os.path.join(args.data, 'train-images-idx3-ubyte.gz')) as f:
                raw = f.read(16 + n * 784)
            with gzip.open(os.path.join(args.data, 'train-labels-idx1-ubyte.gz')) as f:
                lab = f.read(8 + n)
            have = (len(raw) - 16) // 784
            gray = torch.frombuffer(bytearray(raw[16:16 + have * 784]), dtype=torch.uint8)
            gray = gray.view(have, 28, 28)
            labels = torch.frombuffer(bytearray(lab[8:8 + have]), dtype=torch.uint8).long()
            reps = (n + have - 1) // have
            gray, labels = gray.repeat(reps, 1, 1)[:n], labels.repeat(reps)[:n]
            kind = 'fashion-mnist'
        except OSError:
            gray = None
    g = torch.Generator().manual_seed(rank)
    if gray is None:
        gray = torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
        labels = torch.randint(0, 10, (n,), generator=g)
    idx = torch.arange(rank, n, args.world)
    x = torch.zeros(len(idx), 3, 32, 32)
    x[:, :, 2:30, 2:30] = ((gray[idx].float() / 255.0 - MEAN) / STD).unsqueeze(1)
    y = labels[idx]
    out = [(x[i:i + args.batch].contiguous(), y[i:i + args.batch].contiguous())
           for i in range(0, len(idx), args.batch)]
    return out, kind


def worker(rank, args, port):
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group('gloo', rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=300))
    data, kind = batches(args, rank)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    times = []
    t0 = None
    dist.barrier()
    for s in range(args.steps):
        if s == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        ts = time.perf_counter()
        x, y = data[s % len(data)]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - ts)
    dist.barrier()
    t1 = time.perf_counter()
    if rank == 0:
        timed = args.steps - args.warmup
        secs = t1 - t0
        print(json.dumps({
            'peer': 'torch_ddp', 'torch': torch.__version__, 'world': args.world,
            'threads': args.threads, 'batch': args.batch, 'steps': args.steps,
            'warmup': args.warmup, 'data': kind,
            'images_per_sec': round(args.world * args.batch * timed / secs, 2),
            'seconds': round(secs, 3),
            'step_ms': {'min': round(1e3 * min(times[args.warmup:]), 2),
                        'median': round(1e3 * statistics.median(times[args.warmup:]), 2)}}),
            flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--world', type=int, default=2)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--data', default=FASHION)
    ap.add_argument('--synthetic', action='store_true')
    args = ap.parse_args()
    if args.world < 1 or args.threads < 1 or args.batch < 1 or not 0 <= args.warmup < args.steps:
        ap.error('need world, threads, batch >= 1 and 0 <= warmup < steps')
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
