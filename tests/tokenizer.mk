# tests/tokenizer.mk
