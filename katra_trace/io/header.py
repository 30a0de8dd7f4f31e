"""The trace header as typed records: how a capture was made and what it ran on.

Pure: no GL, no I/O. :meth:`TraceHeader.from_dict` is the one place that reads
a HEADER block's JSON object: it upgrades the older layouts (``host_info.gl_renderer``
/ ``driver_version`` / ``gl_version`` beside or instead of ``host_info.gl``;
``capture_options.resolved.*`` beside the requested top-level values; scene params
as ``resolved.scenes``, ``scenes`` entries or a ``params`` mapping) and tolerates
missing or odd values: a value of the wrong type (or a NaN) reads as None ("not
recorded") and is kept, as read, in the record's ``extra`` mapping with every
key it does not know. :meth:`as_dict` gives back what was read (same keys, same
values, same order), so a header round-trips; a record built in code writes its
fields that are not None.

The record base and its converters are :mod:`katra_trace.io.records`'s. Consumers read attributes
(``header.host_info.renderer``, ``header.capture_options.run_size``). Producers build records too:
the host probe a :class:`HostInfo`, every capture :func:`build_capture_options`, to which the engine
adds its facts (:meth:`_Record.replaced`); the writer turns them into the JSON object
(:func:`header_part`), and writes only a header the reader reads back (:func:`readable_header`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverInfo(_Record):
    """The GL driver parsed from GL_VERSION (``host_info.gl.driver``): ``Mesa`` ``22.3.6``."""

    name: str | None = None
    version: str | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {"name": _str, "version": _str}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerQueryInfo(_Record):
    """GL_TIMESTAMP query support (``host_info.gl.timer_query``): supported, the counter's bits, a
    probe error.
    """

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
    """The GL context a capture ran on (``host_info.gl``), as the harness's
    host probe records it."""

    vendor: str | None = None
    renderer: str | None = None
    version: str | None = None
    version_code: int | None = None  #: GL version as a number (450 for 4.5)
    glsl_version: str | None = None
    profile: str | None = None  #: core | compatibility | unknown
    driver: DriverInfo = dataclasses.field(default_factory=DriverInfo)
    #: GL_RENDERER names a CPU rasterizer (llvmpipe, swrast, ...)
    software_renderer: bool | None = None
    timer_query: TimerQueryInfo = dataclasses.field(default_factory=TimerQueryInfo)
    khr_debug: bool | None = None
    max_texture_size: int | None = None  #: px
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
    """The EGL device a capture ran on (``host_info.egl.device``)."""

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
    """The EGL display and device (``host_info.egl``; empty on other backends)."""

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
    """The machine (``host_info.system``): CPU, cores, RAM, OS, Python and package versions."""

    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpu_cores_usable: int | None = None  #: cores this process may run on
    ram_bytes: int | None = None
    os: str | None = None
    kernel: str | None = None
    platform: str | None = None
    machine: str | None = None
    hostname: str | None = None
    python: str | None = None
    python_implementation: str | None = None
    packages: Mapping[str, str] | None = None  #: package -> version ("" when not installed)

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
    """What a capture ran on (``host_info``, the harness's host probe).

    ``renderer``, ``driver`` and ``software`` are the facts comparisons use, upgraded from
    every layout: the 1.0 layout's ``gl_renderer`` / ``driver_version`` / ``gl_version``
    keys (kept in ``extra``) win over ``gl.renderer`` and ``gl.driver`` (name + version,
    else ``gl.version``).
    """

    backend: str | None = None
    gl: GLInfo = dataclasses.field(default_factory=GLInfo)
    egl: EGLInfo = dataclasses.field(default_factory=EGLInfo)
    system: SystemInfo = dataclasses.field(default_factory=SystemInfo)
    #: the environment variables that change rendering (LIBGL_*, MESA_*, ...)
    env: Mapping[str, str] | None = None
    #: the code generator's facts (CPU model and flags, Mesa, LLVM, vector width) of a counted run
    codegen: Mapping[str, Any] | None = None
    #: the GL renderer, from any layout (None: not recorded)
    renderer: str | None = dataclasses.field(init=False, default=None)
    #: the driver as one string (``"Mesa 22.3.6"``), from any layout (None: not recorded)
    driver: str | None = dataclasses.field(init=False, default=None)
    #: the capture ran on a software rasterizer (``gl.software_renderer``)
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
    """What a capture measured (``capture_options.measure``): ``time``, or
    counts under callgrind."""

    mode: str | None = None
    valgrind: str | None = None
    command: tuple[str, ...] | None = None
    env: Mapping[str, Any] | None = None
    frame_boundary: str | None = None
    pinned: Mapping[str, Any] | None = None
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
    """The run as resolved from the request (``capture_options.resolved``): a suite's size, the
    scenes.
    """

    frames: int | None = None
    duration_s: float | None = None  #: measured seconds per scene (host clock)
    warmup: int | None = None
    size: tuple[int, ...] | None = None  #: (width, height) px
    samples: int | None = None
    backend: str | None = None
    output: str | None = None
    device: int | None = None
    #: one mapping per scene run: label, spec, params
    scenes: tuple[Mapping[str, Any], ...] | None = None

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


def _scene_params(resolved: ResolvedOptions, extra: Mapping[str, Any]) -> dict[str, Any]:
    """Scene label -> params from every layout: ``resolved.scenes``, else ``scenes`` entries
    (by label or name), else a ``params`` mapping keyed by scene."""
    out: dict[str, Any] = {}
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
    """How a capture was made (``capture_options``): the request, the resolved run, the timing mode.

    ``extra`` holds the rest of the request (a RunConfig's scenes, suite, params, ...).
    The ``run_*`` fields are the values the capture ran with: the resolved value when
    recorded, else the requested one; ``measure_mode`` is ``time`` unless counted.
    """

    api: str | None = None
    frames: int | None = None
    warmup: int | None = None
    size: tuple[int, ...] | None = None  #: requested (width, height) px
    samples: int | None = None
    seed: int | None = None
    timing: str | None = None  #: requested: auto | sync | gpu
    zones: str | bool | None = None  #: off | passes | draws (older traces: true / false)
    max_draw_zones: int | None = None
    codec: str | None = None
    timing_mode: str | None = None  #: the mode used: sync | gpu | instructions | cycles
    timing_reason: str | None = None
    primary_clock: str | None = None
    scene: str | None = None
    #: ``"I/N"``: the capture ran shard I of N of its scenes (``run --shard``)
    shard: str | None = None
    measure: MeasureOptions = dataclasses.field(default_factory=MeasureOptions)
    resolved: ResolvedOptions = dataclasses.field(default_factory=ResolvedOptions)
    run_size: tuple[int, ...] | None = dataclasses.field(init=False, default=None)
    run_samples: int | None = dataclasses.field(init=False, default=None)
    run_frames: int | None = dataclasses.field(init=False, default=None)
    run_warmup: int | None = dataclasses.field(init=False, default=None)
    measure_mode: str = dataclasses.field(init=False, default="time")
    #: scene label -> the params the capture used (see :meth:`params_of`)
    scene_params: Mapping[str, Any] = dataclasses.field(init=False, default_factory=dict)

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

    def params_of(self, scene: str) -> Any:
        """The params the capture used for ``scene`` (None when not recorded)."""
        return self.scene_params.get(scene)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardInfo(_Record):
    """One shard of a merged trace (``shards[k]``, format 1.3; ``katra3d merge``): which shard it
    was, its scenes, and how, when and on what it ran."""

    shard: str | None = None  #: ``"I/N"``
    file: str | None = None  #: the shard's trace file as merge was given it
    scenes: tuple[str, ...] | None = None  #: the labels of its scenes
    tool_version: str | None = None
    start_wall_ns: int | None = None  #: its capture start, UTC ns since the epoch
    #: added to its event times in the merged trace: its start after the merged trace's start (wall
    #: clock), ns
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
    """A trace's HEADER block: what ran, how, on what, when (docs/trace-format.md)."""

    format_version: str | None = None
    schema_version: int | None = None
    schema_hash: str | None = None
    tool_version: str | None = None
    capture_options: CaptureOptions = dataclasses.field(default_factory=CaptureOptions)
    host_info: HostInfo = dataclasses.field(default_factory=HostInfo)
    start_wall_ns: int | None = None  #: capture start, UTC wall clock, ns since the epoch
    #: capture start on the host clock (perf_counter_ns); events are relative
    start_host_ns: int | None = None
    pid: int | None = None
    workload: str | None = None
    notes: str | None = None
    #: (format 1.3) a merged trace's shards, in order; None: the trace is one capture
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
        """The host ``scene`` ran on: in a merged trace its shard's, else (and for a scene no shard
        names) ``host_info``."""
        for shard in self.shards or ():
            if shard.scenes is not None and scene in shard.scenes:
                return shard.host_info
        return self.host_info

    @classmethod
    def from_dict(cls, data: Any) -> TraceHeader:
        """The header of a HEADER block's JSON object; TraceFormatError when it is not an object."""
        if not isinstance(data, Mapping):
            raise TraceFormatError(
                f"the trace header is not a JSON object but {type(data).__name__}"
            )
        return super().from_dict(data)


def build_capture_options(
    requested: Mapping[str, Any] | None = None,
    *,
    api: str | None = None,
    fixed: Mapping[str, Any] | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> CaptureOptions:
    """The capture options a producer records (``katra3d run``, the pytest plugin, ``capture()``,
    the offscreen helper); the engine adds the timing mode, measure and zones.

    ``requested``: the options as asked for (a RunConfig's ``as_dict()``, the plugin's
    arguments, ``capture()``'s ``capture_options``); ``api``: the entry point (first key),
    unless ``requested`` names one; ``fixed``: values the producer sets over the request;
    ``resolved``: what the run resolved to (frames, size, scenes with their params ...).
    """
    given = dict(requested or {})
    out = {"api": api, **given} if api is not None and "api" not in given else given
    out.update(fixed or {})
    if resolved is not None:
        out["resolved"] = dict(resolved)
    return CaptureOptions.from_dict(out)


def readable_header(header: dict[str, Any], path: object) -> dict[str, Any]:
    """``header`` (a HEADER block's JSON object about to be written to ``path``) when the reader
    would read it back; ConfigError otherwise. The reader's shape check
    (:func:`katra_trace.io.blocks.check_header`) is the one schema, for writing as for reading."""
    try:
        check_header(header, 0)
    except TraceFormatError as exc:
        raise ConfigError(
            f"cannot write trace {str(path)!r}: its header would not read back: "
            f"{str(exc).partition(': ')[2]}"
        ) from None
    return header


def header_part(part: Mapping[str, Any] | CaptureOptions | HostInfo | None) -> dict[str, Any]:
    """A header part as the JSON object written: typed records by ``as_dict()`` (the one place a
    producer's records become a dict), mappings copied."""
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
