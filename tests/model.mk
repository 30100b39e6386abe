# tests/model.mk
