#!/bin/sh
# tests/test_serve.sh - `fgcore serve` end to end (tests/test_serve.py, or the
# test $FGCORE_SERVE_TEST names there) with a Python that has the openai
# package: $FGCORE_PYTHON, else the virtual environment .ci/deps makes, else
# python3.
if ! grep -q '^#define HAVE_MICROHTTPD 1' "$FGCORE_BUILDDIR/config.h"; then
	echo "SKIP: this build has no libmicrohttpd (configure found none): serve cannot run"
	exit 77
fi
py=${FGCORE_PYTHON:-}
if [ -z "$py" ]; then
	for p in /opt/fgcore-venv/bin/python3 python3; do
		if "$p" -c 'import openai' 2>/dev/null; then
			py=$p
			break
		fi
	done
fi
exec "${py:-python3}" "$FGCORE_SRCDIR/tests/${FGCORE_SERVE_TEST:-test_serve.py}"
