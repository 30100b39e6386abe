#!/bin/sh
# bench/h200_sample.sh - what sampling costs against greedy on the H200 (the
# FlexGen-user issue): 256 requests of 8-token prompts and 32 new tokens on
# OPT-6.7B all on GPU (dummy weights, token ids in, `run-batch`), greedy, then
# temperature 0.8 + top_p 0.9 drawn on the GPU by the sample op (no logits
# copied out), then on the host (`device_sampling = false`) over all CPUs,
# then on one CPU (`taskset -c 0`: the time of a serial sampler); all three
# must give the same bytes.
# Logs go to $OUT; run there as h200_run.sh (bench/h200_env.sh).
. bench/h200_env.sh
step "build ($(date +%T))"
[ -x ./fgcore ] || h200_build || exit 1
awk 'BEGIN { for (i = 0; i < 256; i++) { printf "{\"custom_id\": \"r%d\", \"prompt_token_ids\": [2", i;
	for (k = 0; k < 7; k++) printf ", %d", 100 + (i * 37 + k * 11) % 30000;
	printf "], \"max_tokens\": 32, \"seed\": %d, \"ignore_eos\": true}\n", i } }' > "$out/greedy.jsonl"
sed 's/"max_tokens"/"temperature": 0.8, "top_p": 0.9, "max_tokens"/' "$out/greedy.jsonl" > "$out/sampled.jsonl"
rb() { # name input output where [prefix...]
	name=$1 in=$2 res=$3 dev=$4
	shift 4
	step "$name ($(date +%T))"
	timeout 90 "$@" ./fgcore -c conf/h200_opt6.7b.ini -o compute.device_sampling="$dev" \
		run-batch --input "$out/$in" --output "$out/$res" > "$out/$res.log" 2>&1
	tail -1 "$out/$res.log"
}
rb greedy greedy.jsonl greedy_out.jsonl true
rb "sampled on the GPU" sampled.jsonl sampled_dev.jsonl true
rb "sampled on the host, all CPUs" sampled.jsonl sampled_out.jsonl false
rb "sampled on the host, one CPU" sampled.jsonl sampled_one.jsonl false taskset -c 0
for f in sampled_out sampled_one; do
	if cmp -s "$out/sampled_dev.jsonl" "$out/$f.jsonl"; then
		echo "$f.jsonl: identical to the GPU's draws"
	else
		echo "$f.jsonl: DIFFERS from the GPU's draws"
	fi
done
step "done ($(date +%T))"
