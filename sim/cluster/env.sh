# Source me (bash): `source sim/cluster/env.sh`, then sbatch/srun/sinfo/scontrol talk to the local
# cluster of `make cluster-up`, whose config lives in the repository's .cluster/.
# shellcheck shell=bash
SLURM_CONF="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cluster/slurm.conf"
export SLURM_CONF
