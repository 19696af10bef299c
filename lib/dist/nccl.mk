# lib/dist/nccl.mk: (automake fragment, included by Makefile.am)
# The nccl device communicator: the module comm-nccl.so (lib/dist/nccl.c over NCCL and the CUDA
# runtime), and two tests of it:
#   tests/gpu/nccl_check loads the module (PTC_PLUGIN_PATH) and runs every collective at world 1
#     over the single communicator on plain cudaMalloc memory; it exits 77 without a GPU;
#   tests/gpu/nccl_mock compiles nccl.c next to libptc_core (PTC_MODULE_LINKED_IN) over
#     tests/gpu/fake_cuda_nccl.c, a host imitation of the CUDA runtime and NCCL: it needs only
#     the toolkit's headers, links neither cudart nor libnccl, and runs (never skips) everywhere.
# Built only when configure found both CUDA and NCCL.
if PTC_HAVE_CUDA
if PTC_HAVE_NCCL
pkglib_LTLIBRARIES += lib/comm-nccl.la
lib_comm_nccl_la_SOURCES = lib/dist/nccl.c lib/dist/nccl.h lib/base/module.h lib/base/module.c
lib_comm_nccl_la_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
lib_comm_nccl_la_LIBADD = $(NCCL_LIBS) $(CUDA_LIBS) -lpthread
lib_comm_nccl_la_LDFLAGS = $(PTC_MODULE_LDFLAGS)

check_PROGRAMS += tests/gpu/nccl_check
TESTS += tests/gpu/nccl_check
tests_gpu_nccl_check_SOURCES = tests/gpu/nccl_check.c
tests_gpu_nccl_check_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
tests_gpu_nccl_check_LDADD = lib/libptc_core.la $(CUDA_LIBS) -ldl -lpthread
tests_gpu_nccl_check_DEPENDENCIES = lib/comm-nccl.la lib/libptc_core.la

check_PROGRAMS += tests/gpu/nccl_mock
TESTS += tests/gpu/nccl_mock
tests_gpu_nccl_mock_SOURCES = tests/gpu/nccl_mock.c tests/gpu/fake_cuda_nccl.c \
	tests/gpu/fake_cuda_nccl.h lib/dist/nccl.c lib/dist/nccl.h
tests_gpu_nccl_mock_CPPFLAGS = $(AM_CPPFLAGS) -DPTC_MODULE_LINKED_IN
tests_gpu_nccl_mock_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
tests_gpu_nccl_mock_LDADD = lib/libptc_core.la -ldl -lpthread
endif
endif
