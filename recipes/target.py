"""What one variant is built from, and the small facts about it every engine's builder asks."""

from __future__ import annotations

from dataclasses import dataclass

from schemas import settings as reg
from schemas.config import MasterEntry
from schemas.entries import Point, kv_transfer, parsed_settings, server_worker
from schemas.launch import LaunchProfile
from schemas.runners import Hardware

from .words import Ref, word

NODE_ADDR, LOCAL_ADDR = Ref("NODE_ADDR"), Ref("LOCAL_ADDR")


class Unsupported(ValueError):
    """A valid config this renderer cannot launch (yet); the message says what and why."""


@dataclass(frozen=True)
class Target:
    """What one variant is built from: the entry's point, the runner's node shape and launch profile."""

    key: str
    variant: str
    entry: MasterEntry
    point: Point
    scenario_params: dict  # isl/osl for fixed-seq-len; {} for agentic
    runner_label: str
    hardware: Hardware
    launch: LaunchProfile
    issues: tuple = ()  # the known-issue registry lint checked the entry against

    @property
    def engine(self) -> str:
        """vllm | sglang: the first word of the framework (lint's settings rules use the same)."""
        engine = reg.engine_of(self.entry.framework)
        if engine is None:
            raise Unsupported(f"framework {self.entry.framework!r} is not rendered (vllm and sglang are)")
        return engine

    @property
    def disagg(self) -> bool:
        return self.entry.multinode

    @property
    def roles(self) -> tuple:
        return reg.ROLES if self.disagg else (reg.SERVER,)

    def worker(self, role: str):
        return server_worker(self.point.space) if role == reg.SERVER else getattr(self.point.space, role)

    def given(self, role: str) -> dict:
        """The settings the config itself sets for `role` (typed)."""
        return parsed_settings(self.worker(role))

    def settings(self, role: str) -> dict:
        """Every setting of `role`: given, else its default."""
        return reg.resolve(role, self.given(role))

    @property
    def router(self):
        return self.point.space.router or self.entry.router

    @property
    def kv_transfer(self) -> str | None:
        """The point's own kv-p2p-transfer, else the entry's."""
        return kv_transfer(self.entry, self.point.space)

    @property
    def uses_lmcache(self) -> bool:
        backend = self.point.space.kv_offload_backend
        return backend is not None and backend.name == "lmcache"

    @property
    def model_path(self) -> str:
        return f"{self.launch.model_root}/{self.entry.model}"


def peer_url(rank: int, port: int):
    return word("http://", Ref(f"PEER_ADDR[{rank}]"), f":{port}")


def program(args: tuple) -> str:
    """The program an argv runs, past an `env NAME=VALUE ...` prefix."""
    rest = list(args)
    if rest[0] == ("env",):
        rest = rest[1:]
        while "=" in "".join(p for p in rest[0] if isinstance(p, str)):
            rest = rest[1:]
    return "".join(rest[0])
