# plugins/compute
noinst_HEADERS += plugins/compute/cpu_blas/cpu_blas.h plugins/compute/cpu_blas/f8_avx2.h

pkglib_LTLIBRARIES += plugins/compute/cpu_blas.la
plugins_compute_cpu_blas_la_SOURCES = \
	plugins/compute/cpu_blas/plugin.c \
	plugins/compute/cpu_blas/pool.c \
	plugins/compute/cpu_blas/linear.c \
	plugins/compute/cpu_blas/fused.c \
	plugins/compute/cpu_blas/attention.c \
	plugins/compute/cpu_blas/attention_q4.c \
	plugins/compute/cpu_blas/ops.c \
	plugins/compute/cpu_blas/rope.c \
	plugins/compute/cpu_blas/logprob.c \
	plugins/compute/cpu_blas/generic.c \
	plugins/compute/cpu_blas/timer.c
plugins_compute_cpu_blas_la_CFLAGS = $(PLUGIN_CFLAGS) $(BLAS_CFLAGS)
plugins_compute_cpu_blas_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(AM_LDFLAGS)
plugins_compute_cpu_blas_la_LIBADD = $(BLAS_LIBS) $(PTHREAD_LIBS) -lm

# The CUDA backend; the fragment builds it only when HAVE_CUDA, but always
# distributes its sources.
include $(srcdir)/plugins/compute/cublas.mk
