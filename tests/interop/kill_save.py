"""kill_save.py - a save killed at any moment leaves the old file or the new one, never a mix.

Two checkpoints are written once by torch in a temporary folder: A (about 200 MB) and B (about
100 MB, other numbers). ptc writes each three times, uninterrupted, under the name ckpt.pth in a
folder of its own: the reference outputs, whose SHA-256 are kept, which must load in torch; no other
file may remain there. While they run, the folder is watched, which gives each write's duration and
the window in which its temporary file exists and is incomplete (from its creation until it holds
every byte; the fsync and the rename follow), measured from the start of the process. Where the file
system allows it the temporary file has no name (O_TMPFILE, linked into place once complete): it is
then watched through the writer's /proc/PID/fd links ("FOLDER/#INODE (deleted)"), and a kill must
leave no file at all beside ckpt.pth.

Then, in trial after trial, ptc (`ptc convert SRC ckpt.pth`, or `save_tool copy` while convert is
not built) writes whichever of A and B the file ckpt.pth does not hold at the moment, over it, and
is killed with SIGKILL (its whole process group). Four trials in five aim at the window of the
temporary file by watching it: the test polls the folder and kills the writer as soon as the
temporary file holds a share of the new file's bytes drawn between 5% and 95% (a delay drawn from
the measured window alone missed it too often on a loaded machine, where the writes' durations vary
several-fold). Every fifth trial kills after a delay drawn across the whole write (0 to 110% of its
measured duration), so that the other moments (before the temporary file, after the rename, after
the exit) are hit too.
After each trial:
  - ckpt.pth exists and its SHA-256 is that of the old file or of the new one; a run that finished
    before the kill must have left the new one;
  - every other file in the folder is a temporary file named .ckpt.pth.ptc-*; those are counted
    and removed by this test; a run that finished leaves none. A temporary file shorter than the
    new file, or of its size with other bytes, is incomplete: the kill landed mid-write.
At least 40% of the trials (20 of 50) must have been killed while the temporary file existed and
was incomplete, or the test fails: otherwise it would say little about kills during a write.
At the end ckpt.pth must load with torch.load(weights_only=True, mmap=True).

KILL_SAVE_TRIALS (default 50) and KILL_SAVE_SEED (default 20250101) change the run. It takes 30 to
60 s, most of it writing up to 200 MB per trial.
Exit status: 0 never a mix, 1 a failure, 77 torch missing.
"""

import hashlib
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch = ic.require_torch()
warnings.filterwarnings("ignore")

NAME = "ckpt.pth"
TEMP_RE = re.compile(r"^\." + re.escape(NAME) + r"\.ptc-")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(8 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def make_sources(tmp):
    g = torch.Generator().manual_seed(42)
    srcs = {}
    for tag, n in (("A", 12), ("B", 6)):  # tensors of 16 MiB: 192 MiB and 96 MiB
        d = {"%s.layer%02d.weight" % (tag, i): torch.rand(4 << 20, generator=g) for i in range(n)}
        d["step"] = torch.tensor(n)
        p = os.path.join(tmp, "src_%s.pth" % tag)
        torch.save(d, p)
        srcs[tag] = (p, d)
    return srcs


def writer_argv(w, src, dst):
    if w.has_convert():
        return w.convert_argv(src, dst)
    return [w.save_tool, "copy", src, dst]


def temps_in(folder):
    return [f for f in os.listdir(folder) if TEMP_RE.match(f)]


def unnamed_sizes(pid, folder):
    """Sizes of the unnamed temporary files (O_TMPFILE) process pid holds open in folder: their
    /proc/PID/fd links read "FOLDER/#INODE (deleted)"."""
    sizes = []
    fds = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fds)
    except OSError:  # exited meanwhile
        return sizes
    for fd in names:
        try:
            link = os.readlink(os.path.join(fds, fd))
            if link.startswith(folder + "/#") and link.endswith(" (deleted)"):
                sizes.append(os.stat(os.path.join(fds, fd)).st_size)
        except OSError:
            pass
    return sizes


def temp_sizes(folder, pid):
    """Sizes of every temporary file of the write: named ones in folder and unnamed ones pid holds."""
    sizes = []
    for f in temps_in(folder):
        try:
            sizes.append(os.path.getsize(os.path.join(folder, f)))
        except OSError:  # renamed meanwhile
            pass
    return sizes + unnamed_sizes(pid, folder)


def holds(folder, goal, pid):
    """Whether a temporary file of the write (named or unnamed) holds at least goal bytes."""
    return any(n >= goal for n in temp_sizes(folder, pid))


def watched_write(argv, folder, out):
    """Runs one uninterrupted write to out, watching folder for its temporary file. Returns
    (returncode, stderr, duration, first, last): first is the time (from the start) at which the
    temporary file was first seen, last the time at which it was first seen holding all the bytes of
    the result (the fsync and the rename come after), or last seen at all; None when it never was."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = []  # (time, size)
    while p.poll() is None:
        for n in temp_sizes(folder, p.pid):
            seen.append((time.monotonic() - t0, n))
        time.sleep(0.002)
    duration = time.monotonic() - t0
    err = p.communicate()[1].decode("utf-8", "replace").strip()
    if not seen:
        return p.returncode, err, duration, None, None
    size = os.path.getsize(out) if p.returncode == 0 else -1
    full = [t for t, n in seen if n >= size]
    return p.returncode, err, duration, seen[0][0], full[0] if full else seen[-1][0]


def main():
    ic.standin_banner()
    w = ic.Writer()
    print("writer: " + w.describe())
    try:
        w.require()
    except ic.WriterError as e:
        print("FAIL: %s" % e)
        return 1
    ntrials = int(os.environ.get("KILL_SAVE_TRIALS", "50"))
    seed = int(os.environ.get("KILL_SAVE_SEED", "20250101"))
    rng = random.Random(seed)
    tmp = ic.mktemp("kill")
    problems = []
    t_start = time.monotonic()
    try:
        srcs = make_sources(tmp)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        target = os.path.join(work, NAME)

        # Reference outputs, written without interruption: their hash, their write time and the
        # window of their temporary file.
        ref, dur, window = {}, {}, {}
        for tag, (src, obj) in srcs.items():
            d = os.path.join(tmp, "ref_" + tag)
            os.makedirs(d)
            out = os.path.join(d, NAME)
            times, firsts, lasts = [], [], []
            for _ in range(3):  # over the previous copy, as in the trials
                rc, err, t, first, last = watched_write(writer_argv(w, src, out), d, out)
                times.append(t)
                if first is not None:
                    firsts.append(first)
                    lasts.append(last)
                if rc != 0:
                    print("FAIL: the uninterrupted write of %s exited %d: %s" % (tag, rc, err))
                    return 1
            left = sorted(f for f in os.listdir(d) if f != NAME)
            if left:
                print("FAIL: uninterrupted writes of %s left %s beside %s" % (tag, left, NAME))
                return 1
            loaded = torch.load(out, weights_only=True, mmap=True)
            bad = ic.diff(obj, loaded)
            if bad:
                print("FAIL: ptc's uninterrupted copy of %s does not load equal to it: %s" % (tag, bad[:3]))
                return 1
            del loaded
            ref[tag] = (sha256(out), os.path.getsize(out))
            dur[tag] = statistics.median(times)
            window[tag] = (statistics.median(firsts) if firsts else float('nan'),
                           statistics.median(lasts) if lasts else float('nan'))
            print("reference %s: %d bytes, written in %.2f s (median of 3), loads equal to the source; "
                  "temporary file seen incomplete from %.3f s to %.3f s" % (
                      tag, ref[tag][1], dur[tag], window[tag][0], window[tag][1]))

        shutil.copyfile(os.path.join(tmp, "ref_B", NAME), target)
        current = "B"
        counts = {"old": 0, "new": 0, "finished": 0, "temps": 0}
        landed = {"early": 0, "incomplete": 0, "complete": 0, "late": 0, "finished": 0}
        for trial in range(1, ntrials + 1):
            new = "A" if current == "B" else "B"
            aimed = trial % 5 != 0
            goal = rng.uniform(0.05, 0.95) * ref[new][1] if aimed else None
            delay = None if aimed else rng.uniform(0, 1.1 * dur[new])
            t0 = time.monotonic()
            p = subprocess.Popen(writer_argv(w, srcs[new][0], target), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, start_new_session=True)
            if aimed:  # until the temporary file holds the goal's bytes, or the writer exits
                while p.poll() is None and not holds(work, goal, p.pid):
                    time.sleep(0.0005)
                delay = time.monotonic() - t0
            else:
                time.sleep(delay)
            finished = p.poll() is not None
            # An unnamed temporary file vanishes with the process: what it held is read just
            # before the kill (it can only grow meanwhile, by far less than the 5% margin).
            before_kill = [] if finished else unnamed_sizes(p.pid, work)
            if not finished:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            err = p.communicate()[1].decode("utf-8", "replace").strip()
            rc = p.returncode
            if rc is not None and rc >= 0 and not finished:
                finished = True  # it exited on its own just before the kill
            what = "trial %d: write %s over %s, kill after %.3f s" % (trial, new, current, delay)
            if finished and rc != 0:
                problems.append("%s: the writer exited %d before the kill: %s" % (what, rc, err))

            others = sorted(f for f in os.listdir(work) if f != NAME)
            incomplete = any(n < ref[new][1] for n in before_kill)
            complete = any(n == ref[new][1] for n in before_kill)
            if before_kill and others:
                problems.append("%s: the write used an unnamed temporary file, yet the kill left %s"
                                % (what, others))
            for f in others:
                if TEMP_RE.match(f):
                    counts["temps"] += 1
                    if finished and rc == 0:
                        problems.append("%s: a finished write left the temporary file %s" % (what, f))
                    p_ = os.path.join(work, f)
                    if os.path.isdir(p_):
                        shutil.rmtree(p_)
                        continue
                    if (os.path.getsize(p_) == ref[new][1] and sha256(p_) == ref[new][0]):
                        complete = True  # killed after the last byte, before the rename
                    else:
                        incomplete = True
                    os.unlink(p_)
                else:
                    problems.append("%s: unexpected file %s (not a .%s.ptc-* temporary name)" % (
                        what, f, NAME))
                    os.unlink(os.path.join(work, f))
            if not os.path.exists(target):
                problems.append("%s: %s is gone" % (what, NAME))
                break
            size = os.path.getsize(target)
            h = sha256(target) if size in (ref["A"][1], ref["B"][1]) else None
            if h == ref[current][0]:
                state = "old"
            elif h == ref[new][0]:
                state = "new"
            else:
                problems.append("%s: %s is neither the old file (%d bytes) nor the new one (%d bytes): "
                                "%d bytes, sha256 %s" % (what, NAME, ref[current][1], ref[new][1], size, h))
                break
            if finished and rc == 0 and state != "new":
                problems.append("%s: the write finished, yet the file is the old one" % what)
            counts["finished" if finished else state] += 1
            if finished:
                outcome = "finished"
            elif incomplete:
                outcome = "incomplete"
            elif complete:
                outcome = "complete"
            else:
                outcome = "early" if state == "old" else "late"
            landed[outcome] += 1
            if state == "new":
                current = new

        if not problems:
            try:
                bad = ic.diff(srcs[current][1], torch.load(target, weights_only=True, mmap=True))
            except Exception as e:  # noqa: BLE001
                bad = ["torch.load failed: %s" % e]
            if bad:
                problems.append("the final %s (%s) does not load equal to its source: %s" % (
                    NAME, current, bad[:3]))
        elapsed = time.monotonic() - t_start
        ntrials = trial
        print("%d trials (seed %d) in %.1f s: killed while the old file was in place %d, killed after the "
              "new one was in place %d, finished before the kill %d; %d temporary files left by killed "
              "runs, removed" % (ntrials, seed, elapsed, counts["old"], counts["new"], counts["finished"],
                                 counts["temps"]))
        need = (2 * ntrials + 4) // 5  # 40%, rounded up: 20 of 50
        print("kills that landed while the temporary file existed and was incomplete: %d of %d "
              "(at least %d required); before it existed %d, with it complete %d, after the rename %d, "
              "after the exit %d" % (landed["incomplete"], ntrials, need, landed["early"],
                                     landed["complete"], landed["late"], landed["finished"]))
        if landed["incomplete"] < need:
            problems.append("only %d of %d kills landed while the temporary file existed and was "
                            "incomplete; at least %d must, or the test says little about a kill "
                            "during a write" % (landed["incomplete"], ntrials, need))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print("ok   every trial left the complete old or the complete new file under its name")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
