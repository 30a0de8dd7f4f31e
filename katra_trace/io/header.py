"""The trace header as typed records (pure). :meth:`TraceHeader.from_dict` is the one reader: it
upgrades older layouts and keeps wrong-typed values in ``extra`` so :meth:`as_dict` round-trips.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

from katra_trace.errors import ConfigError, TraceFormatError
from katra_trace.io.blocks import check_header
from katra_trace.io.records import (
    _bool,
    _Convert,
    _int,
    _ints,
    _mapping,
    _Record,
    _record,
    _records,
    _scenes,
    _seconds,
    _str,
    _str_map,
    _str_or_bool,
    _strs,
)
from katra_trace.jsontext import JsonObject, JsonValue


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverInfo(_Record):
    """``host_info.gl.driver``, parsed from GL_VERSION."""

    name: str | None = None
    version: str | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {"name": _str, "version": _str}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerQueryInfo(_Record):
    """``host_info.gl.timer_query``."""

    supported: bool | None = None
    counter_bits: int | None = None
    error: str | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "supported": _bool,
        "counter_bits": _int,
        "error": _str,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class GLInfo(_Record):
    """``host_info.gl``."""

    vendor: str | None = None
    renderer: str | None = None
    version: str | None = None
    version_code: int | None = None  # 450 for 4.5
    glsl_version: str | None = None
    profile: str | None = None
    driver: DriverInfo = dataclasses.field(default_factory=DriverInfo)
    software_renderer: bool | None = None
    timer_query: TimerQueryInfo = dataclasses.field(default_factory=TimerQueryInfo)
    khr_debug: bool | None = None
    max_texture_size: int | None = None  # px
    max_samples: int | None = None
    extensions_count: int | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "vendor": _str,
        "renderer": _str,
        "version": _str,
        "version_code": _int,
        "glsl_version": _str,
        "profile": _str,
        "driver": _record(DriverInfo),
        "software_renderer": _bool,
        "timer_query": _record(TimerQueryInfo),
        "khr_debug": _bool,
        "max_texture_size": _int,
        "max_samples": _int,
        "extensions_count": _int,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class EGLDeviceInfo(_Record):
    """``host_info.egl.device``."""

    drm_device: str | None = None
    renderer: str | None = None
    software: bool | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "drm_device": _str,
        "renderer": _str,
        "software": _bool,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class EGLInfo(_Record):
    """``host_info.egl`` (empty on other backends)."""

    vendor: str | None = None
    version: str | None = None
    device_index: int | None = None
    device: EGLDeviceInfo = dataclasses.field(default_factory=EGLDeviceInfo)
    device_count: int | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "vendor": _str,
        "version": _str,
        "device_index": _int,
        "device": _record(EGLDeviceInfo),
        "device_count": _int,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class SystemInfo(_Record):
    """``host_info.system``."""

    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpu_cores_usable: int | None = None
    ram_bytes: int | None = None
    os: str | None = None
    kernel: str | None = None
    platform: str | None = None
    machine: str | None = None
    hostname: str | None = None
    python: str | None = None
    python_implementation: str | None = None
    packages: Mapping[str, str] | None = None  # version "" when not installed

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "cpu_model": _str,
        "cpu_cores": _int,
        "cpu_cores_usable": _int,
        "ram_bytes": _int,
        "os": _str,
        "kernel": _str,
        "platform": _str,
        "machine": _str,
        "hostname": _str,
        "python": _str,
        "python_implementation": _str,
        "packages": _str_map,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostInfo(_Record):
    """``host_info``; comparisons use ``renderer``, ``driver``, ``software`` (the 1.0 keys win)."""

    backend: str | None = None
    gl: GLInfo = dataclasses.field(default_factory=GLInfo)
    egl: EGLInfo = dataclasses.field(default_factory=EGLInfo)
    system: SystemInfo = dataclasses.field(default_factory=SystemInfo)
    env: Mapping[str, str] | None = None
    codegen: Mapping[str, JsonValue] | None = None
    renderer: str | None = dataclasses.field(init=False, default=None)
    driver: str | None = dataclasses.field(init=False, default=None)
    software: bool = dataclasses.field(init=False, default=False)

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "backend": _str,
        "gl": _record(GLInfo),
        "egl": _record(EGLInfo),
        "system": _record(SystemInfo),
        "env": _str_map,
        "codegen": _mapping,
    }

    def __post_init__(self) -> None:
        legacy = self.extra
        renderer = legacy.get("gl_renderer")
        renderer = renderer if isinstance(renderer, str) and renderer else self.gl.renderer
        driver = legacy.get("driver_version")
        if not isinstance(driver, str):
            drv = self.gl.driver
            if drv.name or drv.version:
                driver = f"{drv.name or ''} {drv.version or ''}".strip()
            else:
                driver = self.gl.version
        object.__setattr__(self, "renderer", renderer)
        object.__setattr__(self, "driver", driver)
        object.__setattr__(self, "software", self.gl.software_renderer is True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasureOptions(_Record):
    """``capture_options.measure``."""

    mode: str | None = None
    valgrind: str | None = None
    command: tuple[str, ...] | None = None
    env: Mapping[str, JsonValue] | None = None
    frame_boundary: str | None = None
    pinned: Mapping[str, JsonValue] | None = None
    output: str | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "mode": _str,
        "valgrind": _str,
        "command": _strs,
        "env": _mapping,
        "frame_boundary": _str,
        "pinned": _mapping,
        "output": _str,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolvedOptions(_Record):
    """``capture_options.resolved``."""

    frames: int | None = None
    duration_s: float | None = None  # per scene, host clock
    warmup: int | None = None
    size: tuple[int, ...] | None = None  # px
    samples: int | None = None
    backend: str | None = None
    output: str | None = None
    device: int | None = None
    scenes: tuple[Mapping[str, JsonValue], ...] | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "frames": _int,
        "duration_s": _seconds,
        "warmup": _int,
        "size": _ints,
        "samples": _int,
        "backend": _str,
        "output": _str,
        "device": _int,
        "scenes": _scenes,
    }


def _scene_params(resolved: ResolvedOptions, extra: Mapping[str, JsonValue]) -> JsonObject:
    out: JsonObject = {}
    for source in (resolved.scenes, resolved.extra.get("scenes"), extra.get("scenes")):
        if isinstance(source, Sequence) and not isinstance(source, str):
            for entry in source:
                if isinstance(entry, Mapping):
                    for key in (entry.get("label"), entry.get("name")):
                        if isinstance(key, str):
                            out.setdefault(key, entry.get("params"))
    params = extra.get("params")
    if isinstance(params, Mapping):
        for key, value in params.items():
            if isinstance(key, str) and isinstance(value, Mapping):
                out.setdefault(key, value)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureOptions(_Record):
    """How a capture was made (``capture_options``); ``run_*``: resolved values, else requested."""

    api: str | None = None
    frames: int | None = None
    warmup: int | None = None
    size: tuple[int, ...] | None = None  # px
    samples: int | None = None
    seed: int | None = None
    timing: str | None = None  # requested
    zones: str | bool | None = None  # older traces: true / false
    max_draw_zones: int | None = None
    codec: str | None = None
    timing_mode: str | None = None  # the mode used
    timing_reason: str | None = None
    primary_clock: str | None = None
    scene: str | None = None
    shard: str | None = None
    measure: MeasureOptions = dataclasses.field(default_factory=MeasureOptions)
    resolved: ResolvedOptions = dataclasses.field(default_factory=ResolvedOptions)
    run_size: tuple[int, ...] | None = dataclasses.field(init=False, default=None)
    run_samples: int | None = dataclasses.field(init=False, default=None)
    run_frames: int | None = dataclasses.field(init=False, default=None)
    run_warmup: int | None = dataclasses.field(init=False, default=None)
    measure_mode: str = dataclasses.field(init=False, default="time")
    scene_params: Mapping[str, JsonValue] = dataclasses.field(init=False, default_factory=dict)

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "api": _str,
        "frames": _int,
        "warmup": _int,
        "size": _ints,
        "samples": _int,
        "seed": _int,
        "timing": _str,
        "zones": _str_or_bool,
        "max_draw_zones": _int,
        "codec": _str,
        "timing_mode": _str,
        "timing_reason": _str,
        "primary_clock": _str,
        "scene": _str,
        "shard": _str,
        "measure": _record(MeasureOptions),
        "resolved": _record(ResolvedOptions),
    }

    def __post_init__(self) -> None:
        r = self.resolved
        for name, value, fallback in (
            ("run_size", r.size, self.size),
            ("run_samples", r.samples, self.samples),
            ("run_frames", r.frames, self.frames),
            ("run_warmup", r.warmup, self.warmup),
        ):
            object.__setattr__(self, name, value if value is not None else fallback)
        mode = self.measure.mode
        object.__setattr__(self, "measure_mode", mode if mode else "time")
        object.__setattr__(self, "scene_params", _scene_params(r, self.extra))

    def params_of(self, scene: str) -> JsonValue:
        """The params the capture used for ``scene`` (None: not recorded)."""
        return self.scene_params.get(scene)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardInfo(_Record):
    """One shard of a merged trace (``shards[k]``)."""

    shard: str | None = None  # "I/N"
    file: str | None = None
    scenes: tuple[str, ...] | None = None
    tool_version: str | None = None
    start_wall_ns: int | None = None
    # ns added to its event times (its wall-clock start after the merged trace's)
    offset_ns: int | None = None
    pid: int | None = None
    host_info: HostInfo = dataclasses.field(default_factory=HostInfo)

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "shard": _str,
        "file": _str,
        "scenes": _strs,
        "tool_version": _str,
        "start_wall_ns": _int,
        "offset_ns": _int,
        "pid": _int,
        "host_info": _record(HostInfo),
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceHeader(_Record):
    """A trace's HEADER block (docs/trace-format.md)."""

    format_version: str | None = None
    schema_version: int | None = None
    schema_hash: str | None = None
    tool_version: str | None = None
    capture_options: CaptureOptions = dataclasses.field(default_factory=CaptureOptions)
    host_info: HostInfo = dataclasses.field(default_factory=HostInfo)
    start_wall_ns: int | None = None  # UTC, ns since the epoch
    start_host_ns: int | None = None  # perf_counter_ns, the origin of event times
    pid: int | None = None
    workload: str | None = None
    notes: str | None = None
    shards: tuple[ShardInfo, ...] | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "format_version": _str,
        "schema_version": _int,
        "schema_hash": _str,
        "tool_version": _str,
        "capture_options": _record(CaptureOptions),
        "host_info": _record(HostInfo),
        "start_wall_ns": _int,
        "start_host_ns": _int,
        "pid": _int,
        "workload": _str,
        "notes": _str,
        "shards": _records(ShardInfo),
    }

    def host_of(self, scene: str) -> HostInfo:
        """The host ``scene`` ran on (its shard's in a merged trace)."""
        for shard in self.shards or ():
            if shard.scenes is not None and scene in shard.scenes:
                return shard.host_info
        return self.host_info

    @classmethod
    def from_dict(cls, data: object) -> TraceHeader:
        """Read a HEADER JSON object; TraceFormatError when it is not an object."""
        if not isinstance(data, Mapping):
            raise TraceFormatError(
                f"the trace header is not a JSON object but {type(data).__name__}"
            )
        return super().from_dict(data)


def build_capture_options(
    requested: Mapping[str, JsonValue] | None = None,
    *,
    api: str | None = None,
    fixed: Mapping[str, JsonValue] | None = None,
    resolved: Mapping[str, JsonValue] | None = None,
) -> CaptureOptions:
    """The capture options every producer records; ``fixed`` overrides ``requested``."""
    given = dict(requested or {})
    out = {"api": api, **given} if api is not None and "api" not in given else given
    out.update(fixed or {})
    if resolved is not None:
        out["resolved"] = dict(resolved)
    return CaptureOptions.from_dict(out)


def readable_header(header: JsonObject, path: object) -> JsonObject:
    """``header`` if the reader reads it back, else ConfigError (the one schema check)."""
    try:
        check_header(header, 0)
    except TraceFormatError as exc:
        raise ConfigError(
            f"cannot write trace {str(path)!r}: its header would not read back: "
            f"{str(exc).partition(': ')[2]}"
        ) from None
    return header


def header_part(part: Mapping[str, JsonValue] | CaptureOptions | HostInfo | None) -> JsonObject:
    """A header part as the JSON object written."""
    if isinstance(part, _Record):
        return part.as_dict()
    return dict(part or {})


__all__ = [
    "CaptureOptions",
    "DriverInfo",
    "EGLDeviceInfo",
    "EGLInfo",
    "GLInfo",
    "HostInfo",
    "MeasureOptions",
    "ResolvedOptions",
    "ShardInfo",
    "SystemInfo",
    "TimerQueryInfo",
    "TraceHeader",
    "build_capture_options",
    "header_part",
    "readable_header",
]
