"""``katra3d doctor``: can this machine render, and how should it be timed?"""

from __future__ import annotations

import argparse
import dataclasses

from katra3d.harness.cli._common import print_json
from katra3d.harness.engine import timers
from katra3d.harness.engine.timer_check import TimerCheck, timer_query_reliability
from katra3d.harness.gl import backends, probe
from katra3d.harness.gl.backends import BackendStatus, EglDevice
from katra3d.harness.run.config import parse_int
from katra_trace.errors import BackendUnavailable, ExitCode
from katra_trace.io.header import GLInfo
from katra_trace.jsontext import JsonObject
from katra_trace.units import format_ms


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "doctor",
        help="check the GL backends, timer queries and recommended timing mode",
        description="Check which GL backends work here (and why not), show the GL strings, "
        "test whether timer queries time a draw, and recommend a timing mode.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="backend to inspect in depth (default: egl, or $KATRA3D_BACKEND)",
    )
    p.add_argument("--device", metavar="N", help="EGL device index to inspect")
    p.set_defaults(func=run)


@dataclasses.dataclass
class Diagnosis:
    """What doctor found; ``gl`` None: no usable GL (``error`` says why)."""

    backends: list[BackendStatus]
    egl_devices: list[JsonObject]
    default_backend: str
    env: dict[str, str]
    error: str = ""
    backend_used: str = ""
    gl: GLInfo | None = None
    egl: dict[str, str] = dataclasses.field(default_factory=dict)
    check: TimerCheck = TimerCheck("")
    timing: tuple[str, str] = ("", "")

    @property
    def ok(self) -> bool:
        return self.gl is not None

    def as_dict(self) -> JsonObject:
        """``doctor --json``'s object."""
        out: JsonObject = {
            "backends": [s.as_dict() for s in self.backends],
            "egl_devices": self.egl_devices,
            "default_backend": self.default_backend,
            "env": self.env,
            "ok": self.ok,
        }
        if self.gl is None:
            out.update(error=self.error, install_hint=backends.MESA_INSTALL_LINE)
            return out
        mode, reason = self.timing
        out.update(
            backend_used=self.backend_used,
            gl=self.gl.as_dict(),
            egl=self.egl,
            timer_query_check=self.check.as_dict(),
            recommended_timing={"mode": mode, "reason": reason, "auto_picks": mode},
        )
        return out


def _device_json(d: EglDevice) -> JsonObject:
    # keys EGL cannot fill (Mesa's software device has no DRM node) are left out
    out: JsonObject = {"index": d["index"]}
    if d["drm_device"]:
        out["drm_device"] = d["drm_device"]
    if d["renderer"]:
        out["renderer"] = d["renderer"]
    out.update(software=d["software"], extensions=d["extensions"])
    return out


def diagnose(backend: str | None = None, device: int | None = None) -> Diagnosis:
    """Everything doctor reports."""
    report = Diagnosis(
        list(backends.statuses(probe_contexts=True)),
        [_device_json(d) for d in backends.list_egl_devices()],
        backends.resolve_name(backend),
        probe.render_env(),
    )
    try:
        session = backends.open_session(backend, device=device, size=(64, 64))
    except BackendUnavailable as exc:
        report.error = str(exc)
        return report
    try:
        report.backend_used = session.backend
        gl = probe.gl_info(session.ctx)
        used = session.device if session.device is not None else 0
        for dev in report.egl_devices:
            if session.backend == "egl" and dev["index"] == used and not dev.get("renderer"):
                dev["renderer"] = gl.renderer  # EGL names no renderer for a device; GL does
        report.egl = backends.current_egl_info() if session.backend == "egl" else {}
        report.check = timer_query_reliability(session.ctx)
        report.timing = mode, _ = timers.choose_mode("auto", gl)
        if report.check.verdict == "unreliable":
            report.check = dataclasses.replace(
                report.check,
                note="software renderer: its timer queries stamp one 64x64 tile, not the draw; "
                "katra3d times it with glFinish (sync)"
                if mode == "sync"
                else "timer queries do not time the draw on this driver (GPU time far below wall "
                "time), yet auto picks gpu: run with --timing sync",
            )
        report.gl = gl
    finally:
        session.close()
    return report


def render_text(report: Diagnosis) -> str:
    lines = ["backends:"]
    for b in report.backends:
        lines.append(f"  {b.name:<5} {'ok' if b.available else 'unavailable: ' + b.why_not}")
    lines.append(
        f"  default: {report.default_backend}"
        + ("  (from $KATRA3D_BACKEND)" if report.env.get("KATRA3D_BACKEND") else "")
    )
    lines.append("EGL devices (--device N):")
    if not report.egl_devices:
        lines.append("  (none listed: EGL_EXT_device_enumeration missing)")
    for d in report.egl_devices:
        desc = d.get("renderer") or (
            "Mesa software device" if d["software"] else d.get("drm_device") or "device"
        )
        lines.append(
            f"  {d['index']}: {desc}" + (f" ({d['drm_device']})" if d.get("drm_device") else "")
        )
    gl = report.gl
    if gl is None:
        lines.append(f"no usable GL: {report.error or '?'}")
        return "\n".join(lines)
    drv = gl.driver
    lines += [
        f"GL ({report.backend_used}):",
        f"  vendor     {gl.vendor}",
        f"  renderer   {gl.renderer}" + ("  [software renderer]" if gl.software_renderer else ""),
        f"  version    {gl.version}  ({gl.profile} profile, GLSL {gl.glsl_version})",
        f"  driver     {drv.name} {drv.version}".rstrip(),
        f"  limits     max texture {gl.max_texture_size}, max samples {gl.max_samples}",
    ]
    if report.egl:
        lines.append(f"  EGL        {report.egl.get('vendor', '')} {report.egl.get('version', '')}")
    tq = gl.timer_query
    check = report.check
    lines.append(
        f"timer queries: {'supported' if tq.supported else 'not supported'}, "
        f"{tq.counter_bits} counter bits"
    )
    if check.ratio is not None:
        lines.append(
            f"  check: {check.draw}: GPU {format_ms(check.gpu_ms)} vs wall "
            f"{format_ms(check.wall_ms)} (ratio {check.ratio:.2f}) -> {check.verdict}"
        )
    else:
        lines.append(f"  check: {check.verdict}")
    if check.note:
        lines.append(f"  {check.note}")
    mode, reason = report.timing
    lines.append(f"recommended timing: {mode} ({reason})")
    if report.env:
        lines.append("rendering env: " + ", ".join(f"{k}={v}" for k, v in report.env.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = diagnose(args.backend, parse_int(args.device, "--device", 0))
    if args.json:
        print_json(report.as_dict())
    else:
        print(render_text(report))
    return ExitCode.OK if report.ok else ExitCode.ENVIRONMENT
