"""Assembling the self-contained page: template, stylesheet, script, charts and the embedded data."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from functools import cache
from html import escape
from importlib import resources
from typing import Any

from care_sdk.report.svg import histogram_svg, weights_bar_svg, weights_by_turn_svg

__all__ = ["embed_json", "render_html"]

_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def embed_json(value: Any) -> str:
    """JSON text that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e`` and ``\\u0026``, so no string in the
    data can close the script element (``</script>``) or open a comment (``<!--``); ``JSON.parse``
    reads the same value back.

    Examples:
        >>> embed_json({"reply": "</script><script>alert(1)</script>"})
        '{"reply":"\\\\u003c/script\\\\u003e\\\\u003cscript\\\\u003ealert(1)\\\\u003c/script\\\\u003e"}'
        >>> json.loads(embed_json(["<!--"])) == ["<!--"]
        True
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).translate(_JSON_ESCAPES)


@cache
def _asset(name: str) -> str:
    return resources.files("care_sdk.report").joinpath(name).read_text(encoding="utf-8")


def render_html(data: Mapping[str, Any], audit: str = "") -> str:
    """The report page for :func:`~care_sdk.report.report_data`'s mapping: one HTML document with its
    stylesheet, script, charts and data inline, and a content security policy that allows no network
    access and only the page's own script. ``audit`` is the training audit's section
    (:func:`care_sdk.report.audit.audit_html`), when there is one.

    Examples:
        >>> from care_sdk.report.data import report_data
        >>> page = render_html(report_data([{"id": "<b>x</b>", "turn": 1, "reward": 0.5}], title="<i>t</i>"))
        >>> page.startswith("<!DOCTYPE html>"), "<b>x</b>" in page, "&lt;i&gt;t&lt;/i&gt;" in page
        (True, False, True)
    """
    overview = data["overview"]
    nonce = secrets.token_urlsafe(18)
    parts = {
        "<!--care:title-->": escape(str(data.get("title", "CARE report"))),
        "<!--care:css-->": _asset("report.css"),
        "<!--care:histogram-->": histogram_svg(overview["histogram"]),
        "<!--care:weights-->": weights_bar_svg(overview["mean_weights"], data["dims"]),
        "<!--care:by-turn-->": weights_by_turn_svg(overview["weights_by_turn"], data["dims"]),
        "<!--care:js-->": _asset("report.js"),
        "<!--care:data-->": embed_json(data),
        "<!--care:audit-->": audit,
    }
    page = _asset("template.html").replace("script-src 'unsafe-inline'", f"script-src 'nonce-{nonce}'")
    page = page.replace("<script>", f'<script nonce="{nonce}">')
    # one pass over the template, so text inserted for one marker is never searched for another
    out: list[str] = []
    rest = page
    while True:
        start = rest.find("<!--care:")
        if start < 0:
            out.append(rest)
            break
        end = rest.index("-->", start) + 3
        out.append(rest[:start])
        out.append(parts[rest[start:end]])
        rest = rest[end:]
    return "".join(out)
