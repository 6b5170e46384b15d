"""Finding the daemon as the sbx CLI does: SBX_URL and SBX_API_KEY, else the
local data directory's socket and admin.key."""

from __future__ import annotations

import os
import tempfile
from typing import Mapping, Optional, Tuple

from . import errors


def data_dir(env: Mapping[str, str], euid: int) -> str:
    """The local daemon's data directory, as ``sbx serve`` defaults it:
    SBX_DATA_DIR, else /var/lib/sbx as root, else $XDG_STATE_HOME/sbx, else
    ~/.local/state/sbx."""
    d = env.get("SBX_DATA_DIR")
    if d:
        return d
    if euid == 0:
        return "/var/lib/sbx"
    x = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(x):
        return os.path.join(x, "sbx")
    h = env.get("HOME")
    if h:
        return os.path.join(h, ".local", "state", "sbx")
    return os.path.join(tempfile.gettempdir(), "sbx-%d" % euid)


def resolve(url: Optional[str], api_key: Optional[str], env: Mapping[str, str], euid: int) -> Tuple[str, Optional[str], str]:
    """Return the daemon's URL, the API key and where they came from."""
    if url:
        return url, api_key if api_key is not None else (env.get("SBX_API_KEY") or None), "the url argument"
    if env.get("SBX_URL"):
        return env["SBX_URL"], api_key if api_key is not None else (env.get("SBX_API_KEY") or None), "SBX_URL"
    d = data_dir(env, euid)
    sock = os.path.join(d, "sbx.sock")
    source = "the data dir %s; SBX_URL is not set" % d
    if not os.path.exists(sock):
        raise errors.DaemonUnreachableError(
            "cannot reach the sbx daemon at unix:%s (from %s): no socket there; start one with "
            "`sbx serve` (or `make run`), or set SBX_URL and SBX_API_KEY" % (sock, source),
            code="unavailable", op="connect",
        )
    key = api_key if api_key is not None else env.get("SBX_API_KEY")
    if not key:
        path = os.path.join(d, "admin.key")
        try:
            with open(path, encoding="utf-8") as f:
                key = f.read().strip()
        except PermissionError:
            raise errors.UnauthenticatedError(
                "reading %s: permission denied; run as the user that started `sbx serve`, or set SBX_API_KEY" % path,
                op="connect",
            ) from None
        except OSError as e:
            raise errors.UnauthenticatedError("reading the API key: %s; set SBX_API_KEY" % e, op="connect") from None
    return "unix:" + sock, key, source
