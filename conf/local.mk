# Example configurations, installed to $(pkgdatadir); default.ini is what
# `fgcore` reads when no -c is given.
dist_pkgdata_DATA += conf/default.ini conf/cpu_opt125m.ini conf/cpu_opt1.3b.ini
