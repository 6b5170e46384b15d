"""Directories as tar streams: a local directory written as a tar one
chunk at a time (never held whole), and a tar stream extracted into a local
directory under conservative rules."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import IO, Iterator, List, Optional

from .models import SkippedEntry

__all__ = ["ExtractResult", "tar_directory", "extract_tar"]

_BLOCK = 512


@dataclass
class ExtractResult:
    """ExtractResult is what ``download_dir`` wrote locally."""

    path: str
    """The local destination directory."""
    entries: int = 0
    """Directories and files written."""
    bytes: int = 0
    """File content written."""
    skipped: List[SkippedEntry] = field(default_factory=list)
    """Entries left out (links, devices, unsafe names), with the reason."""


@dataclass
class TarStats:
    """TarStats counts what ``tar_directory`` wrote and left out."""

    entries: int = 0
    local_skipped: List[str] = field(default_factory=list)
    """Local paths left out: devices, FIFOs, sockets."""


def tar_directory(root: str, *, chunk_size: int = 1 << 20, gzip: bool = False, stats: Optional[TarStats] = None) -> Iterator[bytes]:
    """Yield the contents of local directory ``root`` as a tar archive (PAX
    format), one piece at a time: each file is read in ``chunk_size`` pieces
    as the archive is consumed. Names are relative to ``root``; directories,
    regular files and symbolic links are archived, other files left out
    (``stats.local_skipped``). ``gzip`` compresses the stream."""
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    st = stats if stats is not None else TarStats()
    raw = _tar_pieces(root, chunk_size, st)
    if not gzip:
        yield from raw
        return
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip container
    for piece in raw:
        out = z.compress(piece)
        if out:
            yield out
    yield z.flush()


def _tar_pieces(root: str, chunk_size: int, st: TarStats) -> Iterator[bytes]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        names = sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        # Symlinks to directories are archived as links, never followed.
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        if rel_dir != ".":
            yield from _entry(os.path.join(dirpath), rel_dir, chunk_size, st)
        for n in sorted(names):
            rel = n if rel_dir == "." else os.path.join(rel_dir, n)
            yield from _entry(os.path.join(dirpath, n), rel, chunk_size, st)
    yield b"\0" * (2 * _BLOCK)


def _entry(path: str, rel: str, chunk_size: int, st: TarStats) -> Iterator[bytes]:
    s = os.lstat(path)
    ti = tarfile.TarInfo(rel.replace(os.sep, "/"))
    ti.mode = stat.S_IMODE(s.st_mode)
    ti.mtime = int(s.st_mtime)
    if stat.S_ISDIR(s.st_mode):
        ti.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(s.st_mode):
        ti.type = tarfile.SYMTYPE
        ti.linkname = os.readlink(path)
    elif stat.S_ISREG(s.st_mode):
        ti.type = tarfile.REGTYPE
        ti.size = s.st_size
    else:
        st.local_skipped.append(path)
        return
    yield ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    st.entries += 1
    if ti.type != tarfile.REGTYPE:
        return
    left = ti.size
    with open(path, "rb") as f:
        while left > 0:
            b = f.read(min(chunk_size, left))
            if not b:
                raise OSError("%s shrank while it was archived (%d bytes missing)" % (path, left))
            left -= len(b)
            yield b
    pad = -ti.size % _BLOCK
    if pad:
        yield b"\0" * pad


def extract_tar(
    fileobj: IO[bytes],
    dest: str,
    *,
    max_bytes: int = 8 << 30,
    max_entries: int = 100000,
) -> ExtractResult:
    """Extract the tar (or tar.gz) stream ``fileobj`` into local directory
    ``dest``, which must not exist or be empty.

    Only directories and regular files are written, each strictly beneath
    ``dest`` (absolute names and ``..`` are refused; nothing is ever written
    through a link, since none is made), without special bits. Links,
    devices and FIFOs are left out and listed in ``skipped``. Past
    ``max_bytes`` of content or ``max_entries`` entries it fails. On any
    failure, what it wrote is removed.
    """
    made = not os.path.exists(dest)
    if not made:
        if not os.path.isdir(dest) or os.path.islink(dest):
            raise NotADirectoryError("%s exists and is not a directory" % dest)
        if os.listdir(dest):
            raise FileExistsError("%s is not empty" % dest)
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    res = ExtractResult(dest)
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tf:
            for m in tf:
                _extract_one(tf, m, root, res, max_bytes, max_entries)
    except BaseException:
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for n in os.listdir(dest):
                p = os.path.join(dest, n)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
        raise
    return res


def _kind(m: tarfile.TarInfo) -> str:
    if m.issym():
        return "symlink"
    if m.islnk():
        return "hardlink"
    if m.ischr():
        return "char device"
    if m.isblk():
        return "block device"
    if m.isfifo():
        return "fifo"
    return "type %r" % m.type.decode("latin-1")


def _extract_one(tf: tarfile.TarFile, m: tarfile.TarInfo, root: str, res: ExtractResult, max_bytes: int, max_entries: int) -> None:
    name = m.name
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if name in ("", "."):
        return  # the root itself
    parts = name.split("/")
    if name.startswith("/") or any(p in ("..", "") for p in parts):
        res.skipped.append(SkippedEntry(m.name, "file" if m.isfile() else _kind(m), "unsafe name"))
        return
    if not (m.isdir() or m.isfile()):
        res.skipped.append(SkippedEntry(m.name, _kind(m), "only directories and regular files are extracted"))
        return
    if res.entries + 1 > max_entries:
        raise ValueError("the archive has more than %d entries" % max_entries)
    target = os.path.join(root, *parts)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    real_parent = os.path.realpath(parent)
    if real_parent != root and not real_parent.startswith(root + os.sep):
        raise ValueError("%s would land outside %s" % (m.name, root))
    mode = stat.S_IMODE(m.mode) & 0o777
    if m.isdir():
        if os.path.lexists(target) and not os.path.isdir(target):
            raise FileExistsError("%s: a file of that name was extracted already" % m.name)
        os.makedirs(target, exist_ok=True)
        os.chmod(target, mode | 0o700)
        res.entries += 1
        return
    if res.bytes + m.size > max_bytes:
        raise ValueError("the archive holds more than %d bytes" % max_bytes)
    src = tf.extractfile(m)
    if src is None:  # pragma: no cover: a regular file always has content
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(target, mode)
    os.utime(target, (m.mtime, m.mtime))
    res.entries += 1
    res.bytes += m.size
