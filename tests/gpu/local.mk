# tests/gpu/local.mk: (automake fragment, included by Makefile.am)
# The GPU tier. tests/gpu/run.sh is the one command on a GPU machine (docs/gpu.md); `make check`
# runs it too, and it exits 77 (skipped) where nvidia-smi finds no GPU: every CI run.
# Its C programs have their rules beside their sources: cuda_layers in lib/backend/cuda.mk,
# test_kernels_gpu in kernels/local.mk, nccl_check in lib/dist/nccl.mk.
TESTS += tests/gpu/run.sh
EXTRA_DIST += tests/gpu/run.sh tests/gpu/prepare.sh tests/gpu/gpu_common.py \
	tests/gpu/check_bf16_layers.py tests/gpu/check_free_run.py tests/gpu/check_monitoring.py \
	tests/gpu/bench_gpu.py
