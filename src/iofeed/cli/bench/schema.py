"""The results file's schema (a JSON Schema subset: type, enum, minimum, required, properties,
items) and a small validator for it. docs/benchmarks.md describes the same fields in prose."""
from __future__ import annotations

from typing import Any

FORMAT = "iofeed-bench"
VERSION = 2  # 2: "complete", --device, max_memory_reserved_bytes per feed


def _obj(required: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": required, **extra}


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "type": [schema["type"], "null"]}


_NUM, _INT, _STR = {"type": "number"}, {"type": "integer", "minimum": 0}, {"type": "string"}
_OPT_NUM, _OPT_INT, _OPT_STR = ({"type": [t, "null"]} for t in ("number", "integer", "string"))
_TALLY = _obj({"images": _INT, "batches": _INT, "seconds": _NUM})
_WINDOW = _obj({"round": _INT, "images": _INT, "batches": _INT, "seconds": _NUM, "images_per_sec": _NUM,
                "drained_images": _INT, "drained_batches": _INT, "other_cpu_percent": _NUM})
_TRAINING = _obj({"model": _STR, "data_wait_fraction": _NUM, "gpu_util_mean": _OPT_NUM,
                  "percent_of_ceiling": _OPT_NUM})
_FEED = _obj({
    "name": _STR, "about": _STR, "kind": _STR, "source": _OPT_STR,
    "status": {"type": "string", "enum": ["ok", "skipped", "failed"]}, "reason": _OPT_STR,
    "workers": _OPT_INT, "prefetch_batches": _OPT_INT, "settings": {"type": "object"},
    "images": _INT, "batches": _INT, "seconds": _NUM,
    "images_per_sec": _OPT_NUM, "mpix_per_sec": _OPT_NUM, "vs_baseline": _OPT_NUM,
    "cpu_percent_per_core": {"type": "array", "items": _NUM}, "cpu_percent": _OPT_NUM, "cpu_ms_per_image": _OPT_NUM,
    "other_cpu_percent": _OPT_NUM,
    "peak_memory_bytes": _OPT_INT, "processes": _OPT_INT, "max_memory_reserved_bytes": _OPT_INT,
    "warmup": _or_null(_TALLY),
    "windows": {"type": "array", "items": _WINDOW},
    "training": _or_null(_TRAINING),
})
# added since version 2, so optional: the feed its ratio is against, and the mapped-file part of its memory
_FEED["properties"].update({"baseline": _OPT_STR, "peak_memory_file_bytes": _OPT_INT,
                            "worker_cpu_ms_per_image": _OPT_NUM})  # since the nvjpeg feed
SCHEMA: dict[str, Any] = _obj({
    "format": {"type": "string", "enum": [FORMAT]},
    "version": {"type": "integer", "enum": [VERSION]},
    "created": _STR,
    "complete": {"type": "boolean"},
    "command": _STR,
    "machine": _obj({
        "cpu_model": _STR, "cores": _INT, "ram_bytes": _INT, "os": _STR,
        "gpu": {"type": ["object", "null"], "required": ["name", "driver", "memory_bytes"]},
        "versions": _obj({k: _OPT_STR for k in ("python", "torch", "torchvision", "pillow", "libjpeg_turbo",
                                                  "numpy", "dali", "iofeed")}),
    }),
    "page_cache": _obj({"state": {"type": "string", "enum": ["warm", "as found"]}, "files": _INT, "bytes": _INT,
                        "seconds": _NUM}),
    "settings": _obj({"batch_size": _INT, "image_size": _INT, "model": _STR, "device": _STR,
                      "seconds_per_feed": _NUM, "rounds": _INT, "window_seconds": _NUM, "warmup_seconds": _NUM,
                      "workers": _INT, "seed": {"type": "integer"},
                      "memory_metric": {"type": "string", "enum": ["pss", "rss"]}}),
    "inputs": _obj({"folder": _OPT_STR, "dataset": _OPT_STR, "missing": {"type": "object"},
                    "notes": {"type": "array", "items": _STR}}),
    "baseline": _STR,
    "feeds": {"type": "array", "items": _FEED},
    "gpu_timeline": {"type": "array", "items": _obj({"t": _NUM, "util": _NUM, "feed": _OPT_STR})},
})

_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, name: str) -> bool:
    if name in ("integer", "number"):
        if isinstance(value, bool):
            return False
        return isinstance(value, int) if name == "integer" else isinstance(value, (int, float))
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema: dict[str, Any] = SCHEMA, where: str = "$") -> list[str]:
    """Every way `value` breaks `schema`, as "path: problem" lines (empty: valid)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            return [f"{where}: expected {' or '.join(kinds)}, got {type(value).__name__}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errors.append(f"{where}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        errors += [f"{where}: missing {key!r}" for key in schema.get("required", ()) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += validate(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors
