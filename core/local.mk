# libfgcore: one fragment per layer.
include $(srcdir)/core/util/local.mk
include $(srcdir)/core/plugin/local.mk
include $(srcdir)/core/config/local.mk
include $(srcdir)/core/tier/local.mk
include $(srcdir)/core/backend/local.mk
include $(srcdir)/core/tokenizer/local.mk
include $(srcdir)/core/model/local.mk
include $(srcdir)/core/arch/local.mk
include $(srcdir)/core/plan/local.mk
include $(srcdir)/core/dist/local.mk
include $(srcdir)/core/sampling/local.mk
include $(srcdir)/core/exec/local.mk
include $(srcdir)/core/engine/local.mk
include $(srcdir)/core/request/local.mk
include $(srcdir)/core/optimizer/local.mk
