"""`--kv-transfer-config` validated as vLLM does, reduced to what the simulator runs (the connectors:
docs/upstream-facts.md#mooncake-pd and #multiconnector).

Two stages, like vLLM: `parse_kv_transfer_config` is the argparse type (pydantic KVTransferConfig with
extra="forbid": bad JSON, unknown keys, bad kv_role or policy -> usage error, exit 2);
`resolve_connectors` is what engine start-up does with it (connector classes, MultiConnector children,
connector extra config -> start-up error, exit 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ROLES = ("kv_producer", "kv_consumer", "kv_both")
POLICIES = ("recompute", "fail")
# KVTransferConfig fields (vllm/config/kv_transfer.py); the @config decorator forbids any other key.
FIELDS = {
    "kv_connector": (str, type(None)),
    "engine_id": (str, type(None)),
    "kv_buffer_device": (str,),
    "kv_buffer_size": (int, float),
    "kv_role": (str, type(None)),
    "kv_rank": (int, type(None)),
    "kv_parallel_size": (int,),
    "kv_ip": (str,),
    "kv_port": (int,),
    "kv_connector_extra_config": (dict,),
    "kv_connector_module_path": (str, type(None)),
    "enable_permute_local_kv": (bool,),
    "kv_load_failure_policy": (str,),
}
# Connectors vLLM registers in its factory; the simulator runs the three the recipes use.
KNOWN_CONNECTORS = frozenset(
    {
        "ExampleConnector",
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "NixlConnector",
        "MultiConnector",
        "MoRIIOConnector",
        "OffloadingConnector",
        "DecodeBenchConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "P2pNcclConnector",
        "SimpleCPUOffloadConnector",
        "FlexKVConnectorV1",
    }
)
SIMULATED = frozenset({"MooncakeConnector", "MultiConnector", "LMCacheMPConnector"})
LMCACHE_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"
MOONCAKE_KEYS = frozenset({"mooncake_protocol", "num_workers", "device_name"})
LMCACHE_DEFAULTS = {"host": "tcp://localhost", "port": 5555, "mq_timeout": 300.0, "heartbeat_interval": 10.0}
LMCACHE_KEYS = frozenset(LMCACHE_DEFAULTS) | {"isolated_ipc", "hash_algorithm", "server_urls"}


class KVConfigError(ValueError):
    """The config cannot start an engine; the message says which key and what would be right."""


@dataclass(frozen=True)
class Mooncake:
    role: str  # the Mooncake child's kv_role: kv_producer serves /query, kv_consumer pulls
    protocol: str
    num_workers: int


@dataclass(frozen=True)
class LMCache:
    host: str  # without the tcp:// scheme
    port: int
    mq_timeout: float
    heartbeat_interval: float


@dataclass(frozen=True)
class Connectors:
    role: str  # top-level kv_role
    load_failure_policy: str
    mooncake: Mooncake | None
    lmcache: LMCache | None
    warnings: tuple[str, ...] = ()

    @property
    def produces(self) -> bool:
        return self.mooncake is not None and self.mooncake.role in ("kv_producer", "kv_both")

    @property
    def consumes(self) -> bool:
        return self.mooncake is not None and self.mooncake.role in ("kv_consumer", "kv_both")


def parse_kv_transfer_config(text: str) -> dict[str, Any]:
    """The argparse `type=` of --kv-transfer-config: JSON object of KVTransferConfig fields."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object")
    _check_fields(data, where="")
    return data


def _check_fields(data: dict[str, Any], *, where: str) -> None:
    for key, value in data.items():
        if key not in FIELDS:
            raise ValueError(f"{where}{key}: extra inputs are not permitted (no such KVTransferConfig field)")
        if not isinstance(value, FIELDS[key]) or (isinstance(value, bool) and bool not in FIELDS[key]):
            raise ValueError(f"{where}{key}: wrong type {type(value).__name__}")
    if data.get("kv_role") is not None and data["kv_role"] not in ROLES:
        raise ValueError(f"{where}kv_role: should be one of {', '.join(ROLES)}, got {data['kv_role']!r}")
    if data.get("kv_connector") is not None and data.get("kv_role") is None:
        raise ValueError(f"{where}kv_role: required when kv_connector is set ({', '.join(ROLES)})")
    policy = data.get("kv_load_failure_policy", "fail")
    if policy not in POLICIES:
        raise ValueError(f"{where}kv_load_failure_policy: should be 'recompute' or 'fail', got {policy!r}")


def resolve_connectors(data: dict[str, Any] | None) -> Connectors | None:
    """What engine start-up builds from the validated config; None without a KV connector."""
    if not data or data.get("kv_connector") is None:
        return None
    children = _children(data)
    mooncakes = [c for c in children if c["kv_connector"] == "MooncakeConnector"]
    lmcaches = [c for c in children if c["kv_connector"] == "LMCacheMPConnector"]
    if len(mooncakes) > 1 or len(lmcaches) > 1:
        raise KVConfigError("MultiConnector: at most one MooncakeConnector and one LMCacheMPConnector")
    warnings: list[str] = []
    return Connectors(
        role=data["kv_role"],
        load_failure_policy=data.get("kv_load_failure_policy", "fail"),
        mooncake=_mooncake(mooncakes[0]) if mooncakes else None,
        lmcache=_lmcache(lmcaches[0], warnings) if lmcaches else None,
        warnings=tuple(warnings),
    )


def _children(data: dict[str, Any]) -> list[dict[str, Any]]:
    if data["kv_connector"] != "MultiConnector":
        return [_known(data)]
    connectors = data.get("kv_connector_extra_config", {}).get("connectors")
    if not isinstance(connectors, list) or not connectors:
        raise KVConfigError("MultiConnector: kv_connector_extra_config.connectors must be a non-empty list")
    out = []
    for i, child in enumerate(connectors):
        where = f"connectors[{i}]."
        if not isinstance(child, dict):
            raise KVConfigError(f"MultiConnector: {where[:-1]} must be an object")
        try:
            _check_fields(child, where=where)
        except ValueError as exc:
            raise KVConfigError(f"MultiConnector: {exc}") from None
        if child.get("kv_connector") in (None, "MultiConnector"):
            raise KVConfigError(f"MultiConnector: {where}kv_connector must name a child connector")
        out.append(_known(child))
    return out


def _known(cfg: dict[str, Any]) -> dict[str, Any]:
    name = cfg["kv_connector"]
    if name not in KNOWN_CONNECTORS and not cfg.get("kv_connector_module_path"):
        raise KVConfigError(f"Unsupported connector type: {name}")
    if name not in SIMULATED:
        raise KVConfigError(f"{name}: not simulated (the simulator runs {', '.join(sorted(SIMULATED))})")
    if name == "LMCacheMPConnector" and cfg.get("kv_connector_module_path") != LMCACHE_MODULE:
        # Without it vLLM resolves its in-tree class, not the LMCache one the recipe is validated with.
        raise KVConfigError(
            f"LMCacheMPConnector: kv_connector_module_path must be {LMCACHE_MODULE!r}, "
            f"got {cfg.get('kv_connector_module_path')!r}"
        )
    if name == "MooncakeConnector" and cfg.get("kv_connector_module_path"):
        raise KVConfigError("MooncakeConnector: kv_connector_module_path is not simulated (in-tree only)")
    return cfg


def _mooncake(cfg: dict[str, Any]) -> Mooncake:
    extra = cfg.get("kv_connector_extra_config", {})
    unknown = sorted(set(extra) - MOONCAKE_KEYS)
    if unknown:
        raise KVConfigError(f"MooncakeConnector: unknown kv_connector_extra_config keys {unknown}")
    protocol = extra.get("mooncake_protocol", "rdma")
    if protocol == "rdma":
        raise KVConfigError(
            "MooncakeConnector: mooncake_protocol 'rdma' needs RDMA devices; the simulator "
            "has none (set mooncake_protocol 'tcp')"
        )
    if protocol != "tcp":
        raise KVConfigError(f"MooncakeConnector: mooncake_protocol must be 'rdma' or 'tcp', got {protocol!r}")
    workers = extra.get("num_workers", 10)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise KVConfigError(f"MooncakeConnector: num_workers must be a positive integer, got {workers!r}")
    return Mooncake(role=cfg["kv_role"], protocol=protocol, num_workers=workers)


def _lmcache(cfg: dict[str, Any], warnings: list[str]) -> LMCache:
    if cfg["kv_role"] not in ("kv_both", "kv_producer"):
        raise KVConfigError(
            f"LMCacheMPConnector: kv_role must be kv_both or kv_producer (else it never "
            f"stores), got {cfg['kv_role']!r}"
        )
    values: dict[str, Any] = dict(LMCACHE_DEFAULTS)
    for key, value in cfg.get("kv_connector_extra_config", {}).items():
        short = key.removeprefix("lmcache.mp.")
        if not key.startswith("lmcache.mp.") or short not in LMCACHE_KEYS:
            warnings.append(f"LMCacheMPConnector: ignoring unknown extra config key {key!r}")
        elif short in LMCACHE_DEFAULTS:
            values[short] = value
    host = str(values["host"])
    if not host.startswith("tcp://") or len(host) <= len("tcp://"):
        raise KVConfigError(f"LMCacheMPConnector: lmcache.mp.host must be tcp://<host>, got {host!r}")
    try:
        port, timeout = int(values["port"]), float(values["mq_timeout"])
        beat = float(values["heartbeat_interval"])
    except (TypeError, ValueError):
        message = "LMCacheMPConnector: lmcache.mp.port/mq_timeout/heartbeat_interval must be numbers"
        raise KVConfigError(message) from None
    if not 0 < port < 65536 or timeout <= 0 or beat <= 0:
        raise KVConfigError("LMCacheMPConnector: port must be 1-65535 and timeouts positive")
    return LMCache(host=host.removeprefix("tcp://"), port=port, mq_timeout=timeout, heartbeat_interval=beat)
