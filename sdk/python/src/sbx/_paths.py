"""The API's paths, escaped."""

from __future__ import annotations

import urllib.parse


def q(s: str) -> str:
    """s escaped as one path segment."""
    return urllib.parse.quote(s, safe="")


def sandbox_path(sandbox_id: str) -> str:
    """The path of a sandbox."""
    return "/v1/sandboxes/" + q(sandbox_id)


def process_path(sandbox_id: str, process_id: str) -> str:
    """The path of one of a sandbox's processes."""
    return sandbox_path(sandbox_id) + "/processes/" + q(process_id)
