# doc: the manual pages and the plugin writer's guide.
#
# fgcore.ini(5) is generated from the configuration schema and the option
# tables of the plugins built here, by the built fgcore itself; it is also
# shipped in the tarball (and regenerated whenever fgcore or a plugin changes).
dist_man_MANS += doc/fgcore.1
man_MANS = doc/fgcore.ini.5
EXTRA_DIST += doc/PLUGINS.md doc/fgcore.ini.5 doc/ARCHITECTURE.md doc/COST_MODEL.md \
	doc/EVAL_HARNESS.md
CLEANFILES += doc/fgcore.ini.5 doc/fgcore.ini.5.tmp

FG_MAN_PLUGIN_PATH = $(abs_top_builddir)/plugins/storage/.libs:$(abs_top_builddir)/plugins/compute/.libs:$(abs_top_builddir)/plugins/codec/.libs

doc/fgcore.ini.5: fgcore$(EXEEXT) $(pkglib_LTLIBRARIES)
	$(AM_V_GEN)$(MKDIR_P) doc && \
	FGCORE_PLUGIN_PATH='$(FG_MAN_PLUGIN_PATH)' FGCORE_CONFIG=/dev/null \
		./fgcore$(EXEEXT) config --man > $@.tmp && mv -f $@.tmp $@
