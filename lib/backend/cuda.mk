# lib/backend/cuda.mk: (automake fragment, included by Makefile.am)
# The cuda backend: the module backend-cuda.so (lib/backend/cuda.c over cuDNN, cuBLAS and the
# kernels of kernels/), and tests/gpu/cuda_layers, which links cuda.c directly (no module
# loading) and checks every op of the table against the ref backend on a GPU (exit 77 without
# one). Built only when configure found both CUDA and cuDNN.
if PTC_HAVE_CUDA
if PTC_HAVE_CUDNN
pkglib_LTLIBRARIES += lib/backend-cuda.la
lib_backend_cuda_la_SOURCES = lib/backend/cuda.c lib/backend/cuda.h lib/base/module.c \
	lib/backend/shape.c
# -I$(top_srcdir): cuda.c includes "kernels/ptc_kernels.h".
lib_backend_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
lib_backend_cuda_la_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(CUDNN_CFLAGS)
# libtool warns that a static archive in a module is not portable: the archive is built -fPIC
# for exactly this use (kernels/local.mk). Its host code is nvcc's C++ (static guards), hence
# -lstdc++.
lib_backend_cuda_la_LIBADD = kernels/libptc_kernels.a $(CUDNN_LIBS) $(CUDA_LIBS) -lstdc++
lib_backend_cuda_la_LDFLAGS = -module -avoid-version -shared -no-undefined \
	-export-symbols-regex '^ptc_plugin_entry_v1$$'

check_PROGRAMS += tests/gpu/cuda_layers
TESTS += tests/gpu/cuda_layers
tests_gpu_cuda_layers_SOURCES = tests/gpu/cuda_layers.c lib/backend/cuda.c lib/backend/cuda.h
# PTC_CUDA_NO_MODULE: the test uses the table directly, without the module's entry point (and so
# without lib/base/module.c, whose functions libptc_core already has).
tests_gpu_cuda_layers_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -DPTC_CUDA_NO_MODULE
tests_gpu_cuda_layers_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(CUDNN_CFLAGS)
tests_gpu_cuda_layers_LDADD = lib/libptc_core.la kernels/libptc_kernels.a $(CUDNN_LIBS) \
	$(CUDA_LIBS) -lstdc++
endif
endif
