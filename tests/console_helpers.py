"""Helpers shared by the console's tests (TestClient and browser): signing in through the
forms, reading a page's CSRF token, the review gate on for one test."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
META_RE = re.compile(r'<meta name="csrf" content="([^"]*)">')


def csrf_of(html: str) -> str:
    """The CSRF token of a page (its meta tag, else its first form's)."""
    m = META_RE.search(html)
    if m and m.group(1):
        return m.group(1)
    m = CSRF_RE.search(html)
    assert m, "no csrf token on the page"
    return m.group(1)


def sign_in(client: TestClient, token: str) -> Any:
    """Sign in through the form; returns the response of the POST (not followed)."""
    form = client.get("/console/signin")
    assert form.status_code == 200, form.text
    return client.post("/console/signin", data={"token": token, "csrf": csrf_of(form.text)},
                       follow_redirects=False)


def page_csrf(client: TestClient, path: str = "/console") -> str:
    r = client.get(path)
    assert r.status_code == 200, r.text
    return csrf_of(r.text)
