#!/bin/sh
# run.sh - checkpoint saving speed: ptc against torch.save and against a plain write of the same
# bytes, and ptc's pth -> safetensors conversion against Python's (torch.load + safetensors'
# save_file), all measured in the same run. See README.md beside this. Never run by make check.
#
#   top_builddir=BUILD tests/bench/save/run.sh   (top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch and torchvision (safetensors is
# optional: without it the conversion rows are left out); BENCH_REPEATS (default 5, at least 5)
# runs per measurement, medians reported; BENCH_TMPDIR (default $TMPDIR or /tmp) holds inputs and
# outputs, 5 GiB free required; BENCH_CASES (default "a b") picks cases. Exit status 0 when every
# measurement ran, whatever the numbers: the targets are reported, never asserted.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "$top_builddir" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeats=${BENCH_REPEATS:-5}
cases=${BENCH_CASES:-a b}

case $repeats in
'' | *[!0-9]*) echo "run.sh: BENCH_REPEATS must be a number" >&2; exit 2 ;;
esac
if [ "$repeats" -lt 5 ]; then
    echo "run.sh: BENCH_REPEATS=$repeats raised to 5 (medians of fewer runs are noise)" >&2
    repeats=5
fi

# The ptc writer: `ptc convert IN OUT` where it exists, else the interop tests' save_tool (the
# same ptc_save call behind a smaller front end).
ptc="$top_builddir/tools/ptc"
save_tool="$top_builddir/tests/interop/save_tool"
if [ -x "$ptc" ] && "$ptc" help convert >/dev/null 2>&1; then
    writer="convert"
    writer_cmd=$ptc
elif [ -x "$save_tool" ]; then
    writer="save_tool"
    writer_cmd=$save_tool
    echo "run.sh: \`ptc convert\` is not built; timing $save_tool copy instead" >&2
else
    echo "run.sh: neither \`$ptc convert\` nor $save_tool is built" >&2
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

"$py" - "$tmp" "$cases" "$repeats" "$writer" "$writer_cmd" <<'EOF'
import gc, os, statistics, subprocess, sys, time
import torch

tmp, cases, repeats = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
writer, writer_cmd = sys.argv[4], sys.argv[5]
torch.set_num_threads(max(1, os.cpu_count() or 1))
try:
    import safetensors, safetensors.torch
    st_version = safetensors.__version__
except Exception as e:  # noqa: BLE001
    safetensors = None
    print("safetensors is not importable (%s): the conversion rows are left out" % e)


def ptc_argv(src, dst):
    if writer == "convert":
        return [writer_cmd, "convert", src, dst]
    fmt = ["--format", "safetensors"] if dst.endswith(".safetensors") else []
    return [writer_cmd, "copy", src, dst] + fmt


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rm(p):
    if os.path.exists(p):
        os.unlink(p)


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


names = {"a": "(a) resnet18 state dict", "b": "(b) 1 GiB, 16 tensors"}
rows = []
for c in cases:
    src = make_input(c)
    with open(src, "rb") as f:  # the source in the page cache for ptc (torch has it in memory)
        while f.read(8 << 20):
            pass
    obj = torch.load(src, weights_only=True)
    out_ptc = os.path.join(tmp, "out_ptc", "ckpt.pth")
    out_torch = os.path.join(tmp, "out_torch", "ckpt.pth")
    out_plain = os.path.join(tmp, "out_plain", "ckpt.pth")
    st_ptc = os.path.join(tmp, "out_ptc", "ckpt.safetensors")
    st_py = os.path.join(tmp, "out_py", "ckpt.safetensors")
    for p in (out_ptc, out_torch, out_plain, st_py):
        os.makedirs(os.path.dirname(p), exist_ok=True)
    r = subprocess.run(ptc_argv(src, out_ptc), stderr=subprocess.PIPE)
    if r.returncode:
        sys.exit("ptc failed on %s: %s" % (src, r.stderr.decode().strip()))
    with open(out_ptc, "rb") as f:
        same_bytes = f.read()  # the plain write writes exactly what ptc wrote
    size = len(same_bytes)

    def ptc_pth():
        subprocess.run(ptc_argv(src, out_ptc), check=True)

    def torch_save():
        torch.save(obj, out_torch)

    def torch_save_fsync():
        torch.save(obj, out_torch)
        fsync_path(out_torch)

    def plain(sync):
        def run():
            with open(out_plain, "wb") as f:
                f.write(same_bytes)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
        return run

    def ptc_st():
        r = subprocess.run(ptc_argv(src, st_ptc), stderr=subprocess.PIPE)
        if r.returncode:
            raise RuntimeError(r.stderr.decode().strip())

    def py_st(sync):
        def run():
            safetensors.torch.save_file(torch.load(src, weights_only=True), st_py)
            if sync:
                fsync_path(st_py)
        return run

    contenders = [("ptc", ptc_pth, out_ptc), ("torch", torch_save, out_torch),
                  ("torch_fsync", torch_save_fsync, out_torch), ("plain", plain(False), out_plain),
                  ("plain_fsync", plain(True), out_plain)]
    if safetensors is not None:
        contenders += [("ptc_st", ptc_st, st_ptc), ("py_st", py_st(False), st_py),
                       ("py_st_fsync", py_st(True), st_py)]
    times = {k: [] for k, _, _ in contenders}
    failed = {}
    # Round-robin, one warm-up round first: drift of the machine hits every contender alike. Before
    # each timed run the output is deleted and dirty pages are written back (os.sync), so that
    # nobody pays for the previous contender's writeback, outside the timing.
    for rep in range(repeats + 1):
        for k, fn, out in contenders:
            if k in failed:
                continue
            rm(out)
            os.sync()
            gc.collect()
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                failed[k] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                continue
            dt = time.perf_counter() - t0
            if rep:
                times[k].append(dt)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items() if v}
    for k, e in failed.items():
        print("  %s: %s failed: %s" % (names[c], k, e))
    st_size = os.path.getsize(st_ptc) if os.path.exists(st_ptc) else 0
    for p in (out_ptc, out_torch, out_plain, st_ptc, st_py, src):
        rm(p)
    print("%s: ptc writes %d bytes; median [min-max] ms: %s" % (
        names[c], size, ", ".join("%s %.1f [%.1f-%.1f]" % (k, med[k], min(times[k]) * 1e3,
                                                          max(times[k]) * 1e3) for k in med)))
    rows.append((c, size, st_size, med))
    del obj
    gc.collect()

# ---- the table --------------------------------------------------------------------------------
def f(m, k):
    return "%.1f" % m[k] if k in m else "-"


def ratio(m, a, b, fmt="%.2fx"):
    return fmt % (m[a] / m[b]) if a in m and b in m and m[b] > 0 else "-"


hdr = ("case", "MiB", "ptc ms", "torch.save ms", "+fsync ms", "plain ms", "+fsync ms",
       "torch/ptc", "torch+fsync/ptc", "ptc/plain+fsync", "ptc/plain")
table = []
verdicts = []
for c, size, st_size, m in rows:
    table.append((names[c], "%.1f" % (size / 1048576.0), f(m, "ptc"), f(m, "torch"), f(m, "torch_fsync"),
                  f(m, "plain"), f(m, "plain_fsync"), ratio(m, "torch", "ptc", "%.1fx"),
                  ratio(m, "torch_fsync", "ptc", "%.1fx"), ratio(m, "ptc", "plain_fsync"),
                  ratio(m, "ptc", "plain")))
    if "ptc" in m:
        def judge(ok, text):
            verdicts.append("%-4s %s" % ("met" if ok else "MISS", text))
        judge(m["torch"] / m["ptc"] >= 3, "%s ptc >= 3x faster than torch.save: %.1fx (%.1fx against "
              "torch.save + fsync)" % (names[c][:3], m["torch"] / m["ptc"], m["torch_fsync"] / m["ptc"]))
        judge(m["ptc"] / m["plain_fsync"] <= 1.5, "%s ptc within 1.5x of a plain write of the same bytes, "
              "both fsync'd: %.2fx (%.2fx against the write without fsync)" % (
                  names[c][:3], m["ptc"] / m["plain_fsync"], m["ptc"] / m["plain"]))


def show(hdr, table):
    widths = [max(len(str(x[i])) for x in [hdr] + table) for i in range(len(hdr))]
    fmt = "  ".join("%%-%ds" if i == 0 else "%%%ds" for i in range(len(hdr))) % tuple(widths)
    print(fmt % hdr)
    for row in table:
        print(fmt % row)


print()
print("Saving a checkpoint (writer: %s; torch %s; %d CPUs)" % (
    "ptc convert" if writer == "convert" else "save_tool copy", torch.__version__, os.cpu_count()))
show(hdr, table)
if safetensors is not None:
    hdr2 = ("case", "MiB", "ptc convert ms", "load+save_file ms", "+fsync ms", "python/ptc",
            "python+fsync/ptc")
    t2 = [(names[c], "%.1f" % (st_size / 1048576.0) if st_size else "-", f(m, "ptc_st"), f(m, "py_st"), f(m, "py_st_fsync"),
           ratio(m, "py_st", "ptc_st", "%.1fx"), ratio(m, "py_st_fsync", "ptc_st", "%.1fx"))
          for c, size, st_size, m in rows]
    print()
    print("pth -> safetensors (Python: safetensors %s, save_file(torch.load(IN, weights_only=True)))"
          % st_version)
    show(hdr2, t2)
print()
print("medians of %d runs after one warm-up round; ptc fsyncs its file (then renames it), so its fair"
      % repeats)
print("peers are the +fsync columns; ratios above 1 in torch/ptc and python/ptc favour ptc. Targets:")
for v in verdicts:
    print("  " + v)
EOF
