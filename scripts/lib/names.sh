# shellcheck shell=bash disable=SC2034
# Written by `make docs` (recipes/pages/bashnames.py) from scripts/statefiles.py and scripts/failures.py: edit
# those, not this file (a test fails when it is stale). The state files' names as STATE_<NAME>, a name
# dropped there an unset variable that `set -u` refuses; the failure vocabulary as printf formats.
declare -g STATE_BARRIER_ERR_PREFIX=barrier-
declare -g STATE_BIN=bin
declare -g STATE_CAUSE=cause
declare -g STATE_FAILURE=failure
declare -g STATE_FAILURE_AT=failure.at
declare -g STATE_FAILURE_CODE=failure.code
declare -g STATE_FOLDER=state
declare -g STATE_FOREGROUND_PID=foreground.pid
declare -g STATE_IMAGE=image
declare -g STATE_MARKS=marks
declare -g STATE_NIC_FACTS=nic-facts.json
declare -g STATE_NODE_FACTS=node-facts.json
declare -g STATE_OUTCOME=outcome
declare -g STATE_OUT_SUFFIX=.out
declare -g STATE_PEERS=peers.json
declare -g STATE_PEER_ADDRS=peer-addrs
declare -g STATE_PID_SUFFIX=.pid
declare -g STATE_RC_SUFFIX=.rc
declare -g STATE_SAID=said
declare -g STATE_SCANCEL_OUT=scancel.out
declare -g STATE_SERVICES=services
declare -g STATE_SITE_PREFIX=site-
declare -g STATE_STEP=step
declare -g STATE_WAIT_ERR_SUFFIX=.wait-http.err
declare -gA _NODE_WORDS=(
  [headline]='FAILED %s on %s: %s'
  [verdict]='job failed: first failure on %s in step '"'"'%s'"'"' (exit code %s)'
  [verdict-router]='job failed: first failure on %s: the router found its %s engine (%s) unhealthy %s s before %s failed'
  [verdict-missing]='job failed: no outcome from %s (killed before it could report?)'
  [verdict-srun]='job failed: srun exited %s although every node ended cleanly'
  [verdict-ok]='job succeeded: every node ended cleanly'
  [service-exit]='%s exited (code %s)'
  [service-stopped]='%s stopped (process state T, pid %s) for %s s: it cannot answer'
  [command-exit]='command '"'"'%s'"'"' exited (code %s) at line %s'
  [signal]='received SIG%s'
  [not-on-path]='not on PATH: %s (PATH=%s)'
  [watcher-stopped]='the service watcher stopped with code %s'
  [result-missing]='result %s is missing or empty (the benchmark exited 0 without writing it)'
  [cause]='cause: %s'
  [not-ready]='%s not ready at %s after %s s (last: %s)'
  [no-progress]='%s made no progress for %s s while starting: nothing answered, its log did not grow and it used no CPU time'
  [no-tokens]='no token generated for %s s in step '"'"'%s'"'"' while %s request(s) were in flight (%s): serving has stalled'
  [barrier-timeout]='timed out after %s s; missing rank(s) %s'
  [barrier-claimed-twice]='rank %s claimed twice: by %s and %s'
  [barrier-not-sealed]='the answer of %s is not sealed with this job'"'"'s secret (is --secret-file this job'"'"'s, and %s this job'"'"'s leader?)'
  [secret-file]='secret file %s: %s'
  [port-taken]='%s:%s, where %s will listen, is taken: %s'
  [version-mismatch]='dist-version %s: %s %s is installed (%s), the recipe pins %s'
  [setup-failed]='node setup %s: %s'
  [gpu-not-drained]='GPUs not drained: %s'
  [nic-not-ready]='NICs not ready: %s'
  [image-not-ready]='image not ready: %s'
  [leftover-processes]='processes of earlier jobs still run here: %s'
  [result-invalid]='result %s is not valid: %s'
  [proof-failed]='proof failed: %s'
  [no-kv-moved]='the answer came back but no KV moved prefill -> decode (decode external_kv_transfer tokens did not rise): decode recomputed the prompt; is the router speaking the vLLM >= 0.16 contract?'
  [no-l2-hits]='LMCache served no prefix hit on any prefill node (%s = 0): is its server alive?'
  [not-cold]='the point would not start cold: %s before its first request (an agentic point is measured on empty caches)'
  [answers-differ]='answers differ: prompt %s through the router gave token %s %s where the prefill serving it whole gave %s (the engine repeats its own answer through token %s): the KV that moved prefill -> decode is not the KV the prompt makes'
  [accuracy-scored]='%s scored %s on %s questions through the router (threshold %s)'
  [accuracy-below]='accuracy below the model'"'"'s threshold: %s: the answers are wrong'
  [accuracy-unscored]='accuracy not scored: %s'
  [answers-alike]='every one of %s prompts got the same answer: equal answers would prove nothing'
  [answers-unrepeatable]='the engine does not repeat its own greedy answer (%s of %s prompts differ from the first token): nothing to compare the router'"'"'s answers against'
  [not-served-whole]='the prefill engine answered %s of %s tokens (%s): it does not serve a request whole, so there is nothing to compare against'
  [known-issue]='KNOWN ISSUE %s: its log signature appeared in %s line %s'
  [not-flushed]='%s did not empty its caches within %s s (last: %s): the next concurrency would not start cold'
)
