"""The input rule (katra_trace/io/inputs.py): every file katra3d reads is refused in one line,
before anything is read, when it is not a regular file or is one of the kernel's (no GL)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from katra3d.harness.bisect.state import Bisection
from katra_trace.errors import ConfigError
from katra_trace.io.inputs import open_regular
from katra_trace.io.tracesets import read_ab_manifest

KERNEL = (
    "/proc/self/pagemap",
    "/proc/kmsg",
    "/proc/version",
    "/sys/kernel/mm/transparent_hugepage/enabled",
)


@pytest.mark.parametrize("target", KERNEL)
def test_a_link_to_a_kernel_file_is_refused_unread(tmp_path: Path, target: str) -> None:
    if not os.path.exists(target):
        pytest.skip(f"no {target} here")
    link = tmp_path / "x.trace"
    link.symlink_to(target)
    root = "/" + target.split("/")[1]
    with pytest.raises(
        ConfigError, match=rf"is not a regular file \(a file of the kernel under {root}\)"
    ):
        open_regular(link)


def test_the_manifests_and_the_bisection_file_follow_the_rule(tmp_path: Path) -> None:
    (tmp_path / "ab.json").symlink_to("/proc/self/pagemap")
    with pytest.raises(
        ConfigError, match=r"ab\.json' is not a regular file \(a file of the kernel"
    ):
        read_ab_manifest(tmp_path)
    (tmp_path / "bisect.json").symlink_to("/proc/self/pagemap")
    with pytest.raises(ConfigError, match=r"bisect\.json' is not a regular file"):
        Bisection.load(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match=r"a pipe or FIFO"):
        open_regular(tmp_path / "fifo")
    (tmp_path / "ok.trace").write_bytes(b"at")
    with open_regular(tmp_path / "ok.trace") as f:
        assert f.read() == b"at"
