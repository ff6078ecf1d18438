"""PD proxy for vLLM >= 0.16 MooncakeConnector disaggregated serving (see proxy/README.md)."""
