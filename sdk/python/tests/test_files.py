"""Files: text and bytes, stat, list, mkdir, move, remove, glob, grep,
pages; streaming upload and download (50 MiB in a fresh interpreter whose
peak RSS stays well under the file's size); directories as tar archives."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from typing import Iterator

from sbx import InvalidArgumentError, NotFoundError, StreamError

from .support import LiveTest

ALL_BYTES = bytes(range(256)) * 4
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


class FilesTest(LiveTest):
    def test_text_and_bytes(self) -> None:
        f = self.sb.files
        info = f.write_text("notes/hello.txt", "héllo\nwörld\n", mode=0o640)
        self.assertEqual(info.path, "/workspace/notes/hello.txt")
        self.assertEqual(info.mode, 0o640)
        self.assertEqual(info.size, len("héllo\nwörld\n".encode()))
        self.assertEqual(f.read_text("notes/hello.txt"), "héllo\nwörld\n")
        f.write_text("notes/hello.txt", "more\n", append=True)
        self.assertEqual(f.read_text("/workspace/notes/hello.txt"), "héllo\nwörld\nmore\n")

        f.write_bytes("bin/all.bin", ALL_BYTES)
        self.assertEqual(f.read_bytes("bin/all.bin"), ALL_BYTES)
        f.write_text("latin.txt", "café", encoding="latin-1")
        self.assertEqual(f.read_bytes("latin.txt"), b"caf\xe9")

        page = f.read_page("bin/all.bin", offset=250, limit=10)
        self.assertEqual(page.content, ALL_BYTES[250:260])
        self.assertEqual((page.offset, page.length, page.size, page.eof), (250, 10, len(ALL_BYTES), False))
        last = f.read_page("bin/all.bin", offset=len(ALL_BYTES) - 3)
        self.assertEqual(last.content, ALL_BYTES[-3:])
        self.assertTrue(last.eof)

    def test_tree_calls(self) -> None:
        f = self.sb.files
        d = f.mkdir("/workspace/tree/a/b")
        self.assertTrue(d.is_dir)
        f.write_text("tree/a/b/one.py", "def one():\n    return 1\n")
        f.write_text("tree/a/two.py", "def two():\n    return 2  # TODO\n")
        f.write_text("tree/readme.md", "todo: nothing\n")

        st = f.stat("tree/a/two.py")
        self.assertTrue(st.is_file)
        self.assertEqual(st.name, "two.py")
        self.assertTrue(f.exists("tree/a"))
        self.assertFalse(f.exists("tree/nope"))

        names = sorted(e.name for e in f.list("/workspace/tree"))
        self.assertEqual(names, ["a", "readme.md"])
        deep = sorted(e.path for e in f.list("/workspace/tree", depth=3))
        self.assertIn("/workspace/tree/a/b/one.py", deep)

        g = f.glob("**/*.py", path="/workspace/tree")
        self.assertEqual(sorted(g.paths), ["/workspace/tree/a/b/one.py", "/workspace/tree/a/two.py"])
        self.assertFalse(g.truncated)

        m = f.grep("def \\w+", path="/workspace/tree")
        self.assertEqual(sorted((x.path, x.line) for x in m.matches),
                         [("/workspace/tree/a/b/one.py", 1), ("/workspace/tree/a/two.py", 1)])
        m = f.grep("todo", path="/workspace/tree", ignore_case=True, include="*.py")
        self.assertEqual([(x.path, x.text.strip()) for x in m.matches], [("/workspace/tree/a/two.py", "return 2  # TODO")])
        m = f.grep("(", path="/workspace/tree", fixed=True)
        self.assertEqual(len(m.matches), 2)

        moved = f.move("tree/readme.md", "tree/a/README.md")
        self.assertEqual(moved.path, "/workspace/tree/a/README.md")
        self.assertFalse(f.exists("tree/readme.md"))

        f.remove("tree/a")
        self.assertFalse(f.exists("tree/a/b/one.py"))
        self.assertEqual(f.list("tree"), [])

    def test_missing_file(self) -> None:
        with self.assertRaises(NotFoundError) as cm:
            self.sb.files.stat("/workspace/does/not/exist")
        self.assertEqual(cm.exception.sandbox_id, self.sb.id)
        self.assertIn("/workspace/does/not/exist", str(cm.exception))
        with self.assertRaises(NotFoundError):
            self.sb.files.read_bytes("/workspace/does/not/exist")
        with self.assertRaises(NotFoundError):
            self.sb.files.download("/workspace/does/not/exist", io.BytesIO())

    def test_upload_download_forms(self) -> None:
        f = self.sb.files
        # From bytes, a file object and a generator; mode applied.
        f.upload("up/a.bin", ALL_BYTES, mode=0o600)
        self.assertEqual(f.read_bytes("up/a.bin"), ALL_BYTES)
        self.assertEqual(f.stat("up/a.bin").mode, 0o600)
        f.upload("up/b.bin", io.BytesIO(ALL_BYTES * 100), chunk_size=1000)
        self.assertEqual(f.read_bytes("up/b.bin"), ALL_BYTES * 100)

        def gen() -> Iterator[bytes]:
            for i in range(50):
                yield bytes([i]) * 4096

        info = f.upload("up/c.bin", gen())
        self.assertEqual(info.size, 50 * 4096)
        want = b"".join(bytes([i]) * 4096 for i in range(50))
        buf = io.BytesIO()
        self.assertEqual(f.download("up/c.bin", buf, chunk_size=1000), len(want))
        self.assertEqual(buf.getvalue(), want)
        with f.open_download("up/c.bin", chunk_size=4096) as d:
            self.assertEqual(d.size, len(want))
            chunks = list(d)
        self.assertEqual(b"".join(chunks), want)
        self.assertTrue(all(len(c) <= 4096 for c in chunks))
        f.upload("up/empty", b"")
        self.assertEqual(f.read_bytes("up/empty"), b"")

        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "local.bin")
            with open(local, "wb") as out:
                out.write(ALL_BYTES)
            os.chmod(local, 0o751)
            self.assertEqual(f.upload_file(local, "up/local.bin").mode, 0o751)
            back = os.path.join(tmp, "back.bin")
            self.assertEqual(f.download_file("up/local.bin", back), len(ALL_BYTES))
            with open(back, "rb") as got:
                self.assertEqual(got.read(), ALL_BYTES)
            with self.assertRaises(NotFoundError):
                f.download_file("up/none.bin", os.path.join(tmp, "none.bin"))
            self.assertFalse(os.path.exists(os.path.join(tmp, "none.bin")))

        with self.assertRaises(TypeError):
            f.upload("up/x", "a local path?")  # type: ignore[arg-type]

    def test_upload_iterator_failure_leaves_no_file(self) -> None:
        def broken() -> Iterator[bytes]:
            yield b"x" * 100000
            raise RuntimeError("the source broke")

        with self.assertRaises(RuntimeError):
            self.sb.files.upload("up/broken.bin", broken())
        self.assertEqual(self.sb.exec("ls /workspace/up/broken.bin").exit_code, 2)
        self.assertEqual(self.sb.exec("echo still-fine").stdout, b"still-fine\n")

    def test_streamed_50mib_bounded_memory(self) -> None:
        # A fresh interpreter uploads 50 MiB from a generator and downloads it
        # into a hashing sink; its peak RSS must stay well under the size.
        # The peak is the process's own high-water mark (VmHWM): ru_maxrss
        # of a child also counts the parent's memory it was forked from.
        size = 50 << 20
        script = r"""
import hashlib, json, os, resource, sys
from sbx import Sbx

def rss(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

size, chunk = int(sys.argv[2]), 1 << 20
c = Sbx()
sb = c.sandbox(sys.argv[1])
sb.files.write_bytes("/workspace/warm.bin", b"warm")  # a first call: connections and imports settle
base = rss("VmRSS")
up = hashlib.sha256()
def source():
    left = size
    while left:
        b = os.urandom(min(chunk, left))
        up.update(b)
        left -= len(b)
        yield b
info = sb.files.upload("/workspace/big.bin", source())
class Sink:
    def __init__(self):
        self.h, self.n = hashlib.sha256(), 0
    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return len(b)
sink = Sink()
n = sb.files.download("/workspace/big.bin", sink)
print(json.dumps({"size": info.size, "up": up.hexdigest(), "down": sink.h.hexdigest(), "n": n, "sink_n": sink.n,
                  "base_kib": base, "peak_kib": rss("VmHWM")}))
"""
        env = dict(os.environ)
        env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
        out = subprocess.run([sys.executable, "-c", script, self.sb.id, str(size)], env=env,
                             capture_output=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        r = json.loads(out.stdout)
        self.assertEqual((r["size"], r["n"], r["sink_n"]), (size, size, size))
        self.assertEqual(r["up"], r["down"])
        in_sandbox = self.sb.exec("sha256sum /workspace/big.bin").stdout.split()[0].decode()
        self.assertEqual(in_sandbox, r["up"])
        base, peak = r["base_kib"] * 1024, r["peak_kib"] * 1024
        print("\n50 MiB streamed up and down: peak RSS %.1f MiB, %.1f MiB before the transfer"
              % (peak / (1 << 20), base / (1 << 20)), file=sys.stderr)
        # The interpreter with http.client and ssl loaded (about 24 MiB) is
        # most of the peak; the transfer may add a few 1 MiB chunks, never
        # the file.
        self.assertLess(peak - base, size // 8, "the transfer grew the peak RSS by %d bytes" % (peak - base))
        self.assertLess(peak, size, "peak RSS %d bytes for a %d-byte transfer" % (peak, size))
        self.sb.files.remove("/workspace/big.bin")

    def test_archives(self) -> None:
        f = self.sb.files
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(os.path.join(src, "sub", "deeper"))
            with open(os.path.join(src, "top.txt"), "w") as w:
                w.write("top\n")
            with open(os.path.join(src, "sub", "deeper", "all.bin"), "wb") as wb:
                wb.write(ALL_BYTES)
            os.chmod(os.path.join(src, "sub", "deeper", "all.bin"), 0o700)
            os.symlink("top.txt", os.path.join(src, "link"))
            os.mkfifo(os.path.join(src, "fifo"))

            for gz in (False, True):
                with self.subTest(gzip=gz):
                    dst = "/workspace/arch-%s" % gz
                    res = f.upload_dir(src, dst, gzip=gz)
                    self.assertEqual(res.path, dst)
                    self.assertEqual(res.bytes, 4 + len(ALL_BYTES))
                    self.assertEqual(f.read_text(dst + "/top.txt"), "top\n")
                    self.assertEqual(f.read_bytes(dst + "/sub/deeper/all.bin"), ALL_BYTES)
                    self.assertEqual(f.stat(dst + "/sub/deeper/all.bin").mode, 0o700)
                    self.assertEqual(f.stat(dst + "/link").type, "symlink")
                    self.assertFalse(f.exists(dst + "/fifo"))

            # Down again: the raw tar, then extracted locally.
            buf = io.BytesIO()
            n = f.download_archive("/workspace/arch-False", buf)
            self.assertEqual(n, len(buf.getvalue()))
            buf.seek(0)
            with tarfile.open(fileobj=buf) as tf:
                names = {m.name.rstrip("/").lstrip("./") for m in tf.getmembers()}
            self.assertTrue({"top.txt", "sub/deeper/all.bin", "link"} <= names, names)
            gz = io.BytesIO()
            f.download_archive("/workspace/arch-False", gz, gzip=True)
            self.assertEqual(gz.getvalue()[:2], b"\x1f\x8b")

            out = os.path.join(tmp, "out")
            res2 = f.download_dir("/workspace/arch-False", out)
            with open(os.path.join(out, "sub", "deeper", "all.bin"), "rb") as rb:
                self.assertEqual(rb.read(), ALL_BYTES)
            with open(os.path.join(out, "top.txt")) as r:
                self.assertEqual(r.read(), "top\n")
            self.assertEqual(res2.bytes, 4 + len(ALL_BYTES))
            self.assertFalse(os.path.lexists(os.path.join(out, "link")))
            self.assertEqual([(s.name.lstrip("./"), s.type) for s in res2.skipped], [("link", "symlink")])
            with self.assertRaises(FileExistsError):
                f.download_dir("/workspace/arch-False", out)  # not empty

            # The sandbox's own archive rules apply to what is sent up.
            evil = io.BytesIO()
            with tarfile.open(fileobj=evil, mode="w") as tf:
                ti = tarfile.TarInfo("../escape.txt")
                ti.size = 3
                tf.addfile(ti, io.BytesIO(b"bad"))
            with self.assertRaises(InvalidArgumentError):
                f.upload_archive("/workspace/evil", evil.getvalue())
            self.assertFalse(f.exists("/workspace/escape.txt"))

        with self.assertRaises((NotFoundError, StreamError)):
            f.download_archive("/workspace/no-such-dir", io.BytesIO())
