/* core/config/schema.c - the configuration's sections and keys, with defaults,
 * ranges and the help texts fgcore.ini(5) is made of. */
#include <stddef.h>
#include <string.h>

#include <fgcore/plugin.h>
#include "core/config/schema.h"

const struct fg_cfg_section fg_cfg_sections[] = {
	{ "fgcore", 0, "The program itself." },
	{ "model", 0, "The model to run and its tokenizer." },
	{ "policy", 0, "How the work is batched and where tensors live." },
	{ "bench", 0, "The synthetic workload of `fgcore bench`." },
	{ "generate", 0, "Defaults of every generation request (sampling, length)." },
	{ "serve", 0,
	  "The OpenAI-compatible server, `fgcore serve`: where it listens, its limits, how "
	  "long a request waits to share a batch." },
	{ "compute", FG_PLUGIN_COMPUTE,
	  "The compute backend: the plugin that runs the model's operations." },
	{ "tier.compute", FG_PLUGIN_STORAGE,
	  "The storage tier the compute backend reads its operands from (GPU memory with "
	  "cublas, host memory with cpu_blas)." },
	{ "tier.host", FG_PLUGIN_STORAGE, "The host memory tier." },
	{ "tier.disk", FG_PLUGIN_STORAGE, "The disk tier." },
	{ "distributed", 0,
	  "Pipeline and data parallelism: launched as `mpirun -np N fgcore ...`, every "
	  "command that runs the model runs as [distributed] replicas copies of it, each a "
	  "pipeline of N / replicas stages, a stage holding a contiguous slice of the "
	  "layers with its own tiers and weight, cache and activation shares; rank 0 "
	  "reads the input, hands batches to the replicas, samples its own and writes "
	  "the output.  Without an MPI launcher these keys do nothing." },
	{ "hardware", 0,
	  "The machine as the policy optimizer's cost model sees it: tier capacities, "
	  "bandwidths in GB/s (10^9 bytes per second) and compute rates in TFLOP/s, as "
	  "`fgcore profile` measures them; 0 means unknown." },
	{ NULL, 0, NULL },
};

#define KEY_INT(s, k, d, lo, hi, h) \
	{ .section = (s), .key = (k), .type = FG_CFG_INT, .def = (d), .help = (h), \
	  .min = (lo), .max = (hi) }
#define KEY_DOUBLE(s, k, d, lo, hi, h) \
	{ .section = (s), .key = (k), .type = FG_CFG_DOUBLE, .def = (d), .help = (h), \
	  .dmin = (lo), .dmax = (hi) }
#define KEY(s, k, t, d, h) \
	{ .section = (s), .key = (k), .type = (t), .def = (d), .help = (h) }
#define KEY_ENUM(s, k, d, c, h) \
	{ .section = (s), .key = (k), .type = FG_CFG_ENUM, .def = (d), .help = (h), \
	  .choices = (c) }

const struct fg_cfg_key fg_cfg_keys[] = {
	KEY_ENUM("fgcore", "command", "bench", "bench|generate|run-batch|serve|tokenize|profile|optimize|plugins|config",
		 "The command run when the command line names none."),
	KEY_ENUM("fgcore", "log_level", "warn", "error|warn|info|debug",
		 "Messages of this level and more severe ones are printed on stderr "
		 "(-v and -q on the command line override it)."),

	KEY("model", "path", FG_CFG_STRING, "dummy:opt-125m",
	    "The model: a Hugging Face folder (config.json and safetensors) of an OPT, Llama, "
	    "Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE or Gemma 2 model, a FlexGen -np folder "
	    "of .npy weights, or "
	    "dummy:<preset> for random weights of a published size (opt-125m ... opt-175b, "
	    "llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b, llama-3.1-8b, "
	    "llama-3.1-70b, mistral-7b, qwen2-7b, qwen2-72b, qwen3-8b, qwen3-32b, mixtral-8x7b, "
	    "mixtral-8x22b, qwen1.5-moe-a2.7b, qwen2-57b-a14b, qwen3-30b-a3b, qwen3-235b-a22b, "
	    "gemma-2-2b, gemma-2-9b, gemma-2-27b)."),
	KEY("model", "tokenizer", FG_CFG_STRING, "",
	    "Folder of the tokenizer files (tokenizer.json or vocab.json and merges.txt); "
	    "empty: the model folder."),

	KEY_INT("policy", "gpu_batch_size", "4", 1, 65536,
		"Sequences computed together in one pass over a layer; generate and run-batch "
		"shrink a batch to the requests it holds (one request runs a batch of 1)."),
	KEY_INT("policy", "num_gpu_batches", "1", 1, 4096,
		"GPU batches that share each layer's weights before the next layer is loaded; "
		"the effective batch is gpu_batch_size x num_gpu_batches."),
	KEY("policy", "percent", FG_CFG_STRING, "100 0 100 0 100 0",
	    "Six integers 0..100, FlexGen's wg wc cg cc hg hc: the percent of the weights, of "
	    "the KV cache and of the activations on the compute tier and on the host tier; "
	    "the disk tier takes the rest of each pair."),
	KEY_ENUM("policy", "placement", "midpoint", "midpoint|exact",
		 "How weight shares become tensors: midpoint puts each tensor whole on the tier "
		 "whose cumulative share holds its middle (FlexGen's rule); exact splits matrices "
		 "by rows so that the byte shares match the percentages."),
	KEY("policy", "overlap", FG_CFG_BOOL, "true",
	    "Load the next block's weights and the next GPU batch's cache while the current "
	    "one computes, and store results behind it (two buffers each)."),
	KEY("policy", "sep_layer", FG_CFG_BOOL, "true",
	    "Schedule each layer's attention and MLP as separate blocks (smaller weight "
	    "buffers, finer overlap)."),
	KEY("policy", "pin_weight", FG_CFG_BOOL, "true",
	    "FlexGen's pin_weight, accepted for compatibility: fgcore keeps host-tier weights "
	    "in whatever memory the [tier.host] plugin gives (page-locked for pinned_host "
	    "with a GPU; its cuda_pinned option turns that off)."),
	KEY("policy", "cpu_cache_compute", FG_CFG_BOOL, "false",
	    "Compute decode attention on the host for the sequences whose KV cache lives on "
	    "the host tier; only queries and results cross tiers."),
	KEY("policy", "host_overlap", FG_CFG_BOOL, "false",
	    "With cpu_cache_compute on a GPU: in decode, run the host's attention of one GPU "
	    "batch while the GPU computes the next (GPU batches on two compute streams in "
	    "turn, the host's part queued in stream order); false, and while [bench] "
	    "device_timing times the phases: the GPU and the host take turns.  Off by "
	    "default until the policy matrix's tokens are checked with it on a GPU (the "
	    "H100 ran OPT-30B's host pick 1.31x faster in decode with it)."),
	KEY_DOUBLE("policy", "attn_sparsity", "1", 0, 1,
		   "Fraction of attention scores kept in decode attention; 1: dense (only 1 is "
		   "implemented)."),
	KEY("policy", "compress_weight", FG_CFG_BOOL, "false",
	    "Store the linear layers' weights compressed on every tier, by weight_codec."),
	KEY_ENUM("policy", "weight_codec", "int4_group64", "int4_group64|fp8_e4m3_rows",
		 "How compress_weight stores weights: int4_group64, 4-bit groups of 64 "
		 "values (FlexGen's); fp8_e4m3_rows, fp8 (E4M3) with one scale per output "
		 "channel, twice the bytes and a fraction of 4-bit's error (the compute "
		 "backend must read it: cpu_blas and cublas do)."),
	KEY("policy", "compress_cache", FG_CFG_BOOL, "false",
	    "Store the KV cache compressed, by cache_codec."),
	KEY_ENUM("policy", "cache_codec", "int4_group64", "int4_group64|fp8_e4m3_group64",
		 "How compress_cache stores the KV cache: int4_group64, 4-bit groups of 64 "
		 "values along the head dimension (FlexGen's); fp8_e4m3_group64, fp8 (E4M3) "
		 "with one scale per 64 values along it, twice the bytes and a fraction of "
		 "4-bit's error (the compute backend, and with cpu_cache_compute the host's, "
		 "must read it: cpu_blas and cublas do)."),
	KEY("policy", "score_chunk", FG_CFG_SIZE, "256M",
	    "Compute-tier memory for the logits of scored prompt positions (echo with "
	    "logprobs, `score`): positions are scored as many at a time as fit, and only "
	    "their log-probabilities and most likely ids leave the compute tier.  Less "
	    "(down to one row per sequence of a GPU batch) when the tier has no room."),

	KEY_DOUBLE("policy", "refill", "0.25", 0, 1,
		   "Continuous batching: rows whose requests finished take the next waiting "
		   "requests between decode steps (their prompts computed in one step, the other "
		   "rows left out) once this share of a batch's rows is free, or when the batch "
		   "would end.  Requests arriving at a server join as soon as a row is free, but "
		   "after a join step decode steps lasting (1 / refill - 1) times it pass first, "
		   "so that joins take about this share of the time at most.  Greedy, sampled "
		   "and echoed requests join (an echoed one's prompt scored as it joins) when "
		   "their prompt and budget fit the run's columns.  Results are each request's "
		   "alone, to rounding.  0: off.  Also through pipeline stages (there echoed "
		   "requests and ones with log-probabilities wait for the next batch).  `fgcore "
		   "optimize` prices a stream refilling the batch at this share beside one "
		   "static batch, and ranks policies by it with --refill."),
	KEY_INT("policy", "share_prefix", "0", 0, 1048576,
		"Shared prompt prefixes: prompts of a GPU batch that begin alike for at least "
		"this many tokens compute that beginning once, the others taking its KV cache "
		"(at two levels: a few-shot header shared by a subject's questions, then a "
		"question shared by its choices); requests waiting together are ordered by "
		"their tokens so that such prompts share batches.  Results agree with each "
		"prompt computed alone to rounding (a 4-bit cache: to its quantization).  "
		"0: off."),
	KEY("policy", "window_ring", FG_CFG_BOOL, "true",
	    "A model whose every layer has a sliding window (Mistral) keeps each sequence's KV "
	    "cache as a ring of the window's length instead of every position of the run, "
	    "where the compute backend runs one (compute ABI 1.12: cpu_blas) and the run is "
	    "one process without share_prefix: the cache, its moves and its attention then "
	    "cost the window, not the run's length, and the results are the same.  Models "
	    "that mix windowed and full layers (Qwen2's max_window_layers) keep every "
	    "position.  false: every position, always."),

	KEY_INT("bench", "prompt_len", "512", 1, 1048576, "Tokens of each synthetic prompt."),
	KEY_INT("bench", "gen_len", "32", 1, 1048576, "Tokens generated for each prompt."),
	KEY_DOUBLE("bench", "end_chance", "0", 0, 1,
		   "A benchmark's stand-in for end of text on dummy weights: each token a "
		   "request generates ends it (finish reason stop) with this probability, "
		   "drawn from its place in the input and the token's, so a request ends at "
		   "the same token however it is batched.  For run-batch, serve and "
		   "generate; 0: never."),
	KEY_INT("bench", "cut_gen_len", "0", 0, 1048576,
		"Generate only this many tokens and project the decode time of gen_len from "
		"them, as FlexGen does; 0: generate all."),
	KEY("bench", "warmup", FG_CFG_BOOL, "true",
	    "Run one untimed batch first so that timings exclude start-up costs."),
	KEY("bench", "device_timing", FG_CFG_BOOL, "false",
	    "Also time each phase on the compute backend's own clock (timers of compute ABI "
	    "1.2), printed as the `device time:` line: what the device spent computing, "
	    "waiting for weights, cache, activations and the host's attention, and copying "
	    "logits, adding up to the run's device time.  Costs a few marks a block."),

	KEY_INT("generate", "max_new_tokens", "32", 0, 1048576,
		"Tokens generated at most per request."),
	KEY_DOUBLE("generate", "temperature", "0", 0, 100,
		   "Sampling temperature; 0 picks the most likely token (greedy)."),
	KEY_INT("generate", "top_k", "0", 0, 1000000,
		"Sample among the k most likely tokens only; 0: no limit."),
	KEY_DOUBLE("generate", "top_p", "1", 0, 1,
		   "Sample among the most likely tokens whose probabilities add up to p; "
		   "1: no limit."),
	KEY_INT("generate", "seed", "0", 0, INT64_MAX,
		"Seed of the random numbers used for sampling."),

	KEY("serve", "host", FG_CFG_STRING, "127.0.0.1",
	    "Address to listen on (a name, an IPv4 or IPv6 address; 0.0.0.0 or :: for every "
	    "interface)."),
	KEY_INT("serve", "port", "8000", 0, 65535, "TCP port; 0 picks a free one (printed)."),
	KEY("serve", "api_key", FG_CFG_STRING, "",
	    "When set, every request but GET /health must carry 'Authorization: Bearer "
	    "<api_key>' (else 401); empty: no key."),
	KEY("serve", "model_name", FG_CFG_STRING, "",
	    "The model id GET /v1/models lists; a request's \"model\" must be it or [model] "
	    "path (or absent); empty: the model's own name (its folder's name)."),
	KEY_INT("serve", "max_wait_ms", "10", 0, 60000,
		"How long a request waits at most for others to fill a batch of gpu_batch_size "
		"x num_gpu_batches prompts before it runs with fewer."),
	KEY_INT("serve", "join_wait_ms", "1000", 0, 3600000,
		"Requests arriving while a batch runs take its finished rows' places between "
		"decode steps ([policy] refill above 0; requests whose prompt and budget fit "
		"its columns; an echoed one's prompt scored as it joins).  One that cannot join "
		"(a longer one) waits for the next batch: once it has waited this long, the running "
		"batch takes no one else and ends, so that the next one begins."),
	KEY("serve", "max_body_bytes", FG_CFG_SIZE, "1M",
	    "Largest request body; a larger one is answered 413 without being read."),
	KEY_INT("serve", "queue_limit", "1024", 1, 1000000,
		"Prompts waiting to run at most; past it a request is answered 503 (retry "
		"later)."),
	KEY_INT("serve", "max_connections", "256", 1, 65536,
		"Open connections at most (each has its own thread); when they are all open, "
		"a new one makes room by closing the one that has waited longest for a whole "
		"request (a connection whose request is queued, running or being answered is "
		"never closed for room)."),
	KEY_INT("serve", "max_connections_per_ip", "0", 0, 65536,
		"Open connections one client address may hold at most (more are refused at "
		"once); 0: no limit."),
	KEY_INT("serve", "timeout_s", "300", 0, 86400,
		"A connection on which nothing moves (no byte read or written) for this many "
		"seconds is closed; 0: never."),
	KEY_INT("serve", "request_timeout_s", "30", 0, 86400,
		"A connection must deliver a whole request (its line, headers and body) within "
		"this many seconds of opening or of its previous answer, else it is closed: a "
		"client sending nothing, or a byte now and then, cannot keep a slot; 0: no "
		"limit."),
	KEY_INT("serve", "drain_timeout_s", "600", 0, 86400,
		"On SIGTERM or SIGINT, how long the requests in flight (those arrived whole) may "
		"take to finish before they are cut: answered 503, the batch in flight dropped "
		"at its next decode step; 0: no limit."),
	KEY("distributed", "transport", FG_CFG_STRING, "mpi",
	    "Transport plugin between the stages: mpi (MPI point-to-point through host memory, "
	    "or straight between GPU buffers when the MPI library is CUDA-aware) "
	    "or nccl (NCCL send/recv of activations between GPUs, one GPU per rank; built with "
	    "CUDA and NCCL)."),
	KEY("distributed", "layers", FG_CFG_STRING, "",
	    "Layers of each stage, comma-separated, one number per rank, each at least 1 and "
	    "adding up to the model's layers; empty: as even as possible, earlier stages "
	    "taking the extra ones."),
	KEY("distributed", "percent", FG_CFG_STRING, "",
	    "Each stage's own [policy] percent (six integers), stages separated by |, one per "
	    "rank; empty: [policy] percent on every stage."),
	KEY_INT("distributed", "micro_batches", "0", 0, 4096,
		"Groups of GPU batches that follow each other through the stages (FlexGen's inner "
		"iterations); each group reads a stage's weights once per token.  0: as many as "
		"stages (at most num_gpu_batches); num_gpu_batches: the finest overlap."),
	KEY_INT("distributed", "replicas", "1", 1, 65536,
		"Data-parallel replicas: the ranks (mpirun -np N, a multiple of this) form this "
		"many copies of the model, each a pipeline of N / replicas stages with its own "
		"batches; rank 0 reads the requests, hands them to the replicas as they free "
		"up and writes every result.  A replica that fails or goes silent for "
		"[distributed] timeout gives its unfinished requests to the others (run mpirun "
		"--enable-recovery: by default Open MPI stops every rank when one dies)."),
	KEY("distributed", "gpu_per_rank", FG_CFG_BOOL, "true",
	    "The ranks of one host spread over its GPUs: local rank L sees only the (L mod "
	    "G)-th of the G GPUs visible to the job (CUDA_VISIBLE_DEVICES narrowed before "
	    "CUDA starts), so that mpirun -np 4 on a 4-GPU machine puts a stage or a "
	    "replica on each; false: every rank sees them all and the plugins' device "
	    "options choose."),
	KEY_DOUBLE("distributed", "timeout", "600", 0.1, 86400,
		   "Seconds a rank waits for another rank's activations, results or answer "
		   "before it stops the whole job (or, with replicas, drops the silent "
		   "replica) with an error naming that rank (a rank that dies ends the job "
		   "at once through the launcher, unless it runs with --enable-recovery); a "
		   "step of a model read from disk may need more."),

	KEY("compute", "plugin", FG_CFG_STRING, "cpu_blas",
	    "Compute plugin (cpu_blas, cublas, ...); its options go in this section too."),

	KEY("tier.compute", "plugin", FG_CFG_STRING, "pinned_host",
	    "Storage plugin of the compute tier (cuda_mem with cublas, pinned_host with "
	    "cpu_blas); its options go in this section too."),
	KEY("tier.compute", "capacity", FG_CFG_SIZE, "0",
	    "Bytes the compute tier may use; 0: what the plugin reports.  A host-memory "
	    "compute tier (pinned_host with cpu_blas) is the same RAM as the host tier: "
	    "besides each tier's own capacity, the two together may use no more than the "
	    "smaller physical size their plugins report, and a run that would is refused "
	    "before it allocates."),
	KEY("tier.host", "plugin", FG_CFG_STRING, "pinned_host",
	    "Storage plugin of the host tier; its options go in this section too."),
	KEY("tier.host", "capacity", FG_CFG_SIZE, "0",
	    "Bytes the host tier may use; 0: what the plugin reports.  It holds the host's "
	    "copies of the logits (gpu_batch_size x vocab) and, when sampling, every row's "
	    "logits too; it shares the RAM with a host-memory compute tier (see "
	    "[tier.compute] capacity)."),
	KEY("tier.disk", "plugin", FG_CFG_STRING, "posix_file",
	    "Storage plugin of the disk tier (posix_file, io_uring_nvme, libaio_nvme); its "
	    "options go in this section too."),
	KEY("tier.disk", "capacity", FG_CFG_SIZE, "0",
	    "Bytes the disk tier may use; 0: what the plugin reports."),

	KEY("hardware", "gpu_mem", FG_CFG_SIZE, "0", "Capacity of the compute tier."),
	KEY("hardware", "cpu_mem", FG_CFG_SIZE, "0", "Capacity of the host tier."),
	KEY("hardware", "disk_mem", FG_CFG_SIZE, "0", "Capacity of the disk tier; 0: no disk."),
	KEY_DOUBLE("hardware", "ctog_bdw", "0", 0, 1e6,
		   "Host tier to compute tier, from page-locked memory, GB/s."),
	KEY_DOUBLE("hardware", "gtoc_bdw", "0", 0, 1e6,
		   "Compute tier to host tier, into page-locked memory, GB/s."),
	KEY_DOUBLE("hardware", "ctog_bdw_pageable", "0", 0, 1e6,
		   "Host to compute tier from ordinary (pageable) memory, GB/s."),
	KEY_DOUBLE("hardware", "gtoc_bdw_pageable", "0", 0, 1e6,
		   "Compute tier to ordinary (pageable) host memory, GB/s; reported by "
		   "fgcore profile, not used by the cost model (the engine stores into "
		   "its host tier, which is page-locked on a GPU machine)."),
	KEY_DOUBLE("hardware", "dtoc_bdw", "0", 0, 1e6, "Disk tier to host memory, GB/s."),
	KEY_DOUBLE("hardware", "ctod_bdw", "0", 0, 1e6, "Host memory to disk tier, GB/s."),
	KEY_DOUBLE("hardware", "mm_flops_prefill", "0", 0, 1e6,
		   "Matrix product of the compute backend (fp16 weights) at a prefill shape "
		   "(thousands of rows), TFLOP/s."),
	KEY_DOUBLE("hardware", "mm_flops_decode", "0", 0, 1e6,
		   "Matrix product of the compute backend (fp16 weights) with 64 rows, TFLOP/s; "
		   "above 64 rows (or mm_batch_rows, when measured) the cost model keeps the "
		   "last measured time until mm_flops_prefill makes a product slower."),
	KEY_DOUBLE("hardware", "mm_gemv_bdw", "0", 0, 1e6,
		   "Matrix-vector product of the compute backend (one row, fp16 weights), GB/s "
		   "of weights read; below 64 rows the cost model interpolates a product's "
		   "time between this and mm_flops_decode.  0: unknown (a product of fewer "
		   "than 64 rows then costs as much as one of 64)."),
	KEY_INT("hardware", "mm_batch_rows", "0", 0, 1 << 20,
		"Rows of mm_flops_batch and q4_batch_bdw: the GPU batch of the policy fgcore "
		"profile measured for (more than 64); 0: not measured."),
	KEY_DOUBLE("hardware", "mm_flops_batch", "0", 0, 1e6,
		   "Matrix product of the compute backend (fp16 weights) with mm_batch_rows rows, "
		   "TFLOP/s; between 64 and mm_batch_rows rows the cost model interpolates a "
		   "product's time, above it scales it up to mm_flops_prefill."),
	KEY_DOUBLE("hardware", "q4_batch_bdw", "0", 0, 1e6,
		   "Matrix product with 4-bit weights and mm_batch_rows rows, GB/s of packed "
		   "weights; 0: priced from q4_decode_bdw."),
	KEY_DOUBLE("hardware", "attn_flops", "0", 0, 1e6,
		   "Prefill attention of the compute backend, TFLOP/s counted as "
		   "4 x batch x seq^2 x hidden."),
	KEY_DOUBLE("hardware", "prefill_other_bdw", "0", 0, 1e6,
		   "A prefill layer's work beyond its matrix products and attention (norms, "
		   "epilogue traffic, cache appends), GB/s of residual-stream rows "
		   "(tokens x hidden x hidden_bytes); 0: not priced."),
	KEY_DOUBLE("hardware", "attn_decode_bdw", "0", 0, 1e6,
		   "Decode attention of the compute backend, GB/s of KV cache read."),
	KEY_DOUBLE("hardware", "cpu_attn_bdw", "0", 0, 1e6,
		   "Decode attention on the host (cpu_cache_compute), GB/s of KV cache read; "
		   "0: never delegate."),
	KEY_DOUBLE("hardware", "cpu_attn_q4_bdw", "0", 0, 1e6,
		   "Decode attention on the host over a 4-bit cache (cpu_cache_compute with "
		   "compress_cache), GB/s of packed cache read; 0: that pair is never chosen."),
	KEY_DOUBLE("hardware", "cpu_append_bdw", "0", 0, 1e6,
		   "Appending the prefill's K and V rows to a host KV cache (cpu_cache_compute), "
		   "GB/s of cache written; 0: unknown (the append is then not priced)."),
	KEY_DOUBLE("hardware", "cpu_append_q4_bdw", "0", 0, 1e6,
		   "The same into a 4-bit host cache (cpu_cache_compute with compress_cache), "
		   "encoding included, GB/s of packed cache written; 0: unknown."),
	KEY_DOUBLE("hardware", "cpu_mem_bdw", "0", 0, 1e6,
		   "Host memory's rate while host attention reads the cache and the device "
		   "copies to or from host memory at the same time, GB/s of both together "
		   "(cpu_cache_compute on a device); 0: not a limit."),
	KEY_DOUBLE("hardware", "q4_decode_bdw", "0", 0, 1e6,
		   "Matrix-vector product with 4-bit weights, GB/s of packed weights; 0: the "
		   "backend does not read int4 (no compression)."),
	KEY_DOUBLE("hardware", "attn_decode_q4_bdw", "0", 0, 1e6,
		   "Decode attention of the compute backend over a 4-bit cache "
		   "(compress_cache), GB/s of packed cache read; 0: priced at q4_decode_bdw."),
	KEY_DOUBLE("hardware", "f8_decode_bdw", "0", 0, 1e6,
		   "Matrix-vector product with fp8 weights (weight_codec = fp8_e4m3_rows), GB/s "
		   "of stored bytes; 0: unknown (fp8 weights are priced as fp16 products and "
		   "the optimizer does not consider them)."),
	KEY_DOUBLE("hardware", "f8_batch_bdw", "0", 0, 1e6,
		   "Matrix product with fp8 weights and mm_batch_rows rows, GB/s of stored "
		   "bytes; 0: priced from f8_decode_bdw."),
	KEY_DOUBLE("hardware", "attn_decode_f8_bdw", "0", 0, 1e6,
		   "Decode attention of the compute backend over an fp8 cache (cache_codec = "
		   "fp8_e4m3_group64), GB/s of stored cache read; 0: unknown (priced at "
		   "attn_decode_bdw; the optimizer does not consider an fp8 cache)."),
	KEY_DOUBLE("hardware", "cpu_attn_f8_bdw", "0", 0, 1e6,
		   "Decode attention on the host over an fp8 cache, GB/s of stored cache read; "
		   "0: unknown (priced at cpu_attn_bdw; never chosen with cpu_cache_compute)."),
	KEY_DOUBLE("hardware", "cpu_append_f8_bdw", "0", 0, 1e6,
		   "Appending prefill rows to an fp8 host cache, encoding included, GB/s of "
		   "stored cache written; 0: priced at cpu_append_bdw."),
	KEY_INT("hardware", "act_bytes", "0", 0, 4,
		"Bytes of the compute backend's activations and KV cache elements (2: fp16, "
		"4: fp32); 0: ask the backend."),
	KEY_INT("hardware", "hidden_bytes", "0", 0, 4,
		"Bytes of the residual stream's elements, the hidden states that pass "
		"between layers (4: an fp16 GPU backend that keeps them in fp32); 0: "
		"act_bytes."),
	KEY("hardware", "compute_host_memory", FG_CFG_BOOL, "false",
	    "The compute tier is host memory (a CPU run: no bounce buffers, copies are "
	    "memcpy)."),
	{ .section = NULL },
};

const struct fg_cfg_section *fg_cfg_find_section(const char *name)
{
	for (const struct fg_cfg_section *s = fg_cfg_sections; s->name; s++)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

int fg_cfg_find_key(const char *section, const char *key)
{
	for (int i = 0; fg_cfg_keys[i].section; i++)
		if (strcmp(fg_cfg_keys[i].section, section) == 0 &&
		    strcmp(fg_cfg_keys[i].key, key) == 0)
			return i;
	return -1;
}

const char *fg_cfg_type_name(enum fg_cfg_type t)
{
	switch (t) {
	case FG_CFG_BOOL:
		return "bool";
	case FG_CFG_INT:
		return "int";
	case FG_CFG_DOUBLE:
		return "double";
	case FG_CFG_SIZE:
		return "size";
	case FG_CFG_STRING:
		return "string";
	case FG_CFG_ENUM:
		return "enum";
	}
	return "?";
}
