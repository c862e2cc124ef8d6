"""Markdown of an item's body as safe HTML for the dashboard's Read tab (issue 31, DT-8).

Rendered on the server so the page's CSP stays strict (no script of ours parses Markdown)
and the page inserts one sanitized fragment:

* ``markdown-it-py`` (CommonMark, tables, strikethrough) with ``html`` off: raw HTML in a
  note is shown as text, never parsed, so a ``<script>`` or an ``onerror=`` stays visible
  text. Its link validator already refuses ``javascript:``, ``vbscript:``, ``file:`` and
  ``data:`` targets.
* Images are never loaded: an image renders as its alt text in a marked span, so no request
  leaves the machine (the CSP's ``img-src 'self'`` would block a remote one anyway).
* ``[[Title]]`` and ``[[Title|label]]`` wikilinks become ``#item=ID`` links when a title
  matches an item exactly, or a marked span when nothing matches. Only text tokens are
  rewritten, so a wikilink inside code stays code.
* Table alignment is dropped (it would be an inline ``style``, which the CSP refuses).
* ``nh3`` (Ammonia) then sanitizes the result against a small allowlist of tags, attributes
  and URL schemes (http, https, mailto, and in-page ``#`` links): defence in depth, should
  the renderer ever emit something unexpected.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

__all__ = ["render", "wikilink_titles", "WIKILINK"]

WIKILINK = re.compile(r"\[\[([^\[\]|\n]{1,200})(?:\|([^\[\]\n]{1,200}))?\]\]")

_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "span", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title", "class"}, "span": {"class", "title"}, "ol": {"start"}}
_SCHEMES = {"http", "https", "mailto"}


def wikilink_titles(text: str) -> list[str]:
    """The distinct titles ``[[...]]`` names in ``text``, in order of first use."""
    seen: dict[str, None] = {}
    for match in WIKILINK.finditer(text):
        seen.setdefault(_name(match.group(1)), None)
    return [t for t in seen if t]


def _name(target: str) -> str:
    """``Title#Heading`` names the item ``Title`` (the heading is a place in it)."""
    return target.split("#", 1)[0].strip()


def _image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    alt = "".join(child.content for child in (tokens[idx].children or []))
    return f'<span class="md-image">[image: {_escape(alt or "no description")}]</span>'


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _wikilink_rule(resolve: Mapping[str, str]) -> Callable[[StateCore], None]:
    def rule(state: StateCore) -> None:
        for block in state.tokens:
            if block.type != "inline" or not block.children:
                continue
            out: list[Token] = []
            for tok in block.children:
                if tok.type != "text" or "[[" not in tok.content:
                    out.append(tok)
                    continue
                at = 0
                for match in WIKILINK.finditer(tok.content):
                    if match.start() > at:
                        out.append(_text(tok.content[at : match.start()]))
                    title = _name(match.group(1))
                    label = (match.group(2) or match.group(1)).strip()
                    target = resolve.get(title)
                    if target is not None:
                        link = Token("link_open", "a", 1)
                        link.attrs = {"href": "#item=" + target, "class": "wikilink", "title": title}
                        out.extend([link, _text(label), Token("link_close", "a", -1)])
                    else:
                        span = Token("html_inline", "", 0)
                        span.content = f'<span class="wikilink missing" title="No item has this title">{_escape(label)}</span>'
                        out.append(span)
                    at = match.end()
                if at < len(tok.content):
                    out.append(_text(tok.content[at:]))
            block.children = out

    return rule


def _text(content: str) -> Token:
    tok = Token("text", "", 0)
    tok.content = content
    return tok


def render(text: str, resolve: Mapping[str, str]) -> str:
    """``text`` as sanitized HTML; ``resolve`` maps an exact title to an item ID."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _image)
    md.core.ruler.push("wikilinks", _wikilink_rule(resolve))
    html = md.render(text)
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel="noopener noreferrer",
        strip_comments=True,
    )
