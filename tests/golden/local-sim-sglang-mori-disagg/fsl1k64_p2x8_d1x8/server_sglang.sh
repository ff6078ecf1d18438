#!/usr/bin/env bash
# Rendered from config local-sim-sglang-mori-disagg, variant fsl1k64_p2x8_d1x8; do not edit: change the config and run `make render`.
# One per node, started by job.sbatch through srun. Rank 0 = first prefill + router + benchmark; then
# the other prefill nodes; then decode nodes. Every step is named; any failure ends the job.
set -Eeuo pipefail
: "${RUN_DIR:?set by job.sbatch}"
: "${RECIPE_DIR:?set by job.sbatch}"
: "${LEADER_ADDR:?set by job.sbatch}"
: "${NODE_NAMES:?set by job.sbatch}"
RANK=${SLURM_NODEID:?run under srun}
NODE_NAME=${SLURMD_NODENAME:-$(hostname)}
SCRIPTS_DIR=$RECIPE_DIR/scripts
LOG_DIR=$RUN_DIR/logs/$NODE_NAME
RESULTS_DIR=$RUN_DIR/results
# The runner's timeouts, teardown graces and failure-report lengths (configs/launch.yaml), for node.sh.
POLL_INTERVAL=1
STOPPED_GRACE_S=10
STALL_GRACE_S=15
GRACE_S=15
FAIL_GRACE_S=2
LOG_TAIL_LINES=20
ROUTER_WARNING_LINES=5
export NODE_NAME SCRIPTS_DIR LOG_DIR POLL_INTERVAL STOPPED_GRACE_S STALL_GRACE_S GRACE_S FAIL_GRACE_S
export LOG_TAIL_LINES ROUTER_WARNING_LINES
# shellcheck source=/dev/null
source "$RECIPE_DIR/env.sh"
# shellcheck source=/dev/null
source "$SCRIPTS_DIR/lib/node.sh"
STATE_DIR=$RUN_DIR/$STATE_FOLDER/$NODE_NAME  # the folder's name is scripts/statefiles.py's, loaded by node.sh
export STATE_DIR
node_init

case "$RANK" in
  0) ROLE=prefill ;;
  1) ROLE=prefill ;;
  2) ROLE=decode ;;
  *) fail "rank $RANK is not in the plan (3 nodes)" ;;
esac

step "preflight"
case "$ROLE" in
  prefill)
    require_commands python3
    ;;
  decode)
    require_commands python3
    ;;
esac
if [[ $RANK == 0 ]]; then
  require_commands python3 aiperf lm-eval
  require_version aiperf aiperf 0.13.0
  # make submit RESUME=<run> lists the benchmarks an earlier run of the same lock collected.
  load_resumed "$RUN_DIR/resume.json"
  # Nothing is fetched here: the trace set and tokenizer were staged, and are checked as lock.json has them.
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py verify \
    --lock "${RUN_DIR}"/lock.json \
    --recipe-dir "${RECIPE_DIR}"
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py tokenizer "${RECIPE_DIR}"/traces/tokenizer \
    --remote-code \
    --out "${STATE_DIR}"/tokenizer.json
fi

step "resolve address"
NODE_ADDR=$(python3 "$SCRIPTS_DIR/sync.py" addr --slurm-nodeaddr --allow-loopback "$NODE_NAME")

step "ports free"
listens=()
case "$ROLE" in
  prefill) listens+=(sglang="${NODE_ADDR}":8000) ;;
  decode) listens+=(sglang="${NODE_ADDR}":8000) ;;
esac
if [[ $RANK == 0 ]]; then
  listens+=(router="${NODE_ADDR}":30000 router="${NODE_ADDR}":29000)
fi
require_free_ports "${listens[@]}"

step "start barrier"
# Every barrier line is sealed with the job's secret (written by make submit): only this job's nodes join.
barrier start "$RANK" 3 "$LEADER_ADDR:29500" 60 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret" --publish-field addr="$NODE_ADDR" \
  --out "$STATE_DIR/$STATE_PEERS" --peer-addresses "$STATE_DIR/$STATE_PEER_ADDRS"
mapfile -t PEER_ADDR < "$STATE_DIR/$STATE_PEER_ADDRS"
supervise


start_prefill() {
  step "prefill known-issues"
  start_service known-issues python3 "${SCRIPTS_DIR}"/logwatch.py \
    --plan "${RECIPE_DIR}"/plan.json \
    --log "${LOG_DIR}"/sglang.log \
    --interval 1
  step "prefill sglang"
  start_service sglang env SGLANG_MORI_COMBINE_DTYPE= SGLANG_MORI_MOE_MAX_INPUT_TOKENS=32768 SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK="${MORI_DISPATCH_TOKENS_PREFILL}" python3 \
    -m sglang.launch_server \
    --model-path /tmp/disagg-recipes-sim/models/openbmb/MiniCPM-SALA \
    --served-model-name openbmb/MiniCPM-SALA \
    --host "${NODE_ADDR}" \
    --port 8000 \
    --tp-size 8 \
    --trust-remote-code \
    --disable-radix-cache \
    --chunked-prefill-size 8192 \
    --max-running-requests 32 \
    --skip-server-warmup \
    --attention-backend minicpm_flashattn \
    --dense-as-sparse \
    --enable-metrics \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mori \
    --disaggregation-bootstrap-port 8998 \
    --disaggregation-ib-device ionic_0,ionic_1
  wait_http sglang http://"${NODE_ADDR}":8000/health 120
}

start_decode() {
  step "decode known-issues"
  start_service known-issues python3 "${SCRIPTS_DIR}"/logwatch.py \
    --plan "${RECIPE_DIR}"/plan.json \
    --log "${LOG_DIR}"/sglang.log \
    --interval 1
  step "decode sglang"
  start_service sglang env SGLANG_MORI_COMBINE_DTYPE= SGLANG_MORI_MOE_MAX_INPUT_TOKENS=2703 SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK="${MORI_DISPATCH_TOKENS_DECODE}" python3 \
    -m sglang.launch_server \
    --model-path /tmp/disagg-recipes-sim/models/openbmb/MiniCPM-SALA \
    --served-model-name openbmb/MiniCPM-SALA \
    --host "${NODE_ADDR}" \
    --port 8000 \
    --tp-size 8 \
    --trust-remote-code \
    --disable-radix-cache \
    --chunked-prefill-size 8192 \
    --max-running-requests 32 \
    --skip-server-warmup \
    --attention-backend minicpm_flashattn \
    --dense-as-sparse \
    --enable-metrics \
    --disaggregation-mode decode \
    --disaggregation-transfer-backend mori \
    --disaggregation-ib-device ionic_0,ionic_1
  wait_http sglang http://"${NODE_ADDR}":8000/health 120
}

# Rank 0, per benchmark: its run, its result gated, then every engine's and the router's counters.
benchmark_conc4() {
  step "benchmark conc4"
  run_cmd env \
    -u HF_HUB_OFFLINE \
    -u TRANSFORMERS_OFFLINE aiperf profile \
    --url http://"${NODE_ADDR}":30000 \
    --endpoint /v1/chat/completions \
    --endpoint-type chat \
    --streaming \
    --model openbmb/MiniCPM-SALA \
    --tokenizer "${RECIPE_DIR}"/traces/tokenizer \
    --tokenizer-trust-remote-code \
    --concurrency 4 \
    --benchmark-duration 10 \
    --random-seed 42 \
    --failed-request-threshold 0.10 \
    --use-server-token-count \
    --no-gpu-telemetry \
    --no-server-metrics \
    --extra-inputs ignore_eos:true \
    --output-artifact-dir "${RESULTS_DIR}"/conc4 \
    --synthetic-input-tokens-mean 1024 \
    --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 64 \
    --output-tokens-stddev 0 \
    --prompt-corpus random
  collect_result "$RESULTS_DIR/conc4/profile_export_aiperf.json" "$RESULTS_DIR"/local-sim-sglang-mori-disagg_fsl1k64_p2x8_d1x8_conc4.json \
    0.10 5
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/conc4" \
    prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
}

"start_$ROLE"

step "ready barrier"
barrier ready "$RANK" 3 "$LEADER_ADDR:29500" 120 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"

if [[ $RANK == 0 ]]; then
  step "router"
  start_service router python3 \
    -m sglang_router.launch_router \
    --pd-disaggregation \
    --prefill http://"${PEER_ADDR[0]}":8000 8998 \
    --prefill http://"${PEER_ADDR[1]}":8000 8998 \
    --decode http://"${PEER_ADDR[2]}":8000 \
    --host "${NODE_ADDR}" \
    --port 30000 \
    --policy random \
    --prefill-policy random \
    --decode-policy random \
    --cb-timeout-duration-secs 15 \
    --retry-max-retries 3 \
    --prometheus-host "${NODE_ADDR}" \
    --prometheus-port 29000 \
    --request-timeout-secs 1800
  wait_http router http://"${NODE_ADDR}":30000/workers 60 --expect stats.prefill_count=2 --expect stats.decode_count=1

  step "smoke and KV proof"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py smoke \
    --engine sglang \
    --router http://"${NODE_ADDR}":30000 \
    --model openbmb/MiniCPM-SALA \
    --prefill-metrics http://"${PEER_ADDR[0]}":8000/metrics \
    --prefill-metrics http://"${PEER_ADDR[1]}":8000/metrics \
    --decode-metrics http://"${PEER_ADDR[2]}":8000/metrics
  # Counters before the sweep and after each concurrency: the report turns them into per-run deltas (in a
  # resumed run, "before the sweep" is before its first benchmark measured here, never another job's).
  mkdir -p "$RESULTS_DIR"
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/start" \
    prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
  # Serving that stops (requests held, no token) fails the job, instead of waiting out the benchmark.
  start_service tokenwatch python3 "$SCRIPTS_DIR/tokenwatch.py" --state-dir "$STATE_DIR" \
    --grace 15 prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
  # A resumed run (make submit RESUME=<run>) skips the benchmarks an earlier run already measured.
  if ! benchmark_resumed conc4; then
    benchmark_conc4
  fi

  # The answers are good enough, not only fast: the model's graded eval through the router, after the sweep
  # (its shared few-shot prefix would warm the caches an agentic point starts without).
  step "accuracy"
  run_cmd python3 "${SCRIPTS_DIR}"/accuracy.py \
    --url http://"${NODE_ADDR}":30000/v1/chat/completions \
    --model openbmb/MiniCPM-SALA \
    --eval gsm8k \
    --questions "${RECIPE_DIR}"/evals/gsm8k \
    --threshold 0.9000 \
    --concurrency 4 \
    --limit 8 \
    --max-tokens 48 \
    --seconds 120 \
    --out "${RESULTS_DIR}"/accuracy
fi

step "finish barrier"
barrier finish "$RANK" 3 "$LEADER_ADDR:29500" 1800 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"
step "teardown"
