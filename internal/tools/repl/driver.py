"""The sbx REPL driver: one persistent Python session inside a sandbox.

The sbx daemon writes this file into the sandbox and runs it as
`python3 -u <this file>`. It then talks to it over the process's stdin and
stdout only (the sandbox has no network), one JSON object a line.

Requests, on stdin:
  {"type": "execute", "id": ID, "code": CODE, "env": {K: V}, "stream": B, "rich": B}
      env is set in os.environ for this cell only; stream asks for the
      cell's output as it is written (output responses); rich for the rich
      representations of the value, display() calls and figures (data and
      displays in the result) instead of images
  {"type": "ping", "id": ID}
  {"type": "llm_answer", "qid": QID, "text": TEXT}  or  {..., "error": WHY}
Responses, on the original stdout, each line starting with SENTINEL so that
nothing else can pass for one:
  {"type": "ready", "protocol": 1, "python": "3.11.2", "pid": N}
  {"type": "fatal", "message": WHY}          the session cannot run; exits
  {"type": "pong", "id": ID, "busy": B, "cell": ID, "execution_count": N, ...}
  {"type": "result", "id": ID, "stdout": ..., "stderr": ..., "value": ...,
   "error": {"name", "value", "traceback"}, "images": [{"png", "svg"}],
   "final": ..., "execution_count": N, "duration_ms": N, "truncated": B,
   "data": BUNDLE, "displays": [BUNDLE]}      (rich: BUNDLE maps MIME types to data)
  {"type": "output", "id": ID, "stream": "stdout"|"stderr", "text": ...}
      (stream: a cell's output while it runs, all of it before its result)
  {"type": "llm_query", "id": CELL_ID, "qid": QID, "prompt": ..., "system": ...}
  {"type": "error", "id": ID, "message": WHY}  a request it could not handle

Everything a cell writes, at the Python level or at the fd level (a
subprocess's output), goes to fds 1 and 2, which are pipes this driver reads:
the protocol uses private duplicates of the original stdin and stdout that no
child process inherits. Only the standard library is used, and only syntax
that Python 3.9 parses (no f-strings, so that an older python3 still gets as
far as saying it is too old).
"""

import sys

SENTINEL = "\x1esbx-repl "
PROTOCOL = 2

if sys.version_info < (3, 9):
    import json as _json

    sys.stdout.write(SENTINEL + _json.dumps({
        "type": "fatal",
        "message": "the REPL needs Python 3.9 or newer; python3 in this sandbox is %d.%d.%d" % tuple(sys.version_info[:3]),
    }) + "\n")
    sys.stdout.flush()
    sys.exit(3)

import ast  # noqa: E402
import base64  # noqa: E402
import builtins  # noqa: E402
import codecs  # noqa: E402
import faulthandler  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

# What one result may carry: an endless print costs neither memory nor a
# result too large for the daemon's output log.
STREAM_CAP = 1 << 20  # bytes of stdout, and as many of stderr (head + tail)
VALUE_CAP = 100000  # characters of the last expression's repr
TRACEBACK_CAP = 100000  # characters of a traceback
IMAGES_CAP = 4 << 20  # characters of all images of one cell (base64 + SVG)
SVG_CAP = 1 << 20  # a larger SVG is left out; its PNG stays
RICH_CAP = 4 << 20  # characters of all rich representations of one cell but text/plain (figures included)
LIVE_CAP = 8 << 20  # bytes of stdout, and as many of stderr, streamed for one cell
LIVE_EVERY = 0.05  # seconds between two output responses of one stream: output is sent in batches

DRIVER_FILE = globals().get("__file__", "<sbx-repl>")  # run by exec(): "<sbx-repl>"


def _cap_text(text, cap, what):
    """text cut to about cap characters, head and tail kept; and whether it was cut."""
    if len(text) <= cap:
        return text, False
    half = cap // 2
    return "%s\n[sbx: %d characters of this %s omitted]\n%s" % (
        text[:half], len(text) - 2 * half, what, text[-half:]), True


def mask_sigint():
    """Blocks SIGINT in the calling (helper) thread.

    The kernel gives a process's signal to any thread that does not block it;
    one taken by a helper thread runs Python's handler only once the main
    thread next runs bytecode, so a cell asleep in the main thread (time.sleep,
    a read) would not be interrupted until it woke by itself.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


class Channel:
    """The protocol: requests from in_fd, responses to out_fd.

    Both are private duplicates of the process's original stdin and stdout,
    not inheritable, so a cell's children can neither read the daemon's
    requests nor write into the response stream.
    """

    def __init__(self, in_fd, out_fd):
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.buf = bytearray()
        self.eof = False
        self.lock = threading.Lock()

    def send(self, msg):
        line = SENTINEL + json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n"
        data = memoryview(line.encode("utf-8", "backslashreplace"))
        with self.lock:
            while data:
                n = os.write(self.out_fd, data)
                data = data[n:]

    def recv(self):
        """The next request, or None once the daemon closed stdin.

        Reads with os.read on a private buffer, so that a KeyboardInterrupt
        raised while waiting (in llm_query) loses no request.
        """
        while True:
            i = self.buf.find(b"\n")
            if i < 0 and self.eof and self.buf:
                i = len(self.buf)
                self.buf += b"\n"
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                if line.strip():
                    return self.decode(line)
                continue
            if self.eof:
                return None
            chunk = os.read(self.in_fd, 1 << 16)
            if chunk:
                self.buf += chunk
            else:
                self.eof = True

    @staticmethod
    def decode(line):
        try:
            msg = json.loads(line.decode("utf-8", "replace"))
        except ValueError as e:
            return {"type": "invalid", "why": "not JSON: %s" % e}
        if not isinstance(msg, dict):
            return {"type": "invalid", "why": "not a JSON object"}
        return msg


class Capture:
    """Collects what is written to fd 1 or fd 2 through a pipe.

    A thread reads the pipe all the time and keeps a head and a tail of at
    most STREAM_CAP bytes in all, so neither a cell that prints without end
    nor a child left running fills memory or the sandbox's disk. A cell's
    end is a mark written into the same pipe: all that was written before it
    belongs to that cell. The mark carries a secret so that no output can
    forge one.

    While a cell that asked for it runs (live), what is kept is also sent as
    output responses, in batches (LIVE_EVERY), up to LIVE_CAP bytes; the
    last batch goes out before the cell's result.
    """

    def __init__(self, fd, secret, chan, name):
        self.fd = fd
        self.name = name
        self.chan = chan
        self.mark = b"\x1esbx-mark:" + secret + b":"
        self.r, self.w = os.pipe()
        self.cond = threading.Condition()
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.done = {}
        self.stream = None
        # The live view: guarded by cond, but for decoder, which send_lock
        # guards; send_lock is held from taking a batch to sending it, so
        # that no batch is sent after the cell's last one.
        self.send_lock = threading.Lock()
        self.live_id = None  # the cell whose output is streamed
        self.live = bytearray()  # kept, not yet sent
        self.live_left = 0  # bytes that may still be streamed
        self.live_dropped = 0
        self.live_held = False  # live starts with a partial line held back once
        self.decoder = None
        threading.Thread(target=self.pump, name="sbx-capture-%d" % fd, daemon=True).start()
        threading.Thread(target=self.streamer, name="sbx-stream-%d" % fd, daemon=True).start()

    def attach(self):
        """Points fd and sys.stdout or sys.stderr at the pipe, again: a cell may have closed or replaced them."""
        os.dup2(self.w, self.fd)
        if self.stream is None or self.stream.closed:
            raw = io.FileIO(self.fd, "w", closefd=False)
            self.stream = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace",
                                           line_buffering=True, write_through=True)
        return self.stream

    def pump(self):
        mask_sigint()
        pending = bytearray()
        while True:
            try:
                chunk = os.read(self.r, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            self.scan(pending)

    def scan(self, pending):
        """Moves pending output into the capture, up to any mark, which ends a cell's share."""
        while True:
            i = pending.find(self.mark)
            if i < 0:
                # The last bytes may be the start of a mark: keep them back,
                # and nothing else (the mark holds one \x1e, its first byte).
                cut = len(pending)
                j = pending.rfind(b"\x1e", max(0, len(pending) - len(self.mark) + 1))
                if j >= 0 and self.mark.startswith(bytes(pending[j:])):
                    cut = j
                self.keep(pending[:cut])
                del pending[:cut]
                return
            j = pending.find(b"\x1e", i + len(self.mark))
            if j < 0:
                self.keep(pending[:i])
                del pending[:i]
                return
            token = bytes(pending[i + len(self.mark):j])
            self.keep(pending[:i])
            del pending[:j + 1]
            self.finish(token)

    def keep(self, data):
        if not data:
            return
        with self.cond:
            if self.live_id is not None:
                take = data[:max(0, self.live_left - len(self.live))]
                self.live += take
                self.live_dropped += len(data) - len(take)
                if take:
                    self.cond.notify_all()
            self.total += len(data)
            room = STREAM_CAP // 2 - len(self.head)
            if room > 0:
                self.head += data[:room]
                data = data[room:]
            if data:
                self.tail += data
                if len(self.tail) > STREAM_CAP:
                    del self.tail[:len(self.tail) - STREAM_CAP // 2]

    def finish(self, token):
        with self.cond:
            self.done[token] = (bytes(self.head), bytes(self.tail[-(STREAM_CAP // 2):]), self.total)
            self.head, self.tail, self.total = bytearray(), bytearray(), 0
            self.cond.notify_all()

    def collect(self, token):
        """The text written since the previous collect, and whether some was left out.

        The live view of the cell, if any, is complete and sent when this returns.
        """
        mark = self.mark + token + b"\x1e"
        view = memoryview(mark)
        while view:
            view = view[os.write(self.w, view):]
        with self.cond:
            got = self.cond.wait_for(lambda: token in self.done, timeout=30)
            if got:
                head, tail, total = self.done.pop(token)
        self.flush_live(final=True)
        if not got:
            return "[sbx: the output of this cell could not be collected]\n", True
        return self.text(head, tail, total)

    def live_begin(self, rid):
        """Starts streaming what is written to the cell rid."""
        with self.send_lock:
            self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
            with self.cond:
                self.live_id, self.live, self.live_left, self.live_dropped = rid, bytearray(), LIVE_CAP, 0
                self.live_held = False

    def streamer(self):
        mask_sigint()
        while True:
            with self.cond:
                self.cond.wait_for(lambda: len(self.live) > 0)
            self.flush_live(final=False)
            time.sleep(LIVE_EVERY)

    def flush_live(self, final):
        """Sends what the live view holds; final ends the view, saying what did not fit.

        A partial line at the end waits for one batch more, so that a line
        written in pieces (print writes its end apart) mostly comes whole.
        """
        with self.send_lock:
            with self.cond:
                rid, data, dropped = self.live_id, bytes(self.live), self.live_dropped
                self.live = bytearray()
                cut = data.rfind(b"\n") + 1
                if not final and cut < len(data) and not self.live_held:
                    self.live, data, self.live_held = bytearray(data[cut:]), data[:cut], True
                else:
                    self.live_held = False
                self.live_left -= len(data)
                if final:
                    self.live_id = None
            if rid is None:
                return
            text = self.decoder.decode(data, final)
            if final and dropped:
                text += "\n[sbx: %d more bytes of this cell's %s were not streamed: a cell streams at most %d bytes of each]\n" % (
                    dropped, self.name, LIVE_CAP)
            if text:
                self.chan.send({"type": "output", "id": rid, "stream": self.name, "text": text})

    @staticmethod
    def text(head, tail, total):
        if total <= len(head) + len(tail):
            return (head + tail).decode("utf-8", "replace"), False
        # Cut at character boundaries: no half character at either side of the notice.
        front = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False)
        start = 0
        while start < len(tail) and start < 3 and (tail[start] & 0xC0) == 0x80:
            start += 1
        omitted = total - len(head) - len(tail)
        notice = "\n[sbx: output truncated: %d bytes omitted here, %d bytes in all]\n" % (omitted, total)
        return front + notice + tail[start:].decode("utf-8", "replace"), True


class Preview(str):
    """A str that shows as itself, not quoted, when it is a cell's value."""

    __slots__ = ()

    def __repr__(self):
        return str.__str__(self)


def _positive_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, got %s" % (name, type(value).__name__))
    if value < minimum:
        raise ValueError("%s must be >= %d, got %d" % (name, minimum, value))
    return value


def _as_path(obj, want_dir=True):
    """The path obj names when it is an existing file (or directory), else None."""
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if not isinstance(obj, str) or not obj or len(obj) > 4096 or "\n" in obj or "\x00" in obj:
        return None
    try:
        if os.path.isfile(obj) or (want_dir and os.path.isdir(obj)):
            return obj
    except (OSError, ValueError):
        pass
    return None


def _cut(text, n):
    return text if len(text) <= n else text[:n - 1] + "\u2026"


def _peek_file(path, n):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(min(size, 4 * n + 4))
    if b"\x00" in raw[:8192]:
        shown = raw[:min(n, 512)]
        return "binary file %s, %d bytes (first %d shown):\n%r" % (path, size, len(shown), shown)
    text = raw.decode("utf-8", "replace")
    if len(text) <= n and len(raw) == size:
        return "file %s, %d bytes:\n%s" % (path, size, text)
    shown = text[:n]
    rest = size - len(shown.encode("utf-8", "replace"))
    return "file %s, %d bytes (first %d chars shown):\n%s\n[... about %d more bytes]" % (path, size, n, shown, rest)


def _peek_dir(path, n):
    names = sorted(os.listdir(path))
    lines, used = [], 0
    for name in names:
        if used >= n:
            break
        entry = name + ("/" if os.path.isdir(os.path.join(path, name)) else "")
        lines.append(entry)
        used += len(entry) + 1
    more = "\n[... %d more entries]" % (len(names) - len(lines)) if len(lines) < len(names) else ""
    return "directory %s, %d entries:\n%s%s" % (path, len(names), "\n".join(lines), more)


def _peek_items(kind, count, pairs, n):
    """pairs yields (label, item) lazily, so a huge collection is not walked."""
    lines, used = [], 0
    for label, item in pairs:
        if used >= n or len(lines) >= 100:
            break
        line = "%s %s" % (label, _cut(repr(item), 200))
        lines.append(line)
        used += len(line) + 1
    shown = " (first %d shown)" % len(lines) if len(lines) < count else ""
    return "%s, %d items%s:\n%s" % (kind, count, shown, "\n".join(lines))


def peek(obj, n=2000):
    """A preview of obj in about n characters, to look at large data without printing it all.

    str and bytes: the first n characters and the total length. list, tuple,
    set and dict: the length and the first items. A str (or path object) that
    names an existing file: the file's size and first n characters; a
    directory: its entries. Anything else: its type, length if it has one,
    and the head of its repr. The preview shows as plain text when it is a
    cell's value, and print(peek(x)) prints it.
    """
    _positive_int("peek: n", n, 1)
    kind = type(obj).__name__
    path = _as_path(obj)
    if path is not None:
        return Preview(_peek_file(path, n) if os.path.isfile(path) else _peek_dir(path, n))
    if isinstance(obj, str):
        if len(obj) <= n:
            return Preview("%s, %d chars:\n%s" % (kind, len(obj), obj))
        return Preview("%s, %d chars (first %d shown):\n%s\n[... %d more chars]" % (kind, len(obj), n, obj[:n], len(obj) - n))
    if isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj[:n])
        shown = " (first %d shown)" % n if len(obj) > n else ""
        return Preview("%s, %d bytes%s:\n%r" % (kind, len(obj), shown, data))
    if isinstance(obj, dict):
        return Preview(_peek_items(kind, len(obj), ((repr(k) + ":", v) for k, v in obj.items()), n))
    if isinstance(obj, (list, tuple, range)):
        return Preview(_peek_items(kind, len(obj), (("[%d]" % i, obj[i]) for i in range(len(obj))), n))
    if isinstance(obj, (set, frozenset)):
        return Preview(_peek_items(kind, len(obj), (("-", v) for v in obj), n))
    text = repr(obj)
    size = ""
    try:
        size = ", len %d" % len(obj)
    except Exception:
        pass
    if len(text) <= n:
        return Preview("%s%s:\n%s" % (kind, size, text))
    return Preview("%s%s (first %d of %d repr chars shown):\n%s" % (kind, size, n, len(text), text[:n]))


def _lines_of(source):
    path = _as_path(source, want_dir=False)
    if path is not None:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    if isinstance(source, str):
        return source.splitlines()
    if isinstance(source, (bytes, bytearray)):
        return bytes(source).decode("utf-8", "replace").splitlines()
    if isinstance(source, (list, tuple)):
        return [item if isinstance(item, str) else str(item) for item in source]
    raise TypeError("grep: text_or_var must be a str, bytes, a list of str or the path of a text file, got %s"
                    % type(source).__name__)


def grep(pattern, text_or_var, context=0, ignore_case=False):
    """The lines of text_or_var that match the regular expression pattern, as (lineno, line) pairs.

    text_or_var is a str (split into lines), bytes (UTF-8), a list or tuple
    of str (one line each) or the path of a text file. Line numbers count
    from 1. context adds that many lines before and after each match. Prints
    nothing: look at the returned list, or peek() at it.
    """
    _positive_int("grep: context", context, 0)
    flags = re.IGNORECASE if ignore_case else 0
    if isinstance(pattern, re.Pattern):
        rx = re.compile(pattern.pattern, pattern.flags | flags) if flags else pattern
    elif isinstance(pattern, str):
        try:
            rx = re.compile(pattern, flags)
        except re.error as e:
            raise ValueError("grep: bad regular expression %r: %s" % (pattern, e)) from None
    else:
        raise TypeError("grep: pattern must be a str or a compiled regular expression, got %s" % type(pattern).__name__)
    lines = _lines_of(text_or_var)
    hits = [i for i, line in enumerate(lines) if rx.search(line)]
    if context:
        keep = set()
        for i in hits:
            keep.update(range(max(0, i - context), min(len(lines), i + context + 1)))
        hits = sorted(keep)
    return [(i + 1, lines[i]) for i in hits]


def chunk_indices(length, size, overlap=0):
    """(start, end) pairs that cover range(length) in windows of size items, each overlapping the previous by overlap.

    length may also be a sized object (a str, a list): its len() is used.
    The last window ends at length; chunk_indices(0, size) is [].
    """
    if not isinstance(length, int) and hasattr(length, "__len__"):
        length = len(length)
    _positive_int("chunk_indices: length", length, 0)
    _positive_int("chunk_indices: size", size, 1)
    _positive_int("chunk_indices: overlap", overlap, 0)
    if overlap >= size:
        raise ValueError("chunk_indices: overlap must be smaller than size (%d), got %d" % (size, overlap))
    out, start = [], 0
    while start < length:
        end = min(start + size, length)
        out.append((start, end))
        if end == length:
            break
        start += size - overlap
    return out


def _final_text(value):
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


class Session:
    """The interpreter state of one REPL: its namespace, counters and the cell that runs."""

    def __init__(self, chan, out, err):
        self.chan = chan
        self.out = out
        self.err = err
        self.count = 0
        self.marks = 0
        self.cell = None  # id of the cell being run
        self.in_cell = False  # SIGINT interrupts only user code
        self.final = None
        self.queries = 0
        self.deferred = []  # requests read while a cell waited for an llm answer
        self.rich = False  # the cell asked for rich representations
        self.displays = []  # its display() calls' bundles, in order
        self.rich_used = 0  # characters of them, against RICH_CAP
        self.rich_cut = False
        self.ns = self.namespace()

    def namespace(self):
        """A fresh __main__ module holding the helpers: cells run in its dict, and pickle finds their classes there."""
        mod = types.ModuleType("__main__")
        mod.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = mod
        session = self

        def llm_query(prompt, system=None):
            """Asks the language model configured on the sbx daemon and returns its reply text.

            prompt is the user message; system, if given, the system message.
            Blocks until the answer comes; raises RuntimeError when the daemon
            has no model endpoint or the call failed.
            """
            return session.llm_query(prompt, system)

        def FINAL(value):
            """Marks value as the final answer: the result of this cell carries it as `final`.

            A str is taken as is; anything else as JSON if it can be, else its
            repr. A later call in the same cell replaces it.
            """
            session.final = _final_text(value)

        def display(*objs):
            """Shows each object as a cell's output, as Jupyter's display() does.

            Clients that read rich output get each object's representations
            (HTML, Markdown, PNG, SVG, LaTeX, JSON: its _repr_*_ methods),
            in order, before the cell's value; others see its repr printed.
            """
            session.display(objs)

        mod.__dict__.update(peek=peek, grep=grep, chunk_indices=chunk_indices, llm_query=llm_query, FINAL=FINAL,
                            display=display)
        return mod.__dict__

    def on_sigint(self, signum, frame):
        if self.in_cell:
            raise KeyboardInterrupt

    def serve(self):
        while True:
            msg = self.deferred.pop(0) if self.deferred else self.chan.recv()
            if msg is None:
                shutdown()
            try:
                self.handle(msg)
            except Exception:
                self.chan.send({"type": "error", "id": msg.get("id"),
                                "message": "the REPL driver failed: " + traceback.format_exc()})

    def handle(self, msg):
        kind = msg.get("type")
        if kind == "execute":
            self.execute(msg)
        elif kind == "ping":
            self.chan.send(self.pong(msg.get("id"), False))
        elif kind == "llm_answer":
            pass  # for a query that was interrupted: nobody waits for it
        elif kind == "invalid":
            self.chan.send({"type": "error", "id": None, "message": "bad request: " + msg.get("why", "")})
        else:
            self.chan.send({"type": "error", "id": msg.get("id"), "message": "unknown request type %r" % (kind,)})

    def pong(self, rid, busy):
        return {"type": "pong", "id": rid, "busy": busy, "cell": self.cell if busy else None,
                "protocol": PROTOCOL, "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
                "execution_count": self.count}

    def execute(self, req):
        rid, code, env = req.get("id"), req.get("code"), req.get("env") or {}
        if not isinstance(code, str):
            self.chan.send({"type": "error", "id": rid, "message": "execute: code must be a string"})
            return
        why = _env_problem(env)
        if why:
            self.chan.send({"type": "error", "id": rid, "message": "execute: env: " + why})
            return
        began = time.monotonic()
        self.begin(rid, bool(req.get("stream")), bool(req.get("rich")))
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        value, data, error, images, cut = None, None, None, [], False
        try:
            if code.strip():
                self.count += 1
                ok, got = self.guarded(lambda: self.run(code, "<cell-%d>" % self.count))
                if ok:
                    value, data, cut = got
                else:
                    error = self.describe(got)
                ok, got = self.guarded(self.figures)
                if ok:
                    images, dropped = got
                    cut = cut or dropped
                elif error is None:
                    error = self.describe(got)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.cell = None
        stdout, out_cut, stderr, err_cut = self.end()
        result = {"type": "result", "id": rid, "stdout": stdout, "stderr": stderr,
                  "execution_count": self.count, "duration_ms": int((time.monotonic() - began) * 1000),
                  "truncated": cut or out_cut or err_cut or self.rich_cut}
        if value is not None:
            result["value"] = value
        if data is not None:
            result["data"] = data
        if error is not None:
            result["error"] = error
            result["truncated"] = result["truncated"] or error.pop("cut")
        if self.rich:
            if self.displays:
                result["displays"] = self.displays
        elif images:
            result["images"] = images
        if self.final is not None:
            result["final"] = self.final
        self.displays, self.rich = [], False
        self.chan.send(result)

    def begin(self, rid, stream, rich):
        self.cell, self.final, self.queries = rid, None, 0
        self.rich, self.displays, self.rich_used, self.rich_cut = rich, [], 0, False
        if stream:
            self.out.live_begin(rid)
            self.err.live_begin(rid)
        sys.stdout = self.out.attach()
        sys.stderr = self.err.attach()
        # A cell may have replaced the handler; the next one is interruptible again.
        signal.signal(signal.SIGINT, self.on_sigint)

    def end(self):
        for stream in (sys.stdout, sys.stderr, self.out.stream, self.err.stream):
            try:
                stream.flush()
            except Exception:
                pass
        self.marks += 1
        token = str(self.marks).encode()
        stdout, out_cut = self.out.collect(token)
        stderr, err_cut = self.err.collect(token)
        return stdout, out_cut, stderr, err_cut

    def guarded(self, fn):
        """Runs fn with SIGINT armed: (True, its value) or (False, the exception it raised).

        The outer try catches a KeyboardInterrupt that lands in the inner
        handler itself, before in_cell is cleared.
        """
        try:
            self.in_cell = True
            try:
                return True, fn()
            except BaseException as e:
                return False, e
            finally:
                self.in_cell = False
        except KeyboardInterrupt as e:
            return False, e

    def run(self, code, filename):
        """Runs a cell like Jupyter: the value of a last expression statement as its repr (None: no value), its rich
        bundle when the cell is rich (else None), and whether the repr was cut."""
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), self.ns)
        if last is None:
            return None, None, False
        value = eval(compile(last, filename, "eval"), self.ns)
        if value is None:
            return None, None, False
        self.ns["_"] = value
        text, cut = _cap_text(repr(value), VALUE_CAP, "value")
        data = None
        if self.rich:
            data = self.bundle(value)
            data["text/plain"] = text
        return text, data, cut

    def display(self, objs):
        for obj in objs:
            if not self.rich:
                print(repr(obj))
                continue
            data = self.bundle(obj)
            data["text/plain"], cut = _cap_text(repr(obj), VALUE_CAP, "value")
            self.rich_cut = self.rich_cut or cut
            self.displays.append(data)

    def bundle(self, obj):
        """obj's representations but text/plain, by MIME type, as IPython's display formatter finds them, within what
        is left of RICH_CAP."""
        data = {}
        for mime, value in _representations(obj):
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
            if self.rich_used + size > RICH_CAP:
                print("[sbx: the %s representation of a %s was left out: the rich output of one cell is limited to "
                      "%d characters]" % (mime, type(obj).__name__, RICH_CAP), file=sys.stderr)
                self.rich_cut = True
                continue
            self.rich_used += size
            data[mime] = value
        return data

    def figures(self):
        """The matplotlib figures left open, as PNG (base64) and SVG, then closed. Never imports matplotlib itself."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return [], False
        images, used, dropped = [], 0, 0
        for num in list(plt.get_fignums()):
            fig = plt.figure(num)
            try:
                if self.rich:
                    self.display([fig])
                    continue
                png = base64.b64encode(_render(fig, "png")).decode("ascii")
                if used + len(png) > IMAGES_CAP:
                    dropped += 1
                    continue
                image = {"png": png}
                used += len(png)
                svg = _render(fig, "svg").decode("utf-8", "replace")
                if len(svg) <= SVG_CAP and used + len(svg) <= IMAGES_CAP:
                    image["svg"] = svg
                    used += len(svg)
                images.append(image)
            except Exception as e:
                print("[sbx: figure %s could not be rendered: %s: %s]" % (num, type(e).__name__, e), file=sys.stderr)
            finally:
                plt.close(fig)
        if dropped:
            print("[sbx: %d figure(s) left out: the images of one cell are limited to %d bytes]"
                  % (dropped, IMAGES_CAP), file=sys.stderr)
        return images, dropped > 0

    def describe(self, exc):
        """exc as the result's error: name, value and a traceback without the driver's own frames."""
        try:
            value = str(exc)
        except Exception:
            value = "<unprintable %s>" % type(exc).__name__
        try:
            te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
            _strip_driver_frames(te)
            text = "".join(te.format())
        except Exception:
            text = "".join(traceback.format_exception_only(type(exc), exc))
        text, cut = _cap_text(text, TRACEBACK_CAP, "traceback")
        return {"name": type(exc).__name__, "value": value, "traceback": text, "cut": cut}

    def llm_query(self, prompt, system):
        if not isinstance(prompt, str):
            raise TypeError("llm_query: prompt must be a str, got %s" % type(prompt).__name__)
        if system is not None and not isinstance(system, str):
            raise TypeError("llm_query: system must be a str or None, got %s" % type(system).__name__)
        if not self.in_cell or threading.current_thread() is not threading.main_thread():
            raise RuntimeError("llm_query: call it from the cell itself, not from a thread or between cells")
        self.queries += 1
        qid = "%s/%d" % (self.cell, self.queries)
        query = {"type": "llm_query", "id": self.cell, "qid": qid, "prompt": prompt, "system": system}
        self.chan.send(query)
        while True:
            msg = self.chan.recv()
            if msg is None:
                raise RuntimeError("llm_query: the sbx daemon closed the session's input")
            kind = msg.get("type")
            if kind == "llm_answer":
                if msg.get("qid") != qid:
                    continue  # the answer to an interrupted query
                if msg.get("error") is not None:
                    raise RuntimeError("llm_query: %s" % msg["error"])
                text = msg.get("text")
                return text if isinstance(text, str) else ""
            if kind == "ping":
                # A daemon that lost track (it restarted): say where we are, then ask again.
                self.chan.send(self.pong(msg.get("id"), True))
                self.chan.send(query)
                continue
            self.deferred.append(msg)


def _env_problem(env):
    """Why env cannot be set in os.environ, or None."""
    if not isinstance(env, dict):
        return "must be an object of strings"
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return "must be an object of strings"
        if not k or "=" in k or "\x00" in k:
            return "bad variable name %r" % k[:80]
        if "\x00" in v:
            return "the value of %s holds a NUL byte" % k[:80]
    return None


# The _repr_*_ methods IPython's display formatter calls, by the MIME type of what they return.
_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
_BINARY = ("image/png", "image/jpeg", "application/pdf")


def _repr_method(obj, name):
    """obj's method name, as IPython looks it up: not on classes, nor on objects that make up any attribute."""
    if isinstance(obj, type):
        return None
    try:
        if getattr(obj, "_ipython_canary_method_should_not_exist_", None) is not None:
            return None
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _mime_value(mime, value):
    """value as it goes on the wire: binary formats as base64, JSON as itself, the rest as text; None if it cannot."""
    if isinstance(value, tuple) and value:  # (data, metadata)
        value = value[0]
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value)
        if mime in _BINARY:
            return base64.b64encode(value).decode("ascii")
        return value.decode("utf-8", "replace")
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return None
        return value
    return value if isinstance(value, str) else None


def _is_figure(obj):
    return type(obj).__name__ == "Figure" and type(obj).__module__.startswith("matplotlib") and hasattr(obj, "savefig")


def _representations(obj):
    """(MIME type, data) of obj's rich representations, text/plain aside: its _repr_mimebundle_, then its _repr_*_
    methods; a matplotlib figure as PNG and SVG. A method that fails is said on stderr and skipped."""
    out = {}
    method = _repr_method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            got = method(include=None, exclude=None)
            if isinstance(got, tuple) and got:
                got = got[0]
            if isinstance(got, dict):
                for mime, value in got.items():
                    if isinstance(mime, str) and mime != "text/plain":
                        value = _mime_value(mime, value)
                        if value is not None:
                            out[mime] = value
        except Exception as e:
            print("[sbx: %s._repr_mimebundle_ failed: %s: %s]" % (type(obj).__name__, type(e).__name__, e), file=sys.stderr)
    for mime, name in _REPR_METHODS:
        if mime in out:
            continue
        method = _repr_method(obj, name)
        if method is None:
            continue
        try:
            value = _mime_value(mime, method())
        except Exception as e:
            print("[sbx: %s.%s failed: %s: %s]" % (type(obj).__name__, name, type(e).__name__, e), file=sys.stderr)
            continue
        if value is not None:
            out[mime] = value
    if _is_figure(obj):
        try:
            out.setdefault("image/png", base64.b64encode(_render(obj, "png")).decode("ascii"))
            svg = _render(obj, "svg").decode("utf-8", "replace")
            if len(svg) <= SVG_CAP:
                out.setdefault("image/svg+xml", svg)
        except Exception as e:
            print("[sbx: a figure could not be rendered: %s: %s]" % (type(e).__name__, e), file=sys.stderr)
    return list(out.items())


def _strip_driver_frames(te, seen=None):
    """Leaves in te, and in the exceptions chained to it, the frames from the first cell's on, less this file's.

    The user sees the cell and what it called, not how the driver (or ast.parse,
    for a SyntaxError) got there.
    """
    seen = seen if seen is not None else set()
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if f.filename.startswith("<cell-")), len(frames))
    te.stack = traceback.StackSummary.from_list([f for f in frames[first:] if f.filename != DRIVER_FILE])
    _strip_driver_frames(te.__cause__, seen)
    _strip_driver_frames(te.__context__, seen)


def _render(fig, fmt):
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()


def shutdown():
    """Ends the process at once: threads a cell left running must not keep it alive."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)


_keep = []  # faulthandler's file, which must live as long as the process, and the protocol's output fd


def setup():
    """Moves the protocol to private fds and points fds 0, 1 and 2 where cells may use them."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    proto_in, proto_out, diag = os.dup(0), os.dup(1), os.dup(2)
    chan = Channel(proto_in, proto_out)
    # A crash of the interpreter is still told on the original stderr, the
    # daemon's log of this process.
    diag_file = os.fdopen(diag, "w")
    _keep.extend((diag_file, proto_out))
    faulthandler.enable(file=diag_file, all_threads=True)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull, "r")
    secret = os.urandom(8).hex().encode()
    out, err = Capture(1, secret, chan, "stdout"), Capture(2, secret, chan, "stderr")
    sys.stdout, sys.stderr = out.attach(), err.attach()
    sys.argv = [""]
    sys.path[0] = ""
    # Agg's show() does nothing; the figures are returned at the cell's end.
    warnings.filterwarnings("ignore", message=".*(non-GUI backend|non-interactive).*")
    return chan, out, err


def main():
    try:
        chan, out, err = setup()
        session = Session(chan, out, err)
        signal.signal(signal.SIGINT, session.on_sigint)
    except Exception:
        # setup() may have moved fd 1 already: write to the original stdout's duplicate if there is one.
        fd = _keep[1] if len(_keep) > 1 else 1
        os.write(fd, (SENTINEL + json.dumps({"type": "fatal", "message": "the REPL driver could not start: "
                                             + traceback.format_exc()}) + "\n").encode())
        os._exit(3)
    chan.send({"type": "ready", "protocol": PROTOCOL, "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
               "pid": os.getpid()})
    session.serve()


if __name__ == "__main__":
    main()
