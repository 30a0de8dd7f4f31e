"""``katra3d doctor``: can this machine render, and how should it be timed?"""

from __future__ import annotations

import argparse
from typing import Any

from katra3d.harness.cli._common import print_json
from katra3d.harness.engine import timers
from katra3d.harness.engine.timer_check import timer_query_reliability
from katra3d.harness.gl import backends, probe
from katra3d.harness.run.config import parse_int
from katra_trace.errors import BackendUnavailable, ExitCode
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


def diagnose(backend: str | None = None, device: int | None = None) -> dict[str, Any]:
    """Everything doctor reports, JSON-ready."""
    report: dict[str, Any] = {
        "backends": [s.as_dict() for s in backends.statuses(probe_contexts=True)],
        # keys EGL cannot fill (Mesa's software device has no DRM node) are left out
        "egl_devices": [
            {k: v for k, v in d.items() if k != "extensions" and v != ""}
            | {"extensions": d["extensions"]}
            for d in backends.list_egl_devices()
        ],
        "default_backend": backends.resolve_name(backend),
        "env": probe.render_env(),
        "ok": False,
    }
    try:
        session = backends.open_session(backend, device=device, size=(64, 64))
    except BackendUnavailable as exc:
        report["error"] = str(exc)
        report["install_hint"] = backends.MESA_INSTALL_LINE
        return report
    try:
        report["backend_used"] = session.backend
        gl = probe.gl_info(session.ctx)
        report["gl"] = gl.as_dict()
        used = session.device if session.device is not None else 0
        for dev in report["egl_devices"]:
            if session.backend == "egl" and dev.get("index") == used and not dev.get("renderer"):
                dev["renderer"] = gl.renderer  # EGL names no renderer for a device; GL does
        report["egl"] = backends.current_egl_info() if session.backend == "egl" else {}
        report["timer_query_check"] = timer_query_reliability(session.ctx)
        verdict = report["timer_query_check"]["verdict"]
        mode, reason = timers.choose_mode("auto", gl)
        report["recommended_timing"] = {"mode": mode, "reason": reason, "auto_picks": mode}
        if verdict == "unreliable":
            report["timer_query_check"]["note"] = (
                "software renderer: its timer queries stamp one 64x64 tile, not the draw; katra3d "
                "times it with "
                "glFinish (sync)"
                if mode == "sync"
                else "timer queries do not time the draw on this driver (GPU time far below wall "
                "time), yet auto "
                "picks gpu: run with --timing sync"
            )
        report["ok"] = True
    finally:
        session.close()
    return report


def render_text(report: dict[str, Any]) -> str:
    lines = ["backends:"]
    for b in report["backends"]:
        lines.append(
            f"  {b['name']:<5} {'ok' if b['available'] else 'unavailable: ' + b['why_not']}"
        )
    default = report["default_backend"]
    lines.append(
        f"  default: {default}"
        + ("  (from $KATRA3D_BACKEND)" if report["env"].get("KATRA3D_BACKEND") else "")
    )
    lines.append("EGL devices (--device N):")
    if not report["egl_devices"]:
        lines.append("  (none listed: EGL_EXT_device_enumeration missing)")
    for d in report["egl_devices"]:
        desc = d.get("renderer") or (
            "Mesa software device" if d["software"] else d.get("drm_device") or "device"
        )
        lines.append(
            f"  {d['index']}: {desc}" + (f" ({d['drm_device']})" if d.get("drm_device") else "")
        )
    if not report["ok"]:
        lines.append(f"no usable GL: {report.get('error', '?')}")
        return "\n".join(lines)
    gl = report["gl"]
    drv = gl["driver"]
    lines += [
        f"GL ({report['backend_used']}):",
        f"  vendor     {gl['vendor']}",
        f"  renderer   {gl['renderer']}"
        + ("  [software renderer]" if gl["software_renderer"] else ""),
        f"  version    {gl['version']}  ({gl['profile']} profile, GLSL {gl['glsl_version']})",
        f"  driver     {drv['name']} {drv['version']}".rstrip(),
        f"  limits     max texture {gl['max_texture_size']}, max samples {gl['max_samples']}",
    ]
    if report.get("egl"):
        lines.append(
            f"  EGL        {report['egl'].get('vendor', '')} {report['egl'].get('version', '')}"
        )
    tq = gl["timer_query"]
    check = report["timer_query_check"]
    lines.append(
        f"timer queries: {'supported' if tq['supported'] else 'not supported'}, "
        f"{tq['counter_bits']} counter bits"
    )
    if "gpu_ms" in check:
        lines.append(
            f"  check: {check['draw']}: GPU {format_ms(check['gpu_ms'])} vs wall "
            f"{format_ms(check['wall_ms'])} (ratio {check['ratio']:.2f}) -> {check['verdict']}"
        )
    else:
        lines.append(f"  check: {check['verdict']}")
    if check.get("note"):
        lines.append(f"  {check['note']}")
    rec = report["recommended_timing"]
    lines.append(f"recommended timing: {rec['mode']} ({rec['reason']})")
    if report["env"]:
        lines.append("rendering env: " + ", ".join(f"{k}={v}" for k, v in report["env"].items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = diagnose(args.backend, parse_int(args.device, "--device", 0))
    if args.json:
        print_json(report)
    else:
        print(render_text(report))
    return ExitCode.OK if report["ok"] else ExitCode.ENVIRONMENT
