# tests/storage.mk
