# tests/gpu/local.mk: (automake fragment, included by Makefile.am)
# The GPU tier. tests/gpu/run.sh is the one command on a GPU machine (docs/gpu.md); `make check`
# runs it too, and it exits 77 (skipped) where nvidia-smi finds no GPU: every CI run.
# The rules of its C programs (cuda_layers, test_kernels_gpu, nccl_check) come with their sources
# (written in parallel); until then prepare.sh and run.sh report them missing.
TESTS += tests/gpu/run.sh
EXTRA_DIST += tests/gpu/run.sh tests/gpu/prepare.sh tests/gpu/gpu_common.py \
	tests/gpu/check_bf16_layers.py tests/gpu/check_free_run.py tests/gpu/check_monitoring.py \
	tests/gpu/bench_gpu.py
