# plugins/compute/cublas.mk: the CUDA compute backend (built only with CUDA).
#
# The kernels (.cu) are compiled by nvcc through libtool's compile mode with
# build-aux-cuda/nvcc-wrap, into PIC libtool objects linked into the module
# next to the C sources.  One fat binary: SASS for sm_75, sm_80, sm_86 and
# sm_90, plus compute_90 PTX for newer GPUs.
CUBLAS_CU = \
	plugins/compute/cublas/k_linear.cu \
	plugins/compute/cublas/k_f8_linear.cu \
	plugins/compute/cublas/k_misc.cu \
	plugins/compute/cublas/k_prefill.cu \
	plugins/compute/cublas/k_decode.cu \
	plugins/compute/cublas/k_sample.cu \
	plugins/compute/cublas/k_logprob.cu \
	plugins/compute/cublas/k_fp8.cu \
	plugins/compute/cublas/k_generic.cu
CUBLAS_CUH = \
	plugins/compute/cublas/common.cuh \
	plugins/compute/cublas/fused.cuh \
	plugins/compute/cublas/k_decode_mma.cuh \
	plugins/compute/cublas/kernels.h
CUBLAS_CU_LO = $(CUBLAS_CU:.cu=.lo)

noinst_HEADERS += \
	plugins/compute/cublas/cublas_int.h \
	plugins/compute/cublas/kernels.h
EXTRA_DIST += $(CUBLAS_CU) plugins/compute/cublas/common.cuh plugins/compute/cublas/fused.cuh \
	plugins/compute/cublas/k_decode_mma.cuh build-aux-cuda/nvcc-wrap

NVCC_ARCH = \
	-gencode arch=compute_75,code=sm_75 \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_86,code=sm_86 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# With --enable-werror (WARN_CFLAGS has -Werror) nvcc's warnings are errors too.
# (libtool's compile mode would eat -Xcompiler: use the long spelling)
NVCC_WERROR = $(if $(findstring -Werror,$(WARN_CFLAGS)),-Werror all-warnings \
	--compiler-options -Werror)
NVCC_FLAGS = -std=c++17 -O3 $(NVCC_ARCH) --compiler-options -fvisibility=hidden \
	--compiler-options -Wall,-Wextra,-Wno-unused-parameter $(NVCC_WERROR) \
	-I$(top_srcdir)/include -I$(top_srcdir) $(NVCCFLAGS)

AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =

.cu.lo:
	@$(MKDIR_P) $(@D)
	$(AM_V_NVCC)$(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
		--mode=compile $(SHELL) $(top_srcdir)/build-aux-cuda/nvcc-wrap $(NVCC) \
		$(NVCC_FLAGS) -c -o $@ $<
$(CUBLAS_CU_LO): $(CUBLAS_CUH) include/fgcore/q4.h include/fgcore/half.h build-aux-cuda/nvcc-wrap
plugins/compute/cublas/k_sample.lo: include/fgcore/sampling.h

if HAVE_CUDA
pkglib_LTLIBRARIES += plugins/compute/cublas.la
plugins_compute_cublas_la_SOURCES = \
	plugins/compute/cublas/plugin.c \
	plugins/compute/cublas/check.c \
	plugins/compute/cublas/graph.c \
	plugins/compute/cublas/linear.c \
	plugins/compute/cublas/generic.c \
	plugins/compute/cublas/ops.c
plugins_compute_cublas_la_CFLAGS = $(PLUGIN_CFLAGS) $(CUDA_CFLAGS)
plugins_compute_cublas_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_compute_cublas_la_LIBADD = $(CUBLAS_CU_LO) $(CUDA_LIBS) -lcublasLt -lcublas -lstdc++ \
	$(PTHREAD_LIBS) -lm
plugins_compute_cublas_la_DEPENDENCIES = $(CUBLAS_CU_LO)
endif
