# kernels/local.mk: (automake fragment, included by Makefile.am)
# The CUDA kernels of the cuda backend (kernels/*.cu -> kernels/libptc_kernels.a, linked by the
# cuda module) and their tests: tests/unit/test_kmath runs kmath.h's per-element arithmetic on the
# host against the ref backend (always built); tests/gpu/test_kernels_gpu runs every launcher on a
# GPU against kmath.h (built with CUDA; exits 77 without a GPU).

check_PROGRAMS += tests/unit/test_kmath
TESTS += tests/unit/test_kmath
tests_unit_test_kmath_SOURCES = tests/unit/test_kmath.c tests/unit/check.h kernels/kmath.h
tests_unit_test_kmath_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels
tests_unit_test_kmath_LDADD = $(UNIT_LDADD) -lm

if PTC_HAVE_CUDA
PTC_KERNEL_CU = kernels/layout.cu kernels/elementwise.cu kernels/cast.cu kernels/pool.cu \
	kernels/batchnorm.cu kernels/linear.cu kernels/sgd.cu kernels/augment.cu \
	kernels/xent.cu
PTC_KERNEL_OBJS = $(PTC_KERNEL_CU:.cu=.o)
PTC_KERNEL_HDRS = $(top_srcdir)/kernels/kmath.h $(top_srcdir)/kernels/kcommon.cuh \
	$(top_srcdir)/kernels/ptc_kernels.h
# nvcc's own warnings and the host compiler's become errors with --enable-werror, as for C.
PTC_NVCC_WERROR = $(if $(findstring -Werror,$(PTC_WARN_CFLAGS)),-Werror all-warnings -Xcompiler -Wall$(comma)-Wextra$(comma)-Werror)
comma = ,
PTC_NVCC_FLAGS = -std=c++17 -O3 --fmad=false $(NVCC_GENCODE) $(PTC_NVCC_WERROR) \
	-Xcompiler -fPIC,-fvisibility=hidden -I$(top_srcdir)/kernels -I$(top_srcdir)/lib
AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =
AM_V_KAR = $(am__v_KAR_@AM_V@)
am__v_KAR_ = $(am__v_KAR_@AM_DEFAULT_V@)
am__v_KAR_0 = @echo "  AR      " $@;
am__v_KAR_1 =

$(PTC_KERNEL_OBJS): $(PTC_KERNEL_HDRS)
kernels/%.o: kernels/%.cu
	@$(MKDIR_P) kernels
	$(AM_V_NVCC)$(NVCC) $(PTC_NVCC_FLAGS) -c -o $@ $<

kernels/libptc_kernels.a: $(PTC_KERNEL_OBJS)
	$(AM_V_KAR)rm -f $@ && $(AR) cr $@ $(PTC_KERNEL_OBJS) && $(RANLIB) $@

# Built by plain `make` (the cuda module links it). Makefile.am and the other fragments set no
# noinst_DATA; one that needs it must add to this line, automake refusing a second "=".
noinst_DATA = kernels/libptc_kernels.a
CLEANFILES += $(PTC_KERNEL_OBJS) kernels/libptc_kernels.a

check_PROGRAMS += tests/gpu/test_kernels_gpu
TESTS += tests/gpu/test_kernels_gpu
tests_gpu_test_kernels_gpu_SOURCES = tests/gpu/test_kernels_gpu.c kernels/kmath.h \
	kernels/ptc_kernels.h
tests_gpu_test_kernels_gpu_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kernels $(CUDA_CFLAGS)
# The archive's objects come from nvcc's C++ front end: its host stubs need libstdc++.
tests_gpu_test_kernels_gpu_LDADD = kernels/libptc_kernels.a $(CUDA_LIBS) -lstdc++ -lm
tests_gpu_test_kernels_gpu_DEPENDENCIES = kernels/libptc_kernels.a
endif
