"""The operator console over plain HTTP, against a real `memvault serve`: sessions, headers, CSRF, bounds, escaping."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_support import (
    ACME,
    ADMIN_TOKEN,
    INJECTION_DIGEST,
    NARROW_TOKEN,
    OTHER,
    OTHER_DIGEST,
    OTHER_SECRET,
    SUBJECT,
    SUBJECT_DIGEST,
    XSS_LINES,
    copy_digests,
    csrf_of,
    documents_of,
    login,
    start_console_service,
)
from httpremote_support import ServerProcess

from memvault_http_remote.console import CONTENT_SECURITY_POLICY

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

#: Every page that shows memory or state, for workspace ``{ws}``.
PAGES = (
    "/console/workspaces",
    "/console/health",
    "/console/w/{ws}",
    "/console/w/{ws}/doc?agent=support&label=AGENT.md",
    "/console/w/{ws}/search?agent=support&q=tea",
    "/console/w/{ws}/quarantine",
    "/console/w/{ws}/quarantine/{digest}",
    "/console/w/{ws}/erase",
)
#: Every state-changing action, for workspace ``{ws}``: (path, form fields besides the CSRF token).
ACTIONS = (
    ("/console/w/{ws}/quarantine/{digest}/delete", {}),
    ("/console/w/{ws}/erase", {"subject": SUBJECT}),
)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_console_service(tmp_path_factory.mktemp("console"))
    yield server
    server.stop()


@pytest.fixture
def url(service: ServerProcess) -> str:
    return service.url


@pytest.fixture
def admin(url: str) -> Iterator[httpx.Client]:
    client = login(url, ADMIN_TOKEN)
    yield client
    client.close()


@pytest.fixture
def narrow(url: str) -> Iterator[httpx.Client]:
    client = login(url, NARROW_TOKEN)
    yield client
    client.close()


def _page(template: str, workspace: str = ACME) -> str:
    digest = INJECTION_DIGEST if workspace == ACME else OTHER_DIGEST
    return template.format(ws=workspace, digest=digest)


def _assert_security_headers(response: httpx.Response, *, page: bool = True) -> None:
    assert response.headers.get("content-security-policy") == CSP, response.request.url
    assert response.headers.get("x-content-type-options") == "nosniff"
    assert response.headers.get("referrer-policy") == "no-referrer"
    if page:
        assert response.headers.get("cache-control") == "no-store", response.request.url


def test_the_console_policy_is_the_documented_one() -> None:
    assert CONTENT_SECURITY_POLICY == CSP


@pytest.mark.parametrize("template", PAGES)
def test_no_console_page_without_a_session(url: str, template: str) -> None:
    response = httpx.get(url + _page(template), follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"
    assert response.content == b""
    _assert_security_headers(response)


@pytest.mark.parametrize("cookie", ["", "forged-session-id", "a" * 43])
def test_an_unknown_session_cookie_sees_nothing(url: str, cookie: str) -> None:
    response = httpx.get(
        url + "/console/w/acme", cookies={"memvault_console": cookie} if cookie else None, follow_redirects=False
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"


@pytest.mark.parametrize(("template", "fields"), ACTIONS)
def test_no_action_without_a_session(url: str, template: str, fields: dict[str, str]) -> None:
    response = httpx.post(url + _page(template), data={**fields, "csrf": "x"}, headers={"Origin": url})
    assert response.status_code == 403
    _assert_security_headers(response)
    assert INJECTION_DIGEST in copy_digests(login(url, ADMIN_TOKEN), ACME)


def test_login_with_a_wrong_token_is_refused_and_opens_no_session(url: str) -> None:
    response = httpx.post(url + "/console/login", data={"token": "not-a-token"}, headers={"Origin": url})
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert "not recognised" in response.text


def test_the_session_cookie_is_httponly_strict_and_scoped_to_the_console(url: str) -> None:
    response = httpx.post(url + "/console/login", data={"token": ADMIN_TOKEN}, headers={"Origin": url})
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/console" in cookie
    assert "secure" not in cookie  # plain http on loopback: a Secure cookie would never come back
    assert ADMIN_TOKEN.lower() not in cookie


def test_logout_ends_the_session(url: str, admin: httpx.Client) -> None:
    sid = admin.cookies["memvault_console"]
    page = admin.get("/console/workspaces")
    assert admin.post("/console/logout", data={"csrf": csrf_of(page)}).status_code == 303
    stale = httpx.get(url + "/console/workspaces", cookies={"memvault_console": sid}, follow_redirects=False)
    assert stale.status_code == 303
    assert stale.headers["location"] == "/console/login"


def test_a_new_login_gets_a_new_session_id(url: str, admin: httpx.Client) -> None:
    first = admin.cookies["memvault_console"]
    again = admin.post("/console/login", data={"token": ADMIN_TOKEN})
    assert again.status_code == 303
    assert admin.cookies["memvault_console"] != first
    stale = httpx.get(url + "/console/workspaces", cookies={"memvault_console": first}, follow_redirects=False)
    assert stale.status_code == 303


def test_login_and_static_files_are_served_without_a_session(url: str) -> None:
    login_page = httpx.get(url + "/console/login")
    assert login_page.status_code == 200
    _assert_security_headers(login_page)
    for name, kind in (("console.css", "text/css"), ("console.js", "text/javascript")):
        response = httpx.get(f"{url}/console/static/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
        _assert_security_headers(response, page=False)
    assert httpx.get(url + "/console/static/..%2Fconsole.py").status_code == 404


@pytest.mark.parametrize("template", PAGES)
def test_every_console_page_carries_the_security_headers(admin: httpx.Client, template: str) -> None:
    response = admin.get(_page(template))
    assert response.status_code == 200, response.text
    _assert_security_headers(response)
    assert "<script>" not in response.text.replace('<script src="/console/static/console.js" defer></script>', "")
    assert " style=" not in response.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/console/no-such-page", 404),
        ("GET", "/console/w/acme/quarantine/" + "0" * 64, 404),
        ("GET", "/console/w/bad%20workspace", 400),
        ("GET", "/console/w/acme/doc?agent=support&label=../../etc/passwd", 400),
        ("DELETE", "/console/w/acme", 405),
        ("GET", "/console/w/acme/quarantine/" + INJECTION_DIGEST + "/delete", 405),
    ],
)
def test_error_answers_carry_the_security_headers(admin: httpx.Client, method: str, path: str, status: int) -> None:
    response = admin.request(method, path)
    assert response.status_code == status, response.text
    _assert_security_headers(response)


def test_a_get_never_deletes_or_erases(url: str, admin: httpx.Client) -> None:
    before = documents_of(url, ACME)
    assert admin.get(f"/console/w/acme/quarantine/{INJECTION_DIGEST}/delete").status_code == 405
    assert admin.get("/console/w/acme/erase", params={"subject": SUBJECT}).status_code == 200
    assert INJECTION_DIGEST in copy_digests(admin, ACME)
    assert documents_of(url, ACME) == before


def _refused_posts(url: str, admin: httpx.Client) -> Iterator[tuple[str, httpx.Response]]:
    csrf = csrf_of(admin.get("/console/w/acme/erase"))
    for template, fields in ACTIONS:
        path = _page(template)
        yield "no csrf", admin.post(path, data=fields)
        yield "wrong csrf", admin.post(path, data={**fields, "csrf": csrf[:-2] + "xx"})
        yield "foreign origin", admin.post(path, data={**fields, "csrf": csrf}, headers={"Origin": "http://evil.test"})
        yield "null origin", admin.post(path, data={**fields, "csrf": csrf}, headers={"Origin": "null"})
        yield (
            "cross-site fetch, null origin",
            admin.post(path, data={**fields, "csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site", "Origin": "null"}),
        )
        yield (
            "same-site (a sibling subdomain)",
            admin.post(path, data={**fields, "csrf": csrf}, headers={"Sec-Fetch-Site": "same-site"}),
        )
        yield (
            "same-origin fetch, foreign origin",
            admin.post(
                path,
                data={**fields, "csrf": csrf},
                headers={"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.test"},
            ),
        )
        yield (
            "cross-site fetch",
            admin.post(path, data={**fields, "csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site", "Origin": url}),
        )
        bare = httpx.Client(base_url=url, cookies=admin.cookies)
        yield "no origin at all", bare.post(path, data={**fields, "csrf": csrf})


def test_a_cross_site_or_tokenless_post_is_refused_and_changes_nothing(url: str, admin: httpx.Client) -> None:
    before = documents_of(url, ACME)
    for what, response in _refused_posts(url, admin):
        assert response.status_code == 403, (what, response.request.url, response.text)
        _assert_security_headers(response)
    assert documents_of(url, ACME) == before
    assert INJECTION_DIGEST in copy_digests(admin, ACME)
    assert admin.get("/console/workspaces").status_code == 200  # the session survived every refusal


def test_a_same_origin_fetch_is_accepted_with_the_null_origin_chromium_sends(admin: httpx.Client) -> None:
    """Under Referrer-Policy no-referrer, Chromium's form POST says Origin: null and Sec-Fetch-Site: same-origin."""
    page = admin.get("/console/w/acme/erase")
    response = admin.post(
        "/console/w/acme/erase",
        data={"subject": "nobody-at-all", "csrf": csrf_of(page)},
        headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 200, response.text
    assert re.search(r'id="removed">0<', response.text)


def test_a_login_from_another_origin_is_refused(url: str) -> None:
    response = httpx.post(url + "/console/login", data={"token": ADMIN_TOKEN}, headers={"Origin": "http://evil.test"})
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


def test_a_csrf_token_belongs_to_its_session(url: str, admin: httpx.Client, narrow: httpx.Client) -> None:
    """The narrow session's token does not authorise the admin session's POST."""
    foreign = csrf_of(narrow.get("/console/w/acme/erase"))
    response = admin.post(f"/console/w/acme/quarantine/{INJECTION_DIGEST}/delete", data={"csrf": foreign})
    assert response.status_code == 403
    assert INJECTION_DIGEST in copy_digests(admin, ACME)


@pytest.mark.parametrize("template", [t for t in PAGES if "{ws}" in t])
def test_a_workspace_bound_token_gets_403_for_another_workspaces_pages(narrow: httpx.Client, template: str) -> None:
    response = narrow.get(_page(template, OTHER))
    assert response.status_code == 403, response.text
    assert OTHER_SECRET not in response.text
    _assert_security_headers(response)


@pytest.mark.parametrize(("template", "fields"), ACTIONS)
def test_a_workspace_bound_token_cannot_act_on_another_workspace(
    url: str, admin: httpx.Client, narrow: httpx.Client, template: str, fields: dict[str, str]
) -> None:
    csrf = csrf_of(narrow.get("/console/w/acme/erase"))
    before = documents_of(url, OTHER)
    response = narrow.post(_page(template, OTHER), data={**fields, "csrf": csrf})
    assert response.status_code == 403, response.text
    assert documents_of(url, OTHER) == before
    assert OTHER_DIGEST in copy_digests(admin, OTHER)


def test_a_workspace_bound_token_lists_only_its_workspace(narrow: httpx.Client, admin: httpx.Client) -> None:
    listed = re.findall(r'href="/console/w/([^"/?]+)"', narrow.get("/console/workspaces").text)
    assert set(listed) == {ACME}
    assert {ACME, OTHER} <= set(re.findall(r'href="/console/w/([^"/?]+)"', admin.get("/console/workspaces").text))


def test_a_search_never_reaches_another_workspace(narrow: httpx.Client) -> None:
    response = narrow.get("/console/w/acme/search", params={"agent": "support", "q": OTHER_SECRET})
    assert response.status_code == 200
    assert 'id="hit-count">0 hits' in response.text


def _assert_escaped(html: str, shown: str = "&lt;script&gt;") -> None:
    lowered = html.lower()
    assert "<img" not in lowered
    assert "<svg" not in lowered
    assert "javascript:" not in re.sub(r">[^<]*<", "><", lowered), "javascript: inside a tag"
    assert not re.search(r"<[^>]+\son\w+\s*=", lowered), "an event handler attribute"
    assert lowered.count("<script") == 1  # the console's own script tag only
    assert shown in lowered


def test_stored_markup_comes_back_as_text_on_the_document_page(admin: httpx.Client) -> None:
    response = admin.get("/console/w/acme/doc", params={"agent": "support", "label": "peers/mallory.md"})
    assert response.status_code == 200
    _assert_escaped(response.text)
    assert "&lt;img src=x onerror=" in response.text
    assert "javascript:window.__pwned=&#39;link&#39;" in response.text  # shown, as text


def test_stored_markup_comes_back_as_text_in_search_hits(admin: httpx.Client) -> None:
    for query, shown in (
        ("script pwned", "&lt;script&gt;"),
        ("onerror", "&lt;img src=x onerror="),
        ("javascript", "javascript:window"),
        ("svg onload", "&lt;svg onload="),
    ):
        response = admin.get("/console/w/acme/search", params={"agent": "support", "q": query})
        assert response.status_code == 200
        assert "peers/mallory.md" in response.text, query
        _assert_escaped(response.text, shown)


def test_stored_markup_comes_back_as_text_on_the_quarantine_pages(admin: httpx.Client) -> None:
    for path in ("/console/w/acme/quarantine", f"/console/w/acme/quarantine/{INJECTION_DIGEST}"):
        response = admin.get(path)
        assert response.status_code == 200
        _assert_escaped(response.text)


def test_markup_in_a_query_or_a_link_parameter_is_escaped(admin: httpx.Client) -> None:
    hostile = "\"><script>window.__pwned='q'</script>"
    response = admin.get("/console/w/acme/search", params={"agent": "support", "q": hostile})
    assert "<script>window" not in response.text
    assert "&#34;&gt;&lt;script&gt;" in response.text
    assert XSS_LINES  # the payloads above are the ones the page must escape


def test_delete_a_quarantine_copy(url: str, admin: httpx.Client) -> None:
    copy = admin.get(f"/console/w/acme/quarantine/{SUBJECT_DIGEST}")
    response = admin.post(f"/console/w/acme/quarantine/{SUBJECT_DIGEST}/delete", data={"csrf": csrf_of(copy)})
    assert response.status_code == 303
    assert SUBJECT_DIGEST not in copy_digests(admin, ACME)
    assert INJECTION_DIGEST in copy_digests(admin, ACME)
    assert "Deleted 1 copy" in admin.get(response.headers["location"]).text


def test_erase_a_subject_shows_the_proof(url: str, admin: httpx.Client) -> None:
    page = admin.get("/console/w/acme/erase")
    response = admin.post("/console/w/acme/erase", data={"subject": SUBJECT, "csrf": csrf_of(page)})
    assert response.status_code == 200, response.text
    assert re.search(r'id="removed">1<', response.text)
    assert re.search(r'id="erasure-status">\s*(COMPLETE|PENDING)', response.text)
    assert re.search(r'id="left-documents">0<', response.text)
    assert re.search(r'id="left-copies">0<', response.text)
    assert not [d for d in documents_of(url, ACME) if SUBJECT in d["subjects"]]
    again = admin.post("/console/w/acme/erase", data={"subject": SUBJECT, "csrf": csrf_of(page)})
    assert re.search(r'id="removed">0<', again.text)


def test_health_shows_pending_erasures_and_the_backlog(admin: httpx.Client) -> None:
    response = admin.get("/console/health")
    assert re.search(r'id="health-ok" class="ok">ok<', response.text)
    assert re.search(r'id="pending-erasures">\d+<', response.text)
    assert re.search(r'id="embedding-backlog">\d+ line', response.text)
    assert 'id="scanner-reviews"' not in response.text  # no reviewer (memvault-scan-review tests the row)


def test_the_console_is_closed_on_a_service_without_tokens(tmp_path: Path) -> None:
    from httpremote_support import memvault_command

    config = tmp_path / "memvault.toml"
    config.write_text(
        f'provider = "sqlite"\n[embed]\nembedder = "off"\n[providers.sqlite]\npath = "{tmp_path / "x.db"}"\n'
        "[server]\nport = 0\n",
        encoding="utf-8",
    )
    server = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path)
    try:
        page = httpx.get(server.url + "/console/login")
        assert "console is closed" in page.text
        response = httpx.post(server.url + "/console/login", data={"token": "anything"}, headers={"Origin": server.url})
        assert response.status_code == 403
        assert "set-cookie" not in response.headers
    finally:
        server.stop()
