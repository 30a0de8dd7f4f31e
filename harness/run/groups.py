"""A child's process group, stopped as one: katra3d's children lead groups of their own (capture
commands, the replayer, the X server it starts), so that stopping one stops everything it started,
and nothing is left behind.

:func:`stop_group` ends a group: SIGTERM, time for the whole group (not just its leader) to end, a
second SIGTERM (a ``katra3d run``'s stop-now), then SIGKILL. :class:`ProcessGroup` is the same in
steps, for a parent that forwards its own stop signals as they come
(:mod:`katra3d.harness.versions.command`). :func:`own_group` is the ``preexec_fn`` of a child that
leads a group in katra3d's session and dies with katra3d.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from katra3d.harness.run.lifetime import die_with_parent

#: Seconds the group then has after a second SIGTERM, a run's stop-now (the frame in progress ends
#: and the run's keeper finishes the trace within ``harness.engine.stopping.HARD_STOP_GRACE_S``, 1
#: s; a counted run's child then has callgrind's last dump to write), before whatever is left gets
#: SIGKILL.
HARD_STOP_WAIT_S = 5.0
#: Seconds to wait for a SIGKILLed group to be gone (the kernel ends it; its members' parents reap
#: them).
KILL_WAIT_S = 5.0
#: Seconds between two looks at whether a stopped group is gone.
POLL_S = 0.05


#: How far a capture's group has been stopped: asked to stop at its next frame boundary (SIGTERM),
#: to stop now (a second SIGTERM), killed (SIGKILL).
STOP_FIRST, STOP_NOW, STOP_KILL = 1, 2, 3


class ProcessGroup:
    """The process group that ``proc`` leads (a capture command's shell, a replayer, an X server),
    and how far it has been stopped."""

    def __init__(self, proc: subprocess.Popen[Any]) -> None:
        self.proc = proc
        self.sent = 0

    def send(self, level: int) -> None:
        """Stop the group to ``level`` unless it has been stopped as far already: SIGTERM for
        :data:`STOP_FIRST` and :data:`STOP_NOW` (a run's first and second stop signal), SIGKILL for
        :data:`STOP_KILL`. Never raises."""
        if self.sent >= level:
            return
        # first: a signal handler that runs meanwhile sees it, and sends nothing twice
        self.sent = level
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL if level >= STOP_KILL else signal.SIGTERM)

    def gone(self) -> bool:
        """Whether the whole group has ended: its shell reaped and no process left in it that still
        runs (the group's ID stays taken while it has a member, so no other process can have it; a
        member that has ended but waits for its new parent, often init, to reap it is gone:
        :func:`runs_in_group`)."""
        if self.proc.poll() is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return not runs_in_group(self.proc.pid)

    def wait_gone(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for :meth:`gone`; whether it is."""
        deadline = time.monotonic() + timeout_s
        while not self.gone():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def end(self, grace_s: float) -> None:
        """End the group: with ``grace_s``, SIGTERM (unless sent already), up to ``grace_s`` for the
        whole group to end, a second SIGTERM and :data:`HARD_STOP_WAIT_S` more, then SIGKILL;
        without, SIGKILL at once. Returns once the group is gone (or :data:`KILL_WAIT_S` after its
        SIGKILL); never raises."""
        if grace_s > 0:
            self.send(STOP_FIRST)
            if self.wait_gone(grace_s):
                return
            self.send(STOP_NOW)
            if self.wait_gone(HARD_STOP_WAIT_S):
                return
        self.send(STOP_KILL)
        self.wait_gone(KILL_WAIT_S)


def runs_in_group(pgid: int) -> bool:
    """Whether a process of the group ``pgid`` still runs (is not a zombie), by ``/proc``; True
    where it cannot be told."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state, _ppid, pgrp = f.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state != b"Z":
            return True
    return False


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """End the process group that ``proc`` leads so that a ``katra3d run`` in it finishes its trace:
    SIGTERM; up to ``grace_s`` for the whole group (not just ``proc``) to end; a second SIGTERM (a
    run's stop-now) and :data:`HARD_STOP_WAIT_S` more; then SIGKILL to whatever is left. ``grace_s``
    0: SIGKILL at once. Never raises."""
    ProcessGroup(proc).end(grace_s)


def own_group() -> Callable[[], None]:
    """A ``preexec_fn``: the child leads a process group of its own (stopped as one with
    :func:`stop_group`) in katra3d's session, and dies with katra3d. Not a session of its own: under
    Linux's autogroup scheduling a session is a scheduling group, which a loaded machine shares out
    apart from the session that started it (measured: a replayer in a new session ran at 0.75 of the
    frame rate of one in katra3d's, bench/replay.py)."""
    die = die_with_parent()

    def preexec() -> None:
        os.setpgid(0, 0)
        if die is not None:
            die()

    return preexec


__all__ = [
    "HARD_STOP_WAIT_S",
    "KILL_WAIT_S",
    "POLL_S",
    "STOP_FIRST",
    "STOP_KILL",
    "STOP_NOW",
    "ProcessGroup",
    "own_group",
    "runs_in_group",
    "stop_group",
]
