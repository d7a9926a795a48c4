"""Issue 25's "done when", over a real ``mnemovault serve`` (a subprocess on a fresh data
directory; the hash embedder of :mod:`tests.test_kek_live` so it needs no torch):

* ``/console`` answers a sign-in page with a Content-Security-Policy and no external asset;
* signing in with an owner key and approving a pending record makes it recallable;
* a member's session gets no review queue;
* an erase from the console returns a receipt that verifies offline
  (``mnemovault receipt verify --public-key``, no database).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from mnemovault.console.router import CSP
from tests.console_helpers import csrf_of
from tests.test_kek_live import Serve, _cli, embed_env, fresh_dir  # noqa: F401 (fixtures)

EXTERNAL = re.compile(r'(?:src|href|action)="(?!/console|#)([^"]*)"')


@contextmanager
def _signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=30) as c:
        form = c.get("/console/signin")
        r = c.post("/console/signin", data={"token": token, "csrf": csrf_of(form.text)})
        assert r.status_code == 303, r.text
        yield c


def test_console_over_mnemovault_serve(fresh_dir: Path, embed_env: dict[str, str],  # noqa: F811
                                       tmp_path: Path) -> None:
    tokens = {}
    for role in ("owner", "member"):
        made = _cli(fresh_dir, embed_env, "keys", "create", "--tenant", "acme", "--role", role,
                    "--json")
        assert made.returncode == 0, made.stderr
        tokens[role] = json.loads(made.stdout)["token"]
    server = Serve(fresh_dir, {**embed_env, "REQUIRE_REVIEW": "true"})
    try:
        first = httpx.get(f"{server.url}/console", follow_redirects=True, timeout=30)
        assert first.status_code == 200 and str(first.url).endswith("/console/signin")
        assert first.headers["content-security-policy"] == CSP
        assert 'name="token"' in first.text and EXTERNAL.findall(first.text) == []

        member = {"Authorization": f"Bearer {tokens['member']}"}
        owner = {"Authorization": f"Bearer {tokens['owner']}"}
        r = httpx.post(f"{server.url}/v1/memories", headers=member, timeout=30,
                       json={"content": "The lighthouse on Sylt is painted red and white",
                             "scope": "coast"})
        assert r.status_code == 201 and r.json()["status"] == "pending_review", r.text
        mid = r.json()["id"]

        def recalled() -> list[str]:
            hits = httpx.post(f"{server.url}/v1/recall", headers=owner, timeout=30, json={
                "query": "The lighthouse on Sylt is painted red and white", "scope": "coast"})
            assert hits.status_code == 200, hits.text
            return [h["memory"]["id"] for h in hits.json()["hits"]]

        assert mid not in recalled()
        with _signed_in(server.url, tokens["member"]) as m:
            r = m.get("/console/review")
            assert r.status_code == 403 and mid not in r.text and "review:approve" in r.text
        with _signed_in(server.url, tokens["owner"]) as c:
            queue = c.get("/console/review")
            assert queue.status_code == 200 and mid in queue.text
            r = c.post(f"/console/review/{mid}/approve", follow_redirects=True,
                       data={"csrf": csrf_of(queue.text), "comment": "seen it"})
            assert "approved" in r.text
            assert mid in recalled()

            r = httpx.post(f"{server.url}/v1/memories", headers=owner, timeout=30,
                           json={"content": "Tove sails to Rømø in June", "scope": "coast",
                                 "subject": "tove"})
            assert r.status_code == 201  # held for review: an erase removes it all the same
            csrf = csrf_of(c.get("/console/subjects").text)
            done = c.post("/console/subjects/erase", data={
                "csrf": csrf, "subject": "tove", "scope": "coast", "confirm": "tove"})
            assert done.status_code == 200, done.text[-2000:]
            seq = re.search(r'/console/subjects/receipts/(\d+)"', done.text)
            assert seq
            receipt = c.get(f"/console/subjects/receipts/{seq.group(1)}")
            assert receipt.status_code == 200
        f = tmp_path / "receipt.json"
        f.write_bytes(receipt.content)
        pub = fresh_dir / "audit_signing.key.pub"
        assert pub.exists()
    finally:
        assert server.stop() in (0, 143)
    offline = tmp_path / "elsewhere"  # no database, no data dir: the receipt and the key
    offline.mkdir()
    res = _cli(offline, embed_env, "receipt", "verify", str(f), "--public-key", str(pub),
               "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["valid"] is True
    assert json.loads(f.read_text())["counts"]["memories"] == 1
