# tests/engine.mk
