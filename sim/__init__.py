"""Simulated vLLM engine for the local cluster: strict PD contract, metrics, latency, faults."""
