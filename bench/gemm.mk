# bench/gemm.mk
