# bench/tokenizer.mk
