# Example configurations, installed to $(pkgdatadir); default.ini is what
# `fgcore` reads when no -c is given.
dist_pkgdata_DATA += conf/default.ini conf/cpu_opt125m.ini conf/cpu_opt1.3b.ini \
	conf/cpu_offload.ini conf/t4_opt175b.ini conf/t4_opt175b_compressed.ini \
	conf/h200_opt6.7b.ini conf/h200_opt30b.ini conf/h200_opt30b_host.ini \
	conf/h200_opt175b_int4.ini conf/h200_llama3_8b.ini conf/h200_llama2_70b_int4.ini

# Hardware presets for `fgcore optimize --hardware NAME` and `bench --hardware
# NAME`, installed to $(pkgdatadir)/hardware (a `fgcore profile --output`
# file dropped there is one more).
hardwaredir = $(pkgdatadir)/hardware
dist_hardware_DATA = conf/hardware/t4.ini conf/hardware/h200.ini conf/hardware/h100.ini \
	conf/hardware/a100-80g.ini conf/hardware/l4.ini
