"""A sandbox's files: the JSON calls (read, write, stat, list, mkdir, move,
remove, glob, grep) and streaming transfer (upload, download, tar archives)
that never holds a file whole."""

from __future__ import annotations

import base64
import http.client
import io
import os
from typing import IO, TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Union

from ._archive import ExtractResult, extract_tar, tar_directory
from ._paths import sandbox_path
from ._transport import Body, Response
from .errors import NotFoundError, StreamError
from .models import ArchiveResult, FileContent, FileInfo, GlobResult, GrepResult

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Files", "Download", "Source"]

Source = Union[bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]
"""What an upload reads: bytes, a binary file object, or an iterable of
bytes (a generator, say)."""

_CHUNK = 1 << 20


def _mode(mode: Optional[int]) -> Optional[str]:
    return None if mode is None else "%04o" % mode


def _source(source: Source, chunk_size: int) -> Body:
    """The request body of an upload: bytes as they are, anything else as
    an iterator of chunks, read as it is sent."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, str):
        raise TypeError("upload takes bytes, a binary file or an iterable of bytes; use upload_file for a local path, write_text for text")
    read = getattr(source, "read", None)
    if read is not None:
        return _read_chunks(read, chunk_size)
    return _checked(source)


def _read_chunks(read: Any, chunk_size: int) -> Iterator[bytes]:
    while True:
        b = read(chunk_size)
        if not b:
            return
        if isinstance(b, str):
            raise TypeError("upload needs a binary file (opened with 'rb'), not a text one")
        yield b


def _checked(it: Iterable[bytes]) -> Iterator[bytes]:
    for b in it:
        if not isinstance(b, (bytes, bytearray, memoryview)):
            raise TypeError("upload's iterable must yield bytes, not %s" % type(b).__name__)
        yield bytes(b)


class Download:
    """Download is a file (or archive) being read from a sandbox, a chunk at
    a time: iterate it for chunks, or ``read`` it like a binary file. Close
    it (or use it as a context manager) when done.

    A body shorter than announced, or an archive the sandbox could not
    finish, raises StreamError rather than ending quietly.
    """

    def __init__(self, resp: Response, sandbox: "Sandbox", op: str, chunk_size: int = _CHUNK) -> None:
        self._resp: Optional[Response] = resp
        self._sandbox = sandbox
        self._op = op
        self._chunk = chunk_size
        self.size: Optional[int] = resp.content_length
        """The length the daemon announced, or None (archives)."""
        self.read_bytes = 0
        """Bytes read so far."""

    def read(self, n: int = -1) -> bytes:
        """Read up to n bytes (the rest when n < 0); b"" at the end."""
        if self._resp is None:
            return b""
        if n < 0:
            parts: List[bytes] = []
            while True:
                b = self.read(self._chunk)
                if not b:
                    return b"".join(parts)
                parts.append(b)
        try:
            b = self._resp.read(n) if n else b""
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise self._sandbox.client._t.failure(e, self._op, self._sandbox.id) from e
        self.read_bytes += len(b)
        if n and not b:
            self.close()
            if self.size is not None and self.read_bytes != self.size:
                raise StreamError(
                    "%s %s: the body ended after %d of %d bytes" % (self._op, self._sandbox.id, self.read_bytes, self.size),
                    code="unavailable", op=self._op, sandbox_id=self._sandbox.id,
                )
        return b

    def readable(self) -> bool:
        """True: a Download is a readable binary stream."""
        return True

    def __iter__(self) -> Iterator[bytes]:
        while True:
            b = self.read(self._chunk)
            if not b:
                return
            yield b

    def copy_to(self, dest: IO[bytes]) -> int:
        """Write the rest into binary file ``dest``; return the bytes
        written."""
        n = 0
        for b in self:
            dest.write(b)
            n += len(b)
        return n

    def close(self) -> None:
        """Drop the connection."""
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()

    def __enter__(self) -> "Download":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Files:
    """Files are a sandbox's file calls (``sandbox.files``). Relative paths
    are relative to ``/workspace``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, what: str) -> str:
        return sandbox_path(self._sb.id) + "/files" + what

    def _call(self, method: str, what: str, op: str, **kw: Any) -> Any:
        return self._sb.client._call(method, self._path(what), op=op, sandbox_id=self._sb.id, **kw)

    # --- whole files, small ones through JSON

    def read_page(self, path: str, offset: int = 0, limit: Optional[int] = None) -> FileContent:
        """Read one page of a file: at most ``limit`` bytes (default the
        daemon's) from ``offset``; ``eof`` says whether it reached the end."""
        q = [("path", path)]
        if offset:
            q.append(("offset", str(offset)))
        if limit is not None:
            q.append(("limit", str(limit)))
        return FileContent.from_json(self._call("GET", "/read", "read_file", query=q))

    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file, exactly (streamed down; for a large
        file prefer ``download`` into a local file)."""
        with self.open_download(path) as d:
            return d.read()

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole content of a text file, decoded."""
        return self.read_bytes(path).decode(encoding, errors)

    def write_bytes(self, path: str, data: Union[bytes, bytearray, memoryview], *, mode: Optional[int] = None, append: bool = False) -> FileInfo:
        """Write ``data`` to ``path`` (replacing it, or after it when
        ``append``), creating parent directories; ``mode`` is the
        permission bits (0o644). Sent in one JSON body: for large files use
        ``upload``."""
        body: Dict[str, Any] = {"path": path, "content_base64": base64.b64encode(bytes(data)).decode("ascii")}
        return self._write(body, mode, append)

    def write_text(self, path: str, text: str, *, mode: Optional[int] = None, append: bool = False, encoding: str = "utf-8") -> FileInfo:
        """Write ``text`` to ``path``, encoded; as ``write_bytes``."""
        if encoding.lower().replace("-", "") in ("utf8",):
            return self._write({"path": path, "content": text}, mode, append)
        return self.write_bytes(path, text.encode(encoding), mode=mode, append=append)

    def _write(self, body: Dict[str, Any], mode: Optional[int], append: bool) -> FileInfo:
        if mode is not None:
            body["mode"] = _mode(mode)
        if append:
            body["append"] = True
        return FileInfo.from_json(self._call("PUT", "/write", "write_file", json_body=body))

    # --- the file tree

    def stat(self, path: str) -> FileInfo:
        """Describe ``path`` (a symlink itself, not its target)."""
        return FileInfo.from_json(self._call("GET", "/stat", "stat", query=[("path", path)]))

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        try:
            self.stat(path)
        except NotFoundError:
            return False
        return True

    def list(self, path: str = "/workspace", depth: int = 1) -> List[FileInfo]:
        """The entries of directory ``path``, ``depth`` levels deep."""
        q = [("path", path)]
        if depth != 1:
            q.append(("depth", str(depth)))
        d = self._call("GET", "/list", "list_dir", query=q)
        return [FileInfo.from_json(e) for e in d.get("entries") or []]

    def mkdir(self, path: str) -> FileInfo:
        """Make directory ``path`` and its parents (no error if it exists)."""
        return FileInfo.from_json(self._call("POST", "/mkdir", "make_dir", json_body={"path": path}))

    def move(self, source: str, destination: str) -> FileInfo:
        """Move (rename) ``source`` to ``destination``."""
        body = {"source": source, "destination": destination}
        return FileInfo.from_json(self._call("POST", "/move", "move", json_body=body))

    def remove(self, path: str) -> None:
        """Remove ``path``, a directory with everything in it."""
        self._call("DELETE", "", "remove", query=[("path", path)])

    def glob(self, pattern: str, path: Optional[str] = None, limit: Optional[int] = None) -> GlobResult:
        """Paths matching glob ``pattern`` (``**`` for any depth) under
        ``path`` (default ``/workspace``)."""
        q = [("pattern", pattern)]
        if path is not None:
            q.append(("path", path))
        if limit is not None:
            q.append(("limit", str(limit)))
        return GlobResult.from_json(self._call("GET", "/glob", "glob", query=q))

    def grep(
        self,
        pattern: str,
        path: Optional[str] = None,
        *,
        include: Optional[str] = None,
        ignore_case: bool = False,
        fixed: bool = False,
        limit: Optional[int] = None,
    ) -> GrepResult:
        """Lines matching regular expression ``pattern`` (RE2; a literal
        string when ``fixed``) in ``path`` (a file or a directory searched
        recursively; default ``/workspace``), only in files whose name
        matches glob ``include`` when given."""
        q = [("pattern", pattern)]
        if path is not None:
            q.append(("path", path))
        if include is not None:
            q.append(("include", include))
        if ignore_case:
            q.append(("ignore_case", "true"))
        if fixed:
            q.append(("fixed", "true"))
        if limit is not None:
            q.append(("limit", str(limit)))
        return GrepResult.from_json(self._call("GET", "/grep", "grep", query=q))

    # --- streaming transfer

    def upload(self, path: str, source: Source, *, mode: Optional[int] = None, chunk_size: int = _CHUNK) -> FileInfo:
        """Stream ``source`` into ``path`` (replacing it, creating parent
        directories) and describe the result. A file object is read
        ``chunk_size`` bytes at a time, and an iterable one item at a time,
        each sent as it is read (chunked transfer): memory stays bounded
        whatever the size."""
        q = [("path", path)]
        if mode is not None:
            q.append(("mode", _mode(mode) or ""))
        d = self._sb.client._call("PUT", self._path("/upload"), op="upload", sandbox_id=self._sb.id, query=q,
                                  body=_source(source, chunk_size), timeout=self._sb.client._wait_timeout(None))
        return FileInfo.from_json(d)

    def upload_file(self, local_path: str, path: str, *, mode: Optional[int] = None) -> FileInfo:
        """Stream local file ``local_path`` into ``path``; ``mode`` defaults
        to the local file's permission bits."""
        if mode is None:
            mode = os.stat(local_path).st_mode & 0o7777
        with open(local_path, "rb") as f:
            return self.upload(path, f, mode=mode)

    def open_download(self, path: str, *, chunk_size: int = _CHUNK) -> Download:
        """Open ``path`` for streaming down: a Download to read or iterate."""
        resp = self._sb.client._request("GET", self._path("/download"), op="download", sandbox_id=self._sb.id,
                                        query=[("path", path)], timeout=self._sb.client._wait_timeout(None))
        return Download(resp, self._sb, "download", chunk_size)

    def download(self, path: str, dest: IO[bytes], *, chunk_size: int = _CHUNK) -> int:
        """Stream ``path`` into binary file object ``dest``, ``chunk_size``
        bytes at a time; return the bytes written."""
        with self.open_download(path, chunk_size=chunk_size) as d:
            return d.copy_to(dest)

    def download_file(self, path: str, local_path: str) -> int:
        """Stream ``path`` into local file ``local_path`` (replaced); return
        the bytes written. A failed download removes the partial file."""
        try:
            with open(local_path, "wb") as f:
                return self.download(path, f)
        except BaseException:
            try:
                os.unlink(local_path)
            except OSError:
                pass
            raise

    # --- directories as tar archives

    def upload_archive(
        self,
        path: str,
        source: Source,
        *,
        max_bytes: Optional[int] = None,
        max_entries: Optional[int] = None,
        chunk_size: int = _CHUNK,
    ) -> ArchiveResult:
        """Stream a tar or tar.gz archive into directory ``path`` (made when
        missing), where the sandbox extracts it under its archive rules;
        ``max_bytes``/``max_entries`` may lower the sandbox's caps."""
        q = [("path", path)]
        if max_bytes is not None:
            q.append(("max_bytes", str(max_bytes)))
        if max_entries is not None:
            q.append(("max_entries", str(max_entries)))
        d = self._sb.client._call("PUT", self._path("/archive"), op="upload_archive", sandbox_id=self._sb.id, query=q,
                                  body=_source(source, chunk_size), content_type="application/x-tar",
                                  timeout=self._sb.client._wait_timeout(None))
        return ArchiveResult.from_json(d)

    def open_archive(self, path: str, *, gzip: bool = False, chunk_size: int = _CHUNK) -> Download:
        """Open directory ``path`` as a tar stream (gzip-compressed in the
        sandbox when ``gzip``): a Download to read or iterate."""
        q = [("path", path)]
        if gzip:
            q.append(("gzip", "true"))
        resp = self._sb.client._request("GET", self._path("/archive"), op="download_archive", sandbox_id=self._sb.id,
                                        query=q, timeout=self._sb.client._wait_timeout(None))
        return Download(resp, self._sb, "download_archive", chunk_size)

    def download_archive(self, path: str, dest: IO[bytes], *, gzip: bool = False) -> int:
        """Stream directory ``path`` as a tar archive into binary file
        object ``dest``; return the bytes written."""
        with self.open_archive(path, gzip=gzip) as d:
            return d.copy_to(dest)

    def upload_dir(
        self,
        local_dir: str,
        path: str,
        *,
        gzip: bool = False,
        max_bytes: Optional[int] = None,
        max_entries: Optional[int] = None,
    ) -> ArchiveResult:
        """Copy local directory ``local_dir``'s contents into directory
        ``path`` of the sandbox, as a tar archive made while it is sent
        (never held whole). Directories, regular files and symlinks go;
        devices, FIFOs and sockets are left out. ``gzip`` compresses on
        the wire."""
        return self.upload_archive(path, tar_directory(local_dir, gzip=gzip),
                                   max_bytes=max_bytes, max_entries=max_entries)

    def download_dir(self, path: str, local_dir: str, *, max_bytes: int = 8 << 30, max_entries: int = 100000) -> ExtractResult:
        """Copy directory ``path`` of the sandbox into local directory
        ``local_dir`` (which must not exist or be empty), streamed as a tar
        archive and extracted as it arrives: directories and regular files
        only, never outside ``local_dir`` (see ``ExtractResult.skipped``).
        A failed copy removes what it wrote."""
        with self.open_archive(path) as d:
            return extract_tar(io.BufferedReader(_Reader(d), 1 << 16), local_dir, max_bytes=max_bytes, max_entries=max_entries)


class _Reader(io.RawIOBase):
    """A Download as the binary file tarfile reads."""

    def __init__(self, d: Download) -> None:
        super().__init__()
        self._d = d

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._d.read(len(b))
        n = len(data)
        b[:n] = data
        return n
