#!/bin/sh
# bench/h200_sample.sh - what sampling costs against greedy on the H200 (the
# FlexGen-user issue): 256 requests of 8-token prompts and 32 new tokens on
# OPT-6.7B all on GPU (dummy weights, token ids in, `run-batch`), greedy, then
# temperature 0.8 + top_p 0.9 with the sampled rows drawn over all CPUs, then
# on one CPU (`taskset -c 0`: the same bytes, the time of a serial sampler).
# Logs go to $OUT; run there as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
step "build ($(date +%T))"
[ -x ./fgcore ] || h200_build || exit 1
awk 'BEGIN { for (i = 0; i < 256; i++) { printf "{\"custom_id\": \"r%d\", \"prompt_token_ids\": [2", i;
	for (k = 0; k < 7; k++) printf ", %d", 100 + (i * 37 + k * 11) % 30000;
	printf "], \"max_tokens\": 32, \"seed\": %d, \"ignore_eos\": true}\n", i } }' > "$out/greedy.jsonl"
sed 's/"max_tokens"/"temperature": 0.8, "top_p": 0.9, "max_tokens"/' "$out/greedy.jsonl" > "$out/sampled.jsonl"
rb() { # name input output [prefix...]
	name=$1 in=$2 res=$3
	shift 3
	step "$name ($(date +%T))"
	timeout 90 "$@" ./fgcore -c conf/h200_opt6.7b.ini run-batch --input "$out/$in" \
		--output "$out/$res" > "$out/$res.log" 2>&1
	tail -1 "$out/$res.log"
}
rb greedy greedy.jsonl greedy_out.jsonl
rb "sampled, all CPUs" sampled.jsonl sampled_out.jsonl
rb "sampled, one CPU" sampled.jsonl sampled_one.jsonl taskset -c 0
cmp -s "$out/sampled_out.jsonl" "$out/sampled_one.jsonl" && echo "sampled outputs identical on one CPU and all"
step "done ($(date +%T))"
