# The installed headers: everything a plugin, in tree or out of it, may use.
pkginclude_HEADERS += include/fgcore/plugin.h include/fgcore/tensor.h \
	include/fgcore/storage.h include/fgcore/compute.h include/fgcore/codec.h include/fgcore/transport.h include/fgcore/fgcore.h include/fgcore/q4.h include/fgcore/f8.h \
	include/fgcore/half.h include/fgcore/fanout.h include/fgcore/fp16_simd.h include/fgcore/f8_simd.h \
	include/fgcore/sampling.h include/fgcore/logprob.h
