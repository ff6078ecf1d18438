"""The local SLURM cluster: `make cluster-up` / `cluster-down` / `cluster-status` (python -m sim.cluster)."""
