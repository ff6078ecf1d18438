"""The one interface every engine's builder implements (recipes/vllm.py, recipes/sglang.py): what the plan
asks of an engine, and nothing else. A new engine is a module with these functions, added to ENGINES in
recipes/build.py; tests/recipes/test_engine_interface.py holds every module to this signature."""

from __future__ import annotations

from typing import Protocol

from schemas.launch import Role

from .plan import Ports, Service, Timeouts
from .target import Target


class Engine(Protocol):
    def check(self, t: Target) -> None:
        """Raise Unsupported (with the config's key path) for what this engine's builder cannot launch."""

    def services(self, t: Target, role: Role, ports: Ports, timeouts: Timeouts) -> list[Service]:
        """What a node of `role` starts, in order."""

    def engine_env(self, t: Target, ports: Ports) -> dict:
        """The environment the engine reads (its own and the model's)."""

    def uses_rdma(self, t: Target) -> bool:
        """Whether KV moves over RDMA here: the container then needs the node's verbs devices."""

    def transport(self, t: Target) -> tuple:
        """What lock.json records of how KV moves: (name, value) pairs."""

    def watch_signatures(self, t: Target) -> tuple:
        """Log lines of the engine's own components that fail the job (scripts/logwatch.py)."""

    def l1_budget(self, t: Target):
        """The DRAM budget the host-DRAM KV tier is sized from (schemas/dram.py), None where none is."""

    def shell_env(self, t: Target) -> tuple:
        """env.sh's shell-only values: (name, text) pairs."""

    def shell_notes(self, t: Target) -> tuple:
        """The comment lines env.sh shows above them: where each derived value comes from."""

    def caveats(self, t: Target) -> tuple:
        """Why this launch's numbers compare only with runs that share something (results say it)."""

    def served_model(self, t: Target) -> str:
        """The model name requests carry (what the engines serve it under)."""

    def has_metrics(self, t: Target) -> bool:
        """Whether its engines serve Prometheus /metrics (the end-of-run snapshot reads them)."""

    def proof_roles(self, t: Target) -> tuple:
        """The PD roles whose /metrics the smoke proof reads to show the KV moved."""

    def flushes_caches(self, t: Target) -> bool:
        """Whether every engine's caches are emptied before each benchmark (each concurrency cold)."""

    def router_service(
        self, t: Target, backends: list, ports: Ports, timeouts: Timeouts, counts: dict
    ) -> Service:
        """The router in front of this engine's prefill and decode nodes."""

    def router_metrics_port(self, t: Target, ports: Ports) -> int:
        """Where the router's metrics are read at the end of the run."""
