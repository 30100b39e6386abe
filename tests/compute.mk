# tests/compute.mk
