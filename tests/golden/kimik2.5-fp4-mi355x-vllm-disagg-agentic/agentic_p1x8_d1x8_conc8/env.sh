# shellcheck shell=bash disable=SC2034
# Rendered from config kimik2.5-fp4-mi355x-vllm-disagg-agentic, variant agentic_p1x8_d1x8_conc8; do not edit: change the config and run `make render`.
# The single home of this variant's Mooncake, ROCm and LMCache (or MoRI) values. Sourcing it only sets
# variables: engines read the exported ones; server_vllm.sh expands the others into commands.

# Read by the engines: vllm, Mooncake and ROCm libraries, and what the runner's launch
# profile adds (configs/launch.yaml: a local runner's simulator knobs, SIM_*). The Hub's offline switches
# hold for every process of the node: nothing is fetched on a compute node.
export DO_NOT_TRACK=1
export HF_DATASETS_OFFLINE=1
export HF_HUB_OFFLINE=1
export HSA_ENABLE_SDMA=1
export TRANSFORMERS_OFFLINE=1
export VLLM_ENGINE_READY_TIMEOUT_S=3600
export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=1200
export VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT=480
export VLLM_MOONCAKE_BOOTSTRAP_PORT=8998
export VLLM_NO_USAGE_STATS=1
export VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT4
export VLLM_ROCM_USE_AITER=1
export VLLM_ROCM_USE_AITER_PAGED_ATTN=0
export VLLM_ROCM_USE_AITER_RMSNORM=1

# LMCache MP server on prefill nodes (one L1 pool per node).
# L1 is the prefill server's KV-offload DRAM budget as InferenceX states it: per server, proportional
# to the GPUs its engine uses, in GB, at most 3000 GB a server; lmcache --l1-size-gb counts GiB.
#   min(3095781 MiB available, 2861022 MiB cap) x 2^20 B x dram-utilization 0.8
#   x 8/8 GPUs = 2399 GB = 2234 GiB
LMCACHE_CHUNK_SIZE=256
LMCACHE_EVICTION_POLICY=LRU
LMCACHE_L1_INIT_SIZE_GB=20
LMCACHE_L1_READ_TTL_SECONDS=7200
LMCACHE_L1_SIZE_GB=2234
LMCACHE_MAX_WORKERS=8
LMCACHE_MP_MQ_TIMEOUT=1200

