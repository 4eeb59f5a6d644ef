"""Filesystems laptops use, mounted for real over a loop device: exFAT (exfat-fuse: case-insensitive
and case-preserving as APFS and NTFS are, refusing Windows' forbidden characters) and NTFS through
ntfs-3g with ``windows_names``. Needs root, /dev/fuse, losetup and the Debian packages exfat-fuse,
exfatprogs and ntfs-3g (.ci/run installs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.machine import cannot_run_here

# Each kind: the tools it needs, how to format an image, how to mount a device.
FILESYSTEMS = {
    "exfat": (
        ("mkfs.exfat", "mount.exfat-fuse"),
        ["mkfs.exfat", "{image}"],
        ["mount.exfat-fuse", "{device}", "{mount}"],
    ),
    "ntfs-windows-names": (
        ("mkntfs", "ntfs-3g"),
        ["mkntfs", "-F", "-Q", "-q", "{image}"],
        ["ntfs-3g", "-o", "windows_names", "{device}", "{mount}"],
    ),
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


def _why_not(tools: tuple[str, ...]) -> str | None:
    if os.geteuid() != 0:
        return "mounting a filesystem image needs root"
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing: no FUSE here"
    missing = [tool for tool in ("losetup", *tools) if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: exfat-fuse exfatprogs ntfs-3g)"
    return None


@contextlib.contextmanager
def mounted(kind: str, folder: Path, options: str | None = None) -> Iterator[Path]:
    """A freshly formatted filesystem of ``kind`` in ``folder``, mounted over a loop device (with the
    mount ``options`` given, if any); unmounted after. Where the machine cannot mount one, the test
    skips (fails under CI as root: tests/support/machine.py)."""
    tools, make, mount_command = FILESYSTEMS[kind]
    why = _why_not(tools)
    if why is not None:
        cannot_run_here(f"{kind}: {why}")
    image, point = folder / "fs.img", folder / "mnt"
    point.mkdir()
    with open(image, "wb") as out:
        out.truncate(256 << 20)
    made = _run(*(part.format(image=image) for part in make))
    if made.returncode != 0:
        cannot_run_here(f"{kind}: formatting failed: {made.stderr.strip()}")
    loop = _run("losetup", "-f", "--show", str(image))
    if loop.returncode != 0:
        cannot_run_here(f"{kind}: losetup failed: {loop.stderr.strip()}")
    device = loop.stdout.strip()
    tool, *rest = (part.format(device=device, mount=point) for part in mount_command)
    try:
        done = _run(tool, *([] if options is None else ["-o", options]), *rest)
        if done.returncode != 0:
            cannot_run_here(f"{kind}: mounting failed: {done.stderr.strip()}")
        try:
            yield point
        finally:
            # Lazily if need be: the test process may still hold a mirror's pack open.
            if _run("umount", str(point)).returncode != 0:
                _run("umount", "-l", str(point))
    finally:
        _run("losetup", "-d", device)
