"""What one variant is built from, and the small facts about it every engine's builder asks."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from schemas import settings as reg
from schemas.config import MasterEntry
from schemas.engine_builds import build_of, shipped
from schemas.entries import (
    Point,
    kv_transfer,
    parsed_settings,
    recipe_pointers,
    server_worker,
    splits_experts,
)
from schemas.launch import LaunchProfile
from schemas.models import (
    EngineRecipe,
    ModelFacts,
    Models,
    NoRecipe,
    engine_recipe,
    resolved_settings,
    role_args,
)
from schemas.routers import IMAGE_ROUTERS, ImageRouter
from schemas.runners import Hardware

from .models import facts
from .outside import srt_recipe
from .words import Ref, Word, json_word, word

NODE_ADDR, LOCAL_ADDR = Ref("NODE_ADDR"), Ref("LOCAL_ADDR")


class Unsupported(ValueError):
    """A valid config this renderer cannot launch (yet); the message says what and why, `at` where: a key
    path in the master config (lint reports it at that line)."""

    def __init__(self, message: str, at: tuple = ()):
        super().__init__(message)
        self.at = at


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
    models: Models | None = None  # the models file lint checked the entry against (None: the repository's)
    # the one concurrency of an allocation that runs a single point (agentic: every point starts cold, on
    # fresh engines and empty caches, as InferenceX runs them); None: every concurrency of the point
    concurrency: int | None = None
    # The InferenceX checkout the entry's master file sits in, where the srt-slurm recipes it names are
    # read (None: the file is in no checkout)
    recipes_root: Path | None = None

    @property
    def engine(self) -> reg.EngineName:
        """vllm | sglang | atom: the first word of the framework (lint's settings rules use the same)."""
        refused = reg.not_rendered(self.entry.framework)
        if refused is not None:
            raise Unsupported("{} ({})".format(*refused), at=(self.key, "framework"))
        engine = reg.engine_of(self.entry.framework)
        assert engine is not None, self.entry.framework  # not_rendered refused every other framework
        return engine

    @cached_property
    def model(self) -> ModelFacts:
        """The model's facts (configs/models.yaml)."""
        try:
            return facts(self.entry.model, self.models)
        except NoRecipe as err:
            raise Unsupported(str(err), at=(self.key, "model")) from None

    @cached_property
    def recipe(self) -> EngineRecipe:
        """What the model needs on this engine and this runner's GPU vendor."""
        try:
            return engine_recipe(
                self.model, self.entry.model, self.engine, self.launch.gpu_vendor, self.point.scenario
            )
        except NoRecipe as err:
            raise Unsupported(str(err), at=(self.key, "model")) from None

    def dp_env(self, role: str) -> dict:
        """The model's environment for `role`'s worker when it runs DP attention (its dp-attention env)."""
        dp = self.recipe.dp_attention
        return dict(dp.env) if self.worker(role).dp_attn and dp is not None else {}

    def model_args(self, role: str) -> list:
        """The model's flags on `role`'s engine line for its worker's shape and the point's speculative
        decoding, argv-ready: a mapping is a JSON value, serialized."""
        w = self.worker(role)
        args = role_args(
            self.recipe,
            role,
            dp_attention=bool(w.dp_attn),
            split_experts=splits_experts(w),
            mtp=self.point.space.spec_decoding == "mtp",
        )
        return [json_word(a) if isinstance(a, dict) else a for a in args]

    @property
    def runs_image(self) -> bool:
        """The config's image runs the engines (a local runner runs its simulator or CPU build instead)."""
        return self.launch.engine_build == "image"

    @cached_property
    def build(self):
        """The image's engine build (configs/engine-builds.yaml); None where the image does not run, or lint
        found no one build of it."""
        return build_of(self.entry.image, shipped()) if self.runs_image else None

    @property
    def python_path_first(self) -> tuple:
        """What the image's engine build has its Python import first."""
        return tuple(self.build.python_path_first) if self.build else ()

    @property
    def library_path_first(self) -> tuple:
        """What the image's engine build has its shared libraries load from first."""
        return tuple(self.build.library_path_first) if self.build else ()

    @property
    def disagg(self) -> bool:
        return self.entry.multinode

    @property
    def roles(self) -> tuple:
        return reg.ROLES if self.disagg else (reg.SERVER,)

    def worker(self, role: str):
        return server_worker(self.point.space) if role == reg.SERVER else getattr(self.point.space, role)

    @property
    def srt_at(self) -> tuple:
        """Where the point names its srt-slurm recipe (the point itself where it names none)."""
        found = recipe_pointers(self.point.space)
        return (*self.point.path, *found[0][0]) if found else self.point.path

    @cached_property
    def srt(self) -> srt_recipe.SrtLaunch | None:
        """The srt-slurm recipe the point runs (docs/guides/srt-slurm.md); None: the point names none."""
        found = recipe_pointers(self.point.space)
        if not found:
            return None
        where, pointer = self.srt_at, found[0][1]
        if self.recipes_root is None:
            raise Unsupported(
                f"the point runs the srt-slurm recipe {pointer}, and no InferenceX checkout (a folder "
                f"holding {srt_recipe.MULTI_NODE_TREE}) holds the master file to read it from",
                at=where,
            )
        try:
            return srt_recipe.read(pointer, self.recipes_root)
        except srt_recipe.RecipeError as err:
            raise Unsupported(str(err), at=where) from None

    @property
    def mtp_steps(self) -> int:
        """The MTP draft steps a PD launch runs (0: none; a single server states none): DECODE_MTP_SIZE, or
        the decode's speculative-num-steps of the recipe the point runs."""
        if not self.disagg:
            return 0
        if self.srt is not None and "decode" in self.srt.roles:
            steps = self.srt.roles["decode"].args.get("speculative-num-steps", 0)
            return steps if isinstance(steps, int) and not isinstance(steps, bool) else 0
        return self.settings("decode")["DECODE_MTP_SIZE"] or 0

    def role_path(self, role: str) -> tuple:
        """Where `role`'s worker sits in the master config (a single server's settings sit on the point)."""
        return self.point.path if role == reg.SERVER else (*self.point.path, role)

    def given(self, role: str) -> dict:
        """The settings the config itself sets for `role` (typed, parsed once)."""
        return self._settings[role][0]

    def settings(self, role: str) -> dict:
        """Every setting of `role`: given, else the model's default (configs/models.yaml), else the
        registry's."""
        return self._settings[role][1]

    @cached_property
    def _settings(self) -> dict:
        from . import srt  # recipes/srt.py reads a Target: imported here, not at the top, to break the cycle

        out = {}
        for role in self.roles:
            given = parsed_settings(self.worker(role))
            dp_attention = bool(self.worker(role).dp_attn)
            from_recipe = srt.recipe_settings(self, role)
            # a vLLM recipe states the engine's tuning: the model's defaults do not reach its line
            defaults = None if self.srt is not None and self.engine == "vllm" else self.recipe
            out[role] = (given, resolved_settings(defaults, role, {**given, **from_recipe}, dp_attention))
        return out

    @property
    def router(self):
        """The point's router, else the entry's, else the one the engine's image ships (SGLang's)."""
        named = self.point.space.router or self.entry.router
        if named is None and self.entry.framework in IMAGE_ROUTERS:
            return ImageRouter(IMAGE_ROUTERS[self.entry.framework], self.entry.image)
        return named

    @property
    def answers_checked(self) -> bool:
        """Whether the job compares the router's greedy answers with a prefill's served whole before the
        sweep (scripts/proof.py same-answers): vLLM PD, whose prefill serves a request that carries no
        kv_transfer_params as an ordinary one; an SGLang prefill server serves only PD requests."""
        return self.disagg and self.engine == "vllm"

    @property
    def kv_transfer(self) -> str | None:
        """The point's own kv-p2p-transfer, else the entry's."""
        return kv_transfer(self.entry, self.point.space)

    @property
    def uses_lmcache(self) -> bool:
        backend = self.point.space.kv_offload_backend
        return backend is not None and backend.name == "lmcache"

    @property
    def dram_utilization(self) -> float:
        """The point's share of host DRAM for KV offload (lint refuses an offloading point without it)."""
        assert self.point.dram_utilization is not None, "a KV offload without dram-utilization"
        return self.point.dram_utilization

    @property
    def lmcache_version(self) -> str:
        """The LMCache release the point offloads to, where uses_lmcache (lint asks for its version)."""
        backend = self.point.space.kv_offload_backend
        assert backend is not None and backend.version is not None, "no LMCache version here"
        return backend.version

    @property
    def model_path(self) -> str:
        return f"{self.launch.model_root}/{self.entry.model}"


def peer_url(rank: int, port: int) -> Word:
    return word("http://", Ref(f"PEER_ADDR[{rank}]"), f":{port}")


def program(args: tuple) -> str:
    """The program an argv runs, past an `env NAME=VALUE ...` prefix."""
    rest = list(args)
    if rest[0] == ("env",):
        rest = rest[1:]
        while "=" in "".join(p for p in rest[0] if isinstance(p, str)):
            rest = rest[1:]
    return "".join(rest[0])
