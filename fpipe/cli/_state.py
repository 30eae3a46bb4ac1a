"""``fpipe state show FILE``: what a loader (or plan) snapshot holds.

FILE is snapshot bytes (``loader.snapshot()`` / ``save_state_rank()`` or
``loader.state_dict()["fpipe_snapshot"]`` written to a file), or a ``torch.save``d file holding
them anywhere: the bytes themselves, ``state_dict()``, a checkpoint dict or list containing
either (accelerate's ``custom_checkpoint_N.pkl`` too; read with ``weights_only=True``, so no
code runs).

Without a config it prints the envelope (versions, fingerprint, the parts and their field
hashes, checksum) and the payload as plain nested values. With ``--config CONFIG`` (the plan
config of ``fpipe plan``, or a dataset folder plus flags) it also checks the snapshot against
that pipeline and prints the decoded state with field names.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fpipe.core.errors import FpipeError, SnapshotError
from fpipe.core.snapshot import MAGIC, read_envelope, unpack, unpack_parts

__all__ = ["add_parser", "read_snapshot_file", "run", "show_envelope"]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``state`` sub-command (``fpipe state show FILE``)."""
    from fpipe.cli._plan import add_config_arguments

    p = sub.add_parser(
        "state",
        help="inspect loader snapshots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="print a snapshot's envelope and state")
    show.add_argument("file", help="snapshot bytes, or a torch checkpoint holding them")
    show.add_argument("--config", help="plan config (YAML or dataset folder) to type the state")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_config_arguments(show)
    return p


def _is_snapshot(data: bytes) -> bool:
    return MAGIC.encode() in data[:32]


def _find_snapshot(obj: Any, depth: int = 0) -> bytes | None:
    """The first snapshot in a loaded checkpoint: the ``fpipe_snapshot`` entry of a
    ``state_dict()``, or bytes (or a uint8 tensor) holding one, anywhere in dicts and lists."""
    if depth > 8:
        return None
    if hasattr(obj, "numpy") and getattr(obj, "dtype", None) is not None:  # a byte tensor
        try:
            obj = obj.numpy().tobytes()
        except (TypeError, RuntimeError):
            return None
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj) if _is_snapshot(bytes(obj)) else None
    if isinstance(obj, dict):
        if "fpipe_snapshot" in obj:
            from fpipe.loader.state import snapshot_bytes

            return snapshot_bytes(obj["fpipe_snapshot"])
        for v in obj.values():
            found = _find_snapshot(v, depth + 1)
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            found = _find_snapshot(v, depth + 1)
            if found is not None:
                return found
    return None


def read_snapshot_file(path: str | Path) -> bytes:
    """Snapshot bytes from a raw file or a torch checkpoint (``{"fpipe_snapshot": ...}``)."""
    data = Path(path).read_bytes()
    if data[:2] == b"PK" or data[:1] == b"\x80":  # a torch zip checkpoint or a legacy pickle
        import io

        import torch

        try:
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - report any unreadable checkpoint the same way
            raise SnapshotError(f"{path}: not a readable torch checkpoint: {e}") from None
        found = _find_snapshot(obj)
        if found is None:
            raise SnapshotError(
                f"{path}: no fpipe snapshot in this checkpoint (looked for a 'fpipe_snapshot' "
                "entry and for snapshot bytes, e.g. torch.save(loader.save_state_rank(), f))"
            )
        return found
    return data


def show_envelope(data: bytes) -> dict[str, Any]:
    """The envelope and plain payload of snapshot bytes, without needing the pipeline (a
    checksum that does not match is reported in ``checksum_ok``, not refused)."""
    env = read_envelope(data, verify=False)
    parts = unpack_parts(env.parts, env.format_version)
    return {
        "bytes": env.size,
        "checksum_ok": env.checksum_ok,
        "format_version": env.format_version,
        "order_version": env.order_version,
        "fingerprint": env.fingerprint.hex(),
        "kind": "loader" if parts and parts[-1][0] == "loader" else "plan",
        "parts": [{"name": p[0], "type": p[1], "field_hashes": list(p[2])} for p in parts],
        "payload": unpack(env.payload),
    }


def _default(v: Any) -> Any:
    return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)


def _text(info: dict[str, Any]) -> str:
    lines = [
        f"fpipe {info['kind']} snapshot, {info['bytes']} bytes, checksum "
        + ("ok" if info["checksum_ok"] else "MISMATCH (corrupted or truncated)"),
        f"format version {info['format_version']}, order version {info['order_version']}",
        f"fingerprint {info['fingerprint']}",
        "parts:",
    ]
    for p in info["parts"]:
        lines.append(f"  {p['name']:<20} {p['type']:<24} fields {p['field_hashes']}")
    if "state" in info:
        lines.append(f"seed {info['config'][0]['seed']}")
        lines.append("steps (config, then state):")
        for step in info["steps"]:
            lines.append(
                f"  {step['name']} ({step['type']}): {json.dumps(step['config'], default=_default)}"
            )
            if step["state"] is not None:
                lines.append(f"    state: {json.dumps(step['state'], default=_default)}")
        if "stats" in info:
            lines.append(f"stats by step: {json.dumps(info['stats'])}")
        lines.append("state:")
        lines.append(json.dumps(info["state"], indent=2, default=_default))
    else:
        lines.append("payload (plain values; pass --config to name the fields):")
        lines.append(json.dumps(info["payload"], default=_default))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``fpipe state show``; exit status 2 on unreadable or mismatching snapshots."""
    if getattr(args, "action", None) != "show":
        print("usage: fpipe state show FILE [--config CONFIG]", file=sys.stderr)
        return 2
    try:
        data = read_snapshot_file(args.file)
        info = show_envelope(data)
        if args.config:
            from fpipe.cli._plan import plan_overrides
            from fpipe.datasets.plan_config import load_plan_config
            from fpipe.datasets.plan_queries import decode_with_config

            cfg = load_plan_config(args.config, plan_overrides(args))
            info.update(decode_with_config(data, info["kind"], cfg))
    except (FpipeError, OSError) as e:
        print(f"fpipe state: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1, default=_default) if args.json else _text(info))
    return 0 if info["checksum_ok"] else 2
