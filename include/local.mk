pkginclude_HEADERS += include/fgcore/plugin.h include/fgcore/tensor.h \
	include/fgcore/storage.h include/fgcore/compute.h include/fgcore/codec.h include/fgcore/fgcore.h include/fgcore/q4.h
