#!/usr/bin/env python3
"""ptc's TensorBoard event files (the module tool-tensorboard.so, tools/tensorboard/writer.c)
against TensorBoard 2.18's own reader and torch.utils.tensorboard.SummaryWriter as the peer.

1. The writer alone (tests/interop/tb_write drives the module as ptc train does): scalars with
   NaN, the infinities, 0, steps 0, negative and 2^40, a UTF-8 tag.
   a. TensorBoard's EventAccumulator (size guidance 0: every event kept) reads the file: the same
      tags, and for each tag the steps and values (float32 of the double, bit for bit; NaN as NaN).
   b. SummaryWriter writes the same scalars (same tags, steps and values; its own wall times) in
      a folder of its own: the two files have as many records; every record's framing is checked
      with tensorboard's own masked CRC-32C; the first records carry the same file_version; each
      scalar record has the same length as SummaryWriter's, and its bytes after wall_time (the
      Event's first field, 9 bytes) are equal. The file names follow the same pattern.
2. A real `ptc train` (Fashion-MNIST, 256 images, ref backend, 2 epochs, --log-every 2, --metrics
   M --tensorboard D): every (tag, step) of the event file equals the metrics log's, mapped as
   lib/ptc/ptc.h's ptc_train_params.scalar says (step lines: train/loss, train/accuracy, lr,
   images_per_sec at the step; epoch lines: epoch/train/loss, epoch/train/accuracy, epoch/lr,
   epoch/images_per_sec at the step; eval lines: test/loss, test/accuracy at the step; gpu
   lines: gpu/utilization, gpu/memory_used_gib at the step), each value within 1 float32 ulp of
   float32(the metrics value). A table of tags, counts and the largest difference is printed.
   Records missing from either side fail (never skipped).

Exit status: 0 all checks passed, 1 a difference, 77 torch or tensorboard missing, 99 cannot run.
`check_tensorboard.py --compare METRICS.jsonl TBDIR` runs only the comparison of 2 on a run of
one's own (the figures of a long run are made that way).
"""

import glob
import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common  # noqa: E402

torch = interop_common.require_torch()
try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from torch.utils.tensorboard import SummaryWriter
except Exception as e:  # ImportError, or a broken install
    print("SKIP: %s cannot import tensorboard (pip install tensorboard==2.18.0): %s"
          % (sys.executable, e))
    sys.exit(77)

BUILD = interop_common.BUILDDIR
PTC = os.path.join(BUILD, "tools", "ptc")
TB_WRITE = os.path.join(BUILD, "tests", "interop", "tb_write")
FASHION = "/usr/share/datasets/fashion-mnist"

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


def ok(msg):
    print("ok:   " + msg)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def ulps(a, b):
    """Distance in float32 units in the last place between two float32 values (0 for two NaNs)."""
    if math.isnan(a) or math.isnan(b):
        return 0 if math.isnan(a) and math.isnan(b) else float("inf")

    def ordered(x):
        u = f32_bits(x)
        return u if u < 0x80000000 else 0x80000000 - u

    return abs(ordered(a) - ordered(b))


def records(path):
    """The records of an event file, the framing checked with tensorboard's masked CRC-32C."""
    data = open(path, "rb").read()
    out, off, n = [], 0, 0
    while off < len(data):
        if len(data) - off < 12:
            fail("%s: %d stray bytes at %d" % (path, len(data) - off, off))
            break
        (length,) = struct.unpack_from("<Q", data, off)
        (hcrc,) = struct.unpack_from("<I", data, off + 8)
        if hcrc != masked_crc32c(data[off:off + 8]):
            fail("%s: record %d: length CRC %08x, tensorboard computes %08x"
                 % (path, n, hcrc, masked_crc32c(data[off:off + 8])))
        body = data[off + 12:off + 12 + length]
        if len(body) != length or off + 16 + length > len(data):
            fail("%s: record %d runs past the end" % (path, n))
            break
        (dcrc,) = struct.unpack_from("<I", data, off + 12 + length)
        if dcrc != masked_crc32c(body):
            fail("%s: record %d: data CRC %08x, tensorboard computes %08x"
                 % (path, n, dcrc, masked_crc32c(body)))
        out.append(body)
        off += 16 + length
        n += 1
    return out


def accumulate(folder):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


NAME = re.compile(r"^events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)$")

# ---- 1. the writer alone -----------------------------------------------------------------------
SCALARS = [
    ("train/loss", 1, 2.302585092994046),
    ("train/accuracy", 0, 0.1),
    ("lr", 2 ** 40, 0.01),
    ("test/loss", -3, -1.5),
    ("nan", 4, float("nan")),
    ("inf", 5, float("inf")),
    ("-inf", 6, float("-inf")),
    ("zero", 7, 0.0),
    ("ünïcode/λ 学习率", 8, 1e-30),
    ("train/loss", 9, 3.4e38),
    ("train/loss", 10, 1.0000001),
]


def check_writer(tmp):
    ours_dir, peer_dir = os.path.join(tmp, "ptc"), os.path.join(tmp, "torch")
    lines = "".join("%s\t%d\t%r\n" % (t, s, v) for t, s, v in SCALARS)
    r = subprocess.run([TB_WRITE, ours_dir], input=lines.encode(), capture_output=True, timeout=120)
    if r.returncode != 0:
        fail("tb_write exited %d: %s" % (r.returncode, r.stderr.decode(errors="replace")))
        return
    ours = r.stdout.decode().strip()
    print("ptc's event file:   %s (%d bytes)" % (ours, os.path.getsize(ours)))

    sw = SummaryWriter(peer_dir)
    for t, s, v in SCALARS:
        sw.add_scalar(t, v, s)
    sw.close()
    peers = glob.glob(os.path.join(peer_dir, "events.out.tfevents.*"))
    if len(peers) != 1:
        fail("SummaryWriter left %d event files in %s" % (len(peers), peer_dir))
        return
    peer = peers[0]
    print("torch's event file: %s (%d bytes)" % (peer, os.path.getsize(peer)))

    # The names: the same pattern, this host, this process's child (ptc) and this process (torch).
    for path, pid in ((ours, r"\d+"), (peer, str(os.getpid()))):
        m = NAME.match(os.path.basename(path))
        if not m or m.group(2) != socket.gethostname() or not re.fullmatch(pid, m.group(3)):
            fail("file name %s does not follow events.out.tfevents.<%%010d>.%s.<pid>.<n>"
                 % (os.path.basename(path), socket.gethostname()))
        else:
            ok("file name %s: time %s, host %s, pid %s, file %s" % ((os.path.basename(path),)
                                                                   + m.groups()))

    # a. TensorBoard's reader on ptc's file.
    acc = accumulate(ours_dir)
    want = {}
    for t, s, v in SCALARS:
        want.setdefault(t, []).append((s, v))
    got_tags = sorted(acc.Tags()["scalars"])
    if got_tags != sorted(want):
        fail("EventAccumulator tags %s, wrote %s" % (got_tags, sorted(want)))
    for t in sorted(want):
        if t not in got_tags:
            continue
        got = [(e.step, e.value) for e in acc.Scalars(t)]
        exp = [(s, f32(v)) for s, v in want[t]]
        same = len(got) == len(exp) and all(
            gs == es and (f32_bits(gv) == f32_bits(ev) or (math.isnan(gv) and math.isnan(ev)))
            for (gs, gv), (es, ev) in zip(got, exp))
        if same:
            ok("EventAccumulator %-18s %s" % (t, got))
        else:
            fail("EventAccumulator %s: %s, wrote %s" % (t, got, exp))
    peer_acc = accumulate(peer_dir)
    if sorted(peer_acc.Tags()["scalars"]) != got_tags:
        fail("EventAccumulator reads tags %s from torch's file, %s from ptc's"
             % (sorted(peer_acc.Tags()["scalars"]), got_tags))

    # b. Record by record against SummaryWriter's file.
    a, b = records(ours), records(peer)
    if len(a) != len(b):
        fail("ptc's file has %d records, SummaryWriter's %d" % (len(a), len(b)))
    else:
        ok("%d records in each file, every CRC as tensorboard computes it" % len(a))
    if a and b:
        ea, eb = event_pb2.Event.FromString(a[0]), event_pb2.Event.FromString(b[0])
        if ea.file_version == eb.file_version == "brain.Event:2" and ea.step == eb.step == 0:
            ok("first record: file_version %r (ptc %d bytes: writer %r; torch %d bytes: writer %r)"
               % (ea.file_version, len(a[0]), ea.source_metadata.writer, len(b[0]),
                  eb.source_metadata.writer))
        else:
            fail("first record: ptc %s / torch %s" % (ea, eb))
    sizes = []
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), 1):
        sizes.append(len(ra))
        if len(ra) != len(rb) or ra[:1] != b"\x09" or rb[:1] != b"\x09" or ra[9:] != rb[9:]:
            fail("record %d: ptc %d bytes %s, torch %d bytes %s (equal after wall_time expected)"
                 % (i, len(ra), ra.hex(), len(rb), rb.hex()))
    if len(a) == len(b) and len(a) > 1 and not failures:
        ok("the %d scalar records equal SummaryWriter's byte for byte after wall_time (sizes %s)"
           % (len(a) - 1, sizes))


# ---- 2. ptc train: the event file against the metrics log -----------------------------------------
MAP = {
    "step": [("loss", "train/loss"), ("accuracy", "train/accuracy"), ("lr", "lr"),
             ("images_per_sec", "images_per_sec")],
    "epoch": [("loss", "epoch/train/loss"), ("accuracy", "epoch/train/accuracy"),
              ("lr", "epoch/lr"), ("images_per_sec", "epoch/images_per_sec")],
    "eval": [("test_loss", "test/loss"), ("test_accuracy", "test/accuracy")],
    "gpu": [("gpu_util", "gpu/utilization"), ("gpu_mem_used_bytes", "gpu/memory_used_gib")],
}


def check_train(tmp):
    if not os.path.isdir(FASHION):
        fail("%s is missing (apt-get install dataset-fashion-mnist): ptc train cannot run" % FASHION)
        return
    metrics, tbdir = os.path.join(tmp, "metrics.jsonl"), os.path.join(tmp, "runs", "tiny")
    argv = [PTC, "train", "--dataset", "fashion-mnist", "--max-samples", "256", "--backend", "ref",
            "--epochs", "2", "--log-every", "2", "--metrics", metrics, "--tensorboard", tbdir,
            "--save", os.path.join(tmp, "tiny.pth"), "--no-progress"]
    print("$ " + " ".join(argv))
    r = subprocess.run(argv, capture_output=True, timeout=1200)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    print("".join("   | " + l + "\n" for l in out.splitlines()))
    if r.returncode != 0:
        fail("ptc train exited %d" % r.returncode)
        return
    files = glob.glob(os.path.join(tbdir, "events.out.tfevents.*"))
    if len(files) != 1 or ("tensorboard: " + files[0]) not in out:
        fail("expected one event file in %s, printed by ptc train; found %s" % (tbdir, files))
        return
    compare(metrics, tbdir, files[0])


def compare(metrics, tbdir, event_file):
    """Every (tag, step, value) of the event files in tbdir against the metrics log: both ways,
    values within 1 float32 ulp of float32(the metrics value); prints a table of tags."""
    # What the metrics log says, as (tag, step) -> value.
    want = {}
    for line in open(metrics):
        rec = json.loads(line)
        ev = rec.get("event")
        if ev not in MAP:
            continue
        step = rec["step"]  # every record's tags are at its global step
        for key, tag in MAP[ev]:
            if key not in rec:
                continue
            v = rec[key]
            if key == "gpu_mem_used_bytes":
                v = v / 2.0 ** 30
            want.setdefault((tag, step), []).append(v)
    acc = accumulate(tbdir)
    got = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            got.setdefault((tag, e.step), []).append(e.value)
    if not got:
        fail("the event file %s holds no scalar: ptc_train did not call ptc_train_params.scalar "
             "(lib/train), or ptc train did not pass it on" % event_file)
    if not any(t == "train/loss" for t, _ in want):
        fail("the metrics log has no \"step\" lines: --log-every 2 did not reach lib/train")
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing:
        fail("%d (tag, step) of the metrics log are not in the event file: %s"
             % (len(missing), missing[:12]))
    if extra:
        fail("%d (tag, step) of the event file are not in the metrics log: %s"
             % (len(extra), extra[:12]))
    table = {}
    for key in sorted(set(want) & set(got)):
        tag = key[0]
        row = table.setdefault(tag, [0, 0, 0.0])
        w, g = want[key], got[key]
        if len(w) != len(g):
            fail("%s at step %d: %d records in the metrics log, %d in the event file"
                 % (key[0], key[1], len(w), len(g)))
            continue
        for wv, gv in zip(w, g):
            row[0] += 1
            d = ulps(f32(wv), gv)
            row[1] = max(row[1], d)
            row[2] = max(row[2], abs(f32(wv) - gv) if not math.isnan(gv) else 0.0)
            if d > 1:
                fail("%s at step %d: event file %r, metrics log %r (float32 %r, %s ulp apart)"
                     % (key[0], key[1], gv, wv, f32(wv), d))
    print()
    print("%-24s %6s %10s %14s" % ("tag", "count", "max ulp", "max |diff|"))
    for tag in sorted(table):
        c, u, d = table[tag]
        print("%-24s %6d %10d %14.3g" % (tag, c, u, d))
    print("%-24s %6d" % ("all", sum(r[0] for r in table.values())))
    if table and not missing and not extra:
        ok("every (tag, step) of the event file equals the metrics log's (%d records, %d tags)"
           % (sum(r[0] for r in table.values()), len(table)))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        # A run of one's own: check_tensorboard.py --compare METRICS.jsonl TBDIR
        files = glob.glob(os.path.join(sys.argv[3], "events.out.tfevents.*"))
        compare(sys.argv[2], sys.argv[3], files[0] if files else sys.argv[3])
        return 1 if failures else 0
    for prog in (PTC, TB_WRITE):
        if not os.access(prog, os.X_OK):
            print("ERROR: %s was not built (make check builds it; configure needs protoc-c and "
                  "libprotobuf-c)" % prog)
            return 99
    tmp = interop_common.mktemp("tensorboard")
    try:
        print("== 1. the writer against TensorBoard's reader and SummaryWriter")
        check_writer(tmp)
        print()
        print("== 2. ptc train --tensorboard against its metrics log")
        check_train(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check_tensorboard: %s" % ("all checks passed" if not failures else
                                       "%d check(s) failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
