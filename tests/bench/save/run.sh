#!/bin/sh
# run.sh - checkpoint saving speed: ptc_save against a plain write + fsync of the same bytes and
# against torch.save + fsync, in the same run, paired round by round. See README.md beside this.
# Never run by make check.
#
#   top_builddir=BUILD tests/bench/save/run.sh   (top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch and torchvision; BENCH_REPEAT
# (default 7, at least 3; BENCH_REPEATS is read when BENCH_REPEAT is unset) timed rounds after one
# warm-up round; BENCH_OUT, when set, a file that receives the markdown table; BENCH_TMPDIR
# (default $TMPDIR or /tmp) holds inputs and outputs, 5 GiB free required; BENCH_CASES (default
# "a b") picks cases. Exit status 0 when every measurement ran, whatever the numbers: the targets
# are reported, never asserted.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "$top_builddir" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeats=${BENCH_REPEAT:-${BENCH_REPEATS:-7}}
cases=${BENCH_CASES:-a b}

case $repeats in
'' | *[!0-9]*) echo "run.sh: BENCH_REPEAT must be a number" >&2; exit 2 ;;
esac
if [ "$repeats" -lt 3 ]; then
    echo "run.sh: BENCH_REPEAT=$repeats raised to 3 (a median of fewer runs is noise)" >&2
    repeats=3
fi
bench="$top_builddir/tests/bench/save/bench_save"
ptc="$top_builddir/tools/ptc"
if [ ! -x "$bench" ]; then
    echo "run.sh: $bench is not built (make tests/bench/save/bench_save)" >&2
    exit 1
fi
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "run.sh: $py cannot import torch and torchvision (set TORCH_PYTHON)" >&2
    exit 1
fi

base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
free_kib=$(df -Pk "$base" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kib" ] && [ "$free_kib" -lt $((5 * 1024 * 1024)) ]; then
    echo "run.sh: $base has $((free_kib / 1024)) MiB free; 5 GiB are needed (set BENCH_TMPDIR)" >&2
    exit 1
fi
tmp=$(mktemp -d "$base/ptc-bench-save.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

"$py" - "$tmp" "$cases" "$repeats" "$bench" "$ptc" "${BENCH_OUT:-}" <<'PYEOF'
import gc, os, statistics, subprocess, sys, time
import torch

tmp, cases, repeats = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
bench, ptc, bench_out = sys.argv[4], sys.argv[5], sys.argv[6]
has_convert = os.access(ptc, os.X_OK) and subprocess.run(
    [ptc, "help", "convert"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def make_input(c):
    torch.manual_seed(0)
    if c == "a":
        import torchvision
        obj = torchvision.models.resnet18(num_classes=10).state_dict()
    else:  # 16 float32 tensors of 64 MiB
        obj = {"t%02d" % i: torch.rand(16 << 20) for i in range(16)}
    p = os.path.join(tmp, "in_%s.pth" % c)
    torch.save(obj, p)
    return p


def rm(p):
    if os.path.exists(p):
        os.unlink(p)


names = {"a": "44 MB (resnet18 state dict)", "b": "1 GiB (16 tensors of 64 MiB)"}
rows = []
for c in cases:
    src = make_input(c)
    obj = torch.load(src, weights_only=True)
    outdir = os.path.join(tmp, "out_" + c)
    os.makedirs(outdir)
    out_torch = os.path.join(outdir, "torch.pth")
    out_conv = os.path.join(outdir, "convert.pth")
    b = subprocess.Popen([bench, src, outdir], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    ready = b.stdout.readline().split()
    if not ready or ready[0] != "ready":
        sys.exit("bench_save failed on %s" % src)
    size = int(ready[1])

    def ask(cmd):
        b.stdin.write(cmd + "\n")
        b.stdin.flush()
        line = b.stdout.readline().strip()
        if not line:
            sys.exit("bench_save stopped at \"%s\"" % cmd)
        return line

    cpu = {"ptc": [], "plain": []}

    def bench_cmd(k):
        def run():
            wall, used = ask(k).split()
            cpu[k].append(float(used))
            return float(wall)
        return run

    run_ptc, run_plain = bench_cmd("ptc"), bench_cmd("plain")

    def run_torch():  # the same discipline as bench_save: output removed, dirty pages written back
        rm(out_torch)
        os.sync()
        gc.collect()
        t0 = time.perf_counter()
        torch.save(obj, out_torch)
        fd = os.open(out_torch, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        return time.perf_counter() - t0

    def run_convert():  # the command line: a fresh process opens the input and saves it
        rm(out_conv)
        os.sync()
        t0 = time.perf_counter()
        subprocess.run([ptc, "convert", src, out_conv], check=True)
        return time.perf_counter() - t0

    contenders = [("ptc", run_ptc), ("plain", run_plain), ("torch", run_torch)]
    if has_convert:
        contenders.append(("convert", run_convert))
    times = {k: [] for k, _ in contenders}
    # One warm-up round, then timed rounds; the order rotates every round so that no contender
    # always follows the same one.
    for rep in range(repeats + 1):
        k0 = rep % len(contenders)
        for k, fn in contenders[k0:] + contenders[:k0]:
            dt = fn()
            if rep:
                times[k].append(dt)
    same = ask("check")
    b.stdin.write("quit\n")
    b.stdin.close()
    b.wait()
    if same != "same":
        sys.exit("bench_save: ptc_save's output changed between runs")
    with open(out_torch, "rb") as f:
        torch_size = os.fstat(f.fileno()).st_size
    for p in (out_torch, out_conv, src):
        rm(p)
    # The warm-up round's CPU times are dropped as its wall times are.
    cpus = {k: v[1:] for k, v in cpu.items()}
    rows.append((c, size, torch_size, times, cpus))
    print("%s: ptc writes %d bytes, torch.save %d; seconds per round: %s" % (
        names[c], size, torch_size,
        "; ".join("%s %s" % (k, " ".join("%.3f" % x for x in v)) for k, v in times.items())))
    del obj
    gc.collect()


def med_ms(v):
    return "%.1f [%.1f-%.1f]" % (statistics.median(v) * 1e3, min(v) * 1e3, max(v) * 1e3)


def paired(a, b):  # median of the per-round ratios a/b
    return statistics.median([x / y for x, y in zip(a, b)])


lines = []
lines.append("| case | bytes | ptc_save ms | plain write + fsync ms | torch.save + fsync ms | "
             "ptc convert ms (whole process) | ptc_save / plain | torch.save / ptc_save | "
             "CPU ms: ptc_save, plain |")
lines.append("|---|---|---|---|---|---|---|---|---|")
verdicts = []
for c, size, torch_size, t, cpus in rows:
    r_plain = paired(t["ptc"], t["plain"])
    r_torch = paired(t["torch"], t["ptc"])
    lines.append("| %s | %d | %s | %s | %s | %s | %.2fx | %.2fx | %.1f, %.1f |" % (
        names[c], size, med_ms(t["ptc"]), med_ms(t["plain"]), med_ms(t["torch"]),
        med_ms(t["convert"]) if "convert" in t else "-", r_plain, r_torch,
        statistics.median(cpus["ptc"]) * 1e3, statistics.median(cpus["plain"]) * 1e3))
    verdicts.append("%s: ptc_save within 1.2x of a plain write + fsync of the same bytes: %.2fx, %s"
                    % (names[c], r_plain, "met" if r_plain <= 1.2 else "MISSED"))
    verdicts.append("%s: ptc_save >= 1.2x torch.save + fsync: %.2fx, %s"
                    % (names[c], r_torch, "met" if r_torch >= 1.2 else "MISSED"))
lines.append("")
lines.append("Medians [min-max] of %d rounds after one warm-up round, %d CPUs, torch %s; ratios are "
             "medians of the per-round ratios. Load average at the end: %s." % (
                 repeats, os.cpu_count(), torch.__version__,
                 " ".join("%.2f" % x for x in os.getloadavg())))
lines.append("")
for v in verdicts:
    lines.append("- " + v)
text = "\n".join(lines) + "\n"
print()
print(text, end="")
if bench_out:
    with open(bench_out, "w") as f:
        f.write(text)
PYEOF
