# lib/dist/nccl.mk: (automake fragment, included by Makefile.am)
# The nccl device communicator: the module comm-nccl.so (lib/dist/nccl.c over NCCL and the CUDA
# runtime), and tests/gpu/nccl_check, which loads nothing: it links nccl.c with lib/base/module.c
# bound to a host table of its own, runs every collective at world 1 over the single
# communicator on plain cudaMalloc memory, and exits 77 without a GPU. Built only when configure
# found both CUDA and NCCL.
if PTC_HAVE_CUDA
if PTC_HAVE_NCCL
pkglib_LTLIBRARIES += lib/comm-nccl.la
lib_comm_nccl_la_SOURCES = lib/dist/nccl.c lib/base/module.h lib/base/module.c
lib_comm_nccl_la_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
lib_comm_nccl_la_LIBADD = $(NCCL_LIBS) $(CUDA_LIBS) -lpthread
lib_comm_nccl_la_LDFLAGS = $(PTC_MODULE_LDFLAGS)

check_PROGRAMS += tests/gpu/nccl_check
TESTS += tests/gpu/nccl_check
tests_gpu_nccl_check_SOURCES = tests/gpu/nccl_check.c
tests_gpu_nccl_check_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
tests_gpu_nccl_check_LDADD = lib/libptc_core.la $(CUDA_LIBS) -ldl -lpthread
tests_gpu_nccl_check_DEPENDENCIES = lib/comm-nccl.la lib/libptc_core.la
endif
endif
