"""The typed trace header (katra_trace.io.header): round trip, older layouts, hostile values, the
builder.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from katra_trace import open_trace
from katra_trace.analysis.match import (
    capture_facts,
    codegen_facts,
    host_facts,
    resolve_metric,
)
from katra_trace.errors import ConfigError, TraceFormatError
from katra_trace.io.header import (
    CaptureOptions,
    GLInfo,
    HostInfo,
    MeasureOptions,
    SystemInfo,
    TimerQueryInfo,
    TraceHeader,
    build_capture_options,
)
from katra_trace.io.writer import TraceWriter

DATA = Path(__file__).parent / "data"

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _with(keys: list[str], inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts that may hold any of ``keys`` (and other keys), each with a value from ``inner``."""
    return st.dictionaries(
        st.sampled_from(keys) | st.text(max_size=6), inner, max_size=len(keys) + 2
    )


#: values under the keys the records type, any JSON value included (wrong types, NaN, null)
drivers = _with(["name", "version"], json_values)
timer_queries = _with(["supported", "counter_bits", "error"], json_values)
gls = _with(
    [
        "vendor",
        "renderer",
        "version",
        "software_renderer",
        "version_code",
        "glsl_version",
        "profile",
        "khr_debug",
        "max_texture_size",
        "max_samples",
        "extensions_count",
    ],
    json_values,
) | st.builds(
    lambda d, drv, tq: {**d, "driver": drv, "timer_query": tq},
    _with(["renderer", "version"], json_values),
    drivers | json_values,
    timer_queries | json_values,
)
egls = st.builds(
    lambda d, dev: {**d, "device": dev},
    _with(["vendor", "version", "device_index", "device_count"], json_values),
    _with(["drm_device", "renderer", "software"], json_values) | json_values,
)
hosts = st.builds(
    lambda d, gl, egl, system: {**d, "gl": gl, "egl": egl, "system": system},
    _with(
        ["backend", "gl_renderer", "driver_version", "gl_version", "codegen", "env"], json_values
    ),
    gls | json_values,
    egls | json_values,
    _with(["cpu_model", "hostname", "cpu_cores", "ram_bytes", "packages", "machine"], json_values)
    | json_values,
)
resolveds = _with(
    ["frames", "duration_s", "warmup", "size", "samples", "backend", "device", "scenes"],
    json_values
    | st.lists(st.dictionaries(st.sampled_from(["label", "name", "params"]), json_values)),
)
measures = _with(["mode", "valgrind", "command", "env", "frame_boundary", "pinned"], json_values)
options = st.builds(
    lambda d, m, r: {**d, "measure": m, "resolved": r},
    _with(
        [
            "api",
            "size",
            "samples",
            "frames",
            "timing_mode",
            "primary_clock",
            "zones",
            "scenes",
            "params",
        ],
        json_values,
    ),
    measures | json_values,
    resolveds | json_values,
)
headers = st.builds(
    lambda d, c, h: {**d, "capture_options": c, "host_info": h},
    _with(
        ["format_version", "pid", "start_wall_ns", "start_host_ns", "workload", "notes"],
        json_values,
    ),
    options | json_values,
    hosts | json_values,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=headers)
def test_any_header_round_trips_and_consumers_never_raise(raw: dict[str, Any]) -> None:
    h = TraceHeader.from_dict(raw)
    out = h.as_dict()
    assert out == raw and list(out) == list(raw)
    assert TraceHeader.from_dict(out) == h
    # every consumer's view of it is a plain value, whatever was in the header
    facts = {**capture_facts(h, "s"), **host_facts(h)}
    assert facts["renderer"] is None or isinstance(facts["renderer"], str)
    assert isinstance(h.capture_options.measure_mode, str) and (
        codegen_facts(h) is None or isinstance(codegen_facts(h), dict)
    )
    assert resolve_metric([h], {"wall"}, "auto") in ("wall", "cpu", "gpu")
    assert isinstance(h.host_info.software, bool)


def test_golden_headers_read_and_write_back_unchanged() -> None:
    t = open_trace(DATA / "golden-v1.0.katra", strict=True)
    assert t.header.as_dict() == {
        "format_version": "1.0",
        "schema_version": 1,
        "schema_hash": "ea22aa269ca471fe",
        "tool_version": "katra3d 0.1.0",
        "capture_options": {"size": [64, 64], "frames": 10, "timing_mode": "sync"},
        "host_info": {"gl_renderer": "golden renderer", "software_renderer": True},
        "start_wall_ns": t.header.start_wall_ns,
        "start_host_ns": 0,
        "pid": 6209,
        "workload": "golden",
        "notes": "golden v1.0",
    }
    assert list(t.header.as_dict()) == [
        "format_version",
        "schema_version",
        "schema_hash",
        "tool_version",
        "capture_options",
        "host_info",
        "start_wall_ns",
        "start_host_ns",
        "pid",
        "workload",
        "notes",
    ]
    for name in ("golden-v1.1.katra", "golden-v1.1-none.katra", "golden-v1.1-blosc2.katra"):
        h = open_trace(DATA / name, events=False).header
        assert TraceHeader.from_dict(h.as_dict()) == h
        assert h.capture_options.measure_mode == "cycles" and h.capture_options.run_size == (32, 32)
        assert (
            h.capture_options.measure.command is not None
            and h.capture_options.measure.command[0] == "valgrind"
        )


def test_v1_0_host_layout_is_upgraded() -> None:
    """1.0 traces named renderer and driver at the top of host_info; newer ones under ``gl``."""
    old = HostInfo.from_dict(
        {"gl_renderer": "llvmpipe (LLVM 15)", "driver_version": "Mesa 22.3.6", "gl_version": "4.5"}
    )
    new = HostInfo.from_dict(
        {
            "gl": {
                "renderer": "llvmpipe (LLVM 15)",
                "version": "4.5 (Core Profile) Mesa 22.3.6",
                "driver": {"name": "Mesa", "version": "22.3.6"},
            }
        }
    )
    assert (
        (old.renderer, old.driver)
        == (new.renderer, new.driver)
        == ("llvmpipe (LLVM 15)", "Mesa 22.3.6")
    )
    assert old.as_dict() == {
        "gl_renderer": "llvmpipe (LLVM 15)",
        "driver_version": "Mesa 22.3.6",
        "gl_version": "4.5",
    }  # upgraded for reading, written back as it was
    # the 1.0 keys win where both are there; gl.version stands in for a driver nobody parsed
    both = HostInfo.from_dict({"gl_renderer": "A", "gl": {"renderer": "B", "version": "4.6 X 1.2"}})
    assert (both.renderer, both.driver) == ("A", "4.6 X 1.2")
    assert HostInfo.from_dict({"gl_renderer": "", "gl": {"renderer": "B"}}).renderer == "B"
    name_only = HostInfo.from_dict({"gl": {"driver": {"name": "NVIDIA"}, "version": "4.6"}})
    assert name_only.driver == "NVIDIA"
    assert HostInfo.from_dict({}).renderer is None and HostInfo.from_dict({}).driver is None


def test_resolved_values_win_over_requested_ones() -> None:
    opts = CaptureOptions.from_dict(
        {
            "size": None,
            "samples": 0,
            "frames": 10,
            "warmup": 2,
            "resolved": {"size": [320, 180], "samples": 4, "frames": None},
        }
    )
    assert (opts.run_size, opts.run_samples, opts.run_frames, opts.run_warmup) == (
        (320, 180),
        4,
        10,
        2,
    )
    old = CaptureOptions.from_dict({"size": [64, 64], "frames": 10, "timing_mode": "sync"})
    assert (old.run_size, old.run_frames, old.timing_mode, old.measure_mode) == (
        (64, 64),
        10,
        "sync",
        "time",
    )


def test_scene_params_layouts() -> None:
    run = CaptureOptions.from_dict(
        {
            "params": {"fill.layers": 4},
            "resolved": {
                "scenes": [
                    {"label": "fill", "spec": "fill", "params": {"layers": 4}},
                    {"label": "fill#2", "spec": "fill", "params": {"layers": 1}},
                ]
            },
        }
    )
    assert run.params_of("fill") == {"layers": 4} and run.params_of("fill#2") == {"layers": 1}
    assert run.params_of("fill.layers") is None and run.params_of("other") is None
    named = CaptureOptions.from_dict({"scenes": [{"name": "cubes", "params": {"n": 3}}, "stray"]})
    assert named.params_of("cubes") == {"n": 3}
    by_scene = CaptureOptions.from_dict({"params": {"fill": {"layers": 2}}})
    assert by_scene.params_of("fill") == {"layers": 2}
    # resolved.scenes first, then scenes entries, then the params mapping
    mixed = CaptureOptions.from_dict(
        {
            "params": {"fill": {"layers": 9}},
            "scenes": [{"name": "fill", "params": 8}],
            "resolved": {"scenes": [{"label": "fill", "params": {"layers": 7}}, 5]},
        }
    )
    assert mixed.params_of("fill") == {"layers": 7}


@pytest.mark.parametrize(
    "raw",
    [
        {
            "capture_options": {
                "size": "64x64",
                "samples": True,
                "frames": 1.5,
                "timing_mode": {"a": 1},
                "measure": "time",
                "resolved": [1],
                "zones": 3,
            }
        },
        {
            "capture_options": {
                "resolved": {"duration_s": math.nan, "size": [1, "x"], "scenes": "fill"}
            }
        },
        {"capture_options": {"resolved": {"duration_s": "1e400", "device": 1.0, "frames": None}}},
        {"capture_options": None, "host_info": None},
        {"host_info": {"gl": "llvmpipe", "system": [1, 2], "codegen": "x", "gl_renderer": 5}},
        {"host_info": {"gl": {"renderer": 5, "driver": [1], "software_renderer": "yes"}}},
        {
            "pid": "12",
            "start_wall_ns": math.inf,
            "start_host_ns": None,
            "workload": 3,
            "notes": None,
        },
        {},
    ],
)
def test_hostile_values_read_as_not_recorded(raw: dict[str, Any]) -> None:
    h = TraceHeader.from_dict(raw)
    assert h.as_dict() == raw
    opts, host = h.capture_options, h.host_info
    assert (
        opts.size is None
        and opts.samples is None
        and opts.frames is None
        and opts.timing_mode is None
    )
    assert opts.zones is None and opts.measure_mode == "time" and opts.resolved.duration_s is None
    assert opts.run_size is None and opts.resolved.scenes is None and opts.params_of("fill") is None
    assert (
        host.renderer is None
        and host.driver is None
        and host.software is False
        and host.codegen is None
    )
    assert host.gl.driver.name is None and host.system.cpu_model is None
    assert h.pid is None and h.start_wall_ns is None and h.workload is None
    assert capture_facts(h, "fill") == {
        "size": None,
        "samples": None,
        "timing_mode": None,
        "params": None,
    }


def test_bad_values_are_kept_in_extra() -> None:
    opts = CaptureOptions.from_dict({"size": "64x64", "custom": 1, "timing_mode": "sync"})
    assert (
        opts.size is None
        and opts.timing_mode == "sync"
        and opts.extra == {"size": "64x64", "custom": 1}
    )


@pytest.mark.parametrize("raw", [[1], "header", None, 5])
def test_a_header_that_is_not_an_object_is_a_format_error(raw: Any) -> None:
    with pytest.raises(TraceFormatError, match="not a JSON object"):
        TraceHeader.from_dict(raw)


def test_records_built_in_code_write_their_fields() -> None:
    opts = CaptureOptions(api="x", size=(64, 48), timing_mode="sync")
    assert opts.as_dict() == {"api": "x", "size": [64, 48], "timing_mode": "sync"}
    assert opts.run_size == (64, 48) and TraceHeader().as_dict() == {}


def test_build_capture_options_matches_each_producer() -> None:
    # pytest plugin: api first, then the request, then what it resolved to
    plugin = build_capture_options(
        {"size": [8, 8], "samples": 0, "frames": 3, "warmup": 1, "seed": 0},
        api="katra_scene",
        resolved={
            "size": [8, 8],
            "samples": 0,
            "scenes": [{"label": "t", "spec": "t", "params": {}}],
        },
    )
    assert list(plugin.as_dict()) == [
        "api",
        "size",
        "samples",
        "frames",
        "warmup",
        "seed",
        "resolved",
    ]
    assert plugin.api == "katra_scene" and plugin.params_of("t") == {} and plugin.run_size == (8, 8)
    # capture(): the user's options, the api unless they named one, timing and scene set over them
    mine = build_capture_options(
        {"api": "mine", "timing": "gpu", "k": 1},
        api="katra3d.capture",
        fixed={"timing": "sync", "scene": "s"},
    )
    assert mine.as_dict() == {"api": "mine", "timing": "sync", "k": 1, "scene": "s"}
    assert build_capture_options(
        None, api="katra3d.capture", fixed={"timing": "auto", "scene": "c"}
    ).as_dict() == {"api": "katra3d.capture", "timing": "auto", "scene": "c"}
    # the offscreen helper records nothing of its own
    assert build_capture_options().as_dict() == {}


def test_writer_takes_typed_parts(tmp_path: Path) -> None:
    opts = build_capture_options(
        {"frames": 2}, api="test", resolved={"size": [4, 4], "duration_s": None}
    )
    host = HostInfo.from_dict(
        {"backend": "egl", "gl": {"renderer": "llvmpipe", "software_renderer": True}}
    )
    with TraceWriter(tmp_path / "a.katra", capture_options=opts, host_info=host) as w:
        pass
    assert w.header["capture_options"] == {
        "api": "test",
        "frames": 2,
        "resolved": {"size": [4, 4], "duration_s": None},
    }
    t = open_trace(tmp_path / "a.katra")
    assert (
        t.header.capture_options == opts
        and t.header.host_info == host
        and t.header.host_info.software
    )


def test_replaced_keeps_the_request_s_order_and_appends_the_rest() -> None:
    request = build_capture_options({"api": "x", "measure": "time", "zones": True, "k": 1})
    done = request.replaced(
        timing_mode="sync", measure=MeasureOptions(mode="time"), zones="passes", max_draw_zones=None
    )
    assert list(done.as_dict()) == ["api", "measure", "zones", "k", "timing_mode", "max_draw_zones"]
    assert (
        done.as_dict()["measure"] == {"mode": "time"} and done.as_dict()["max_draw_zones"] is None
    )
    assert "measure" not in done.extra and done.measure_mode == "time" and done.extra == {"k": 1}
    # a record built in code keeps the fields it writes, in their order, before the ones added
    built = CaptureOptions(api="y", frames=3).replaced(scene="s", size=(4, 4))
    assert list(built.as_dict()) == ["api", "frames", "scene", "size"] and built.run_size == (4, 4)


def test_the_probe_s_records_type_what_the_header_reads() -> None:
    raw = {
        "backend": "egl",
        "gl": {
            "renderer": "llvmpipe",
            "version_code": 450,
            "timer_query": {"supported": True, "counter_bits": 64},
            "khr_debug": True,
        },
        "egl": {"vendor": "Mesa Project", "device_index": 0, "device": {"software": True}},
        "system": {"cpu_model": "EPYC", "cpu_cores": 2, "packages": {"numpy": "2.4"}},
        "env": {"LP_X": "1"},
    }
    host = HostInfo.from_dict(raw)
    assert host.as_dict() == raw and not host.extra and not host.gl.extra and not host.system.extra
    assert (
        host.gl.timer_query == TimerQueryInfo(supported=True, counter_bits=64)
        and host.gl.version_code == 450
    )
    assert (
        host.egl.device.software is True
        and host.system.packages == {"numpy": "2.4"}
        and host.env == {"LP_X": "1"}
    )
    odd = HostInfo.from_dict({"gl": {"timer_query": 7, "max_samples": "4"}, "env": {"A": 1}})
    assert odd.gl.timer_query.supported is None and odd.gl.max_samples is None and odd.env is None
    assert odd.as_dict() == {"gl": {"timer_query": 7, "max_samples": "4"}, "env": {"A": 1}}


def test_the_writer_refuses_a_header_the_reader_would_refuse(tmp_path: Path) -> None:
    """One schema for writing and reading: a header whose documented keys have the wrong JSON type
    is a ConfigError before any file exists, not a trace that no command can open."""
    for options in ({"resolved": [1]}, {"timing_mode": 3}, {"measure": "instructions"}):
        with pytest.raises(ConfigError, match="would not read back"):
            TraceWriter(tmp_path / "bad.katra", capture_options=options)
    with pytest.raises(ConfigError, match="'host_info.codegen' is not a JSON object"):
        TraceWriter(tmp_path / "bad.katra", host_info=HostInfo(codegen=["x"]))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    host = HostInfo(
        gl=GLInfo(renderer="llvmpipe", software_renderer=True), system=SystemInfo(cpu_model="EPYC")
    )
    with TraceWriter(
        tmp_path / "ok.katra", host_info=host, capture_options={"measure": {"mode": "time"}}
    ):
        pass
    assert open_trace(tmp_path / "ok.katra").header.host_info == host
