# shellcheck shell=bash disable=SC2034
# Rendered from config local-sim-sglang-mori-disagg, variant fsl1k64_p2x8_d1x8; do not edit: change the config and run `make render`.
# The single home of this variant's Mooncake, ROCm and LMCache (or MoRI) values. Sourcing it only sets
# variables: engines read the exported ones; server_sglang.sh expands the others into commands.

# Read by the engines: sglang, Mooncake and ROCm libraries, and what the runner's launch
# profile adds (configs/launch.yaml: a local runner's simulator knobs, SIM_*). The Hub's offline switches
# hold for every process of the node: nothing is fetched on a compute node.
export AITER_LOG_LEVEL=ERROR
export DO_NOT_TRACK=1
export GLOO_SOCKET_IFNAME=lo
export HF_DATASETS_OFFLINE=1
export HF_HUB_OFFLINE=1
export MORI_APP_LOG_LEVEL=WARNING
export MORI_EP_LAUNCH_CONFIG_MODE=AUTO
export MORI_IO_QP_MAX_CQE=32768
export MORI_IO_QP_MAX_SEND_WR=16384
export MORI_IO_QP_MAX_SGE=2
export MORI_IO_SL=3
export MORI_IO_SQ_BACKOFF_TIMEOUT_US=50000
export MORI_IO_TC=96
export MORI_IO_TC_DISABLE=0
export MORI_RDMA_SL=3
export MORI_RDMA_TC=96
export MORI_SHMEM_MODE=ISOLATION
export NCCL_BLOCKING_WAIT=1
export NCCL_IB_HCA=ionic_0,ionic_1
export NCCL_SOCKET_IFNAME=lo
export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=3600
export SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS=32
export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=3600
export SGLANG_ENABLE_OVERLAP_PLAN_STREAM=0
export SGLANG_ENABLE_SPEC_V2=1
export SGLANG_HEALTH_CHECK_TIMEOUT=600
export SGLANG_LOG_MS=true
export SGLANG_MORI_DISPATCH_DTYPE=auto
export SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD=1024
export SGLANG_MORI_NUM_WORKERS=4
export SGLANG_MORI_QP_PER_TRANSFER=4
export SGLANG_USE_AITER=1
export SIM_KV_WAIT_S=30
export TORCH_NCCL_BLOCKING_WAIT=1
export TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1

# MoRI's dispatch budgets (tokens per rank) and the admission limit, as the known-working
# launch derives them from this variant: largest concurrency 4.
#   MORI_DISPATCH_TOKENS_PREFILL = 8192 (MoRI's prefill default)
#   MORI_DISPATCH_TOKENS_DECODE = 512 (MoRI's decode default)
#   SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD (exported above) = 2 x 512 = 1024
MORI_DISPATCH_TOKENS_DECODE=512
MORI_DISPATCH_TOKENS_PREFILL=8192

