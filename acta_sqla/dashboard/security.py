"""The dashboard's security model: who may look (a password when one is configured), and
that every action was asked for by this dashboard's own page (CSRF).

* A browser gets a random session id (cookie ``acta_sid``: HttpOnly, SameSite=Strict).
* Every form carries a token derived from it with the app's secret (HMAC-SHA256): a page
  of another site can make the browser send the cookie, never know the token, so its
  forged POST is refused (403). The ``Origin`` header, when the browser sends one, must
  also name this host.
* With a password, the login sets ``acta_auth``: an HMAC of the session id, so it is worth
  nothing without the secret; scripts may send ``Authorization: Bearer <password>``.

The secret is random per process unless given (several processes behind one balancer
must share one, or each refuses the others' tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

SID_COOKIE = "acta_sid"
AUTH_COOKIE = "acta_auth"
CSRF_FIELD = "csrf"


class Keys:
    def __init__(self, secret: bytes | str | None, password: str | None) -> None:
        if isinstance(secret, str):
            secret = secret.encode()
        self._secret = secret or secrets.token_bytes(32)
        self.password = password or None

    def _mac(self, purpose: str, sid: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{sid}".encode(), hashlib.sha256).hexdigest()

    def csrf_token(self, sid: str) -> str:
        return self._mac("csrf", sid)

    def csrf_ok(self, sid: str | None, token: object) -> bool:
        if not sid or not isinstance(token, str):
            return False
        return hmac.compare_digest(self.csrf_token(sid), token)

    def auth_token(self, sid: str) -> str:
        return self._mac("auth", sid)

    def authenticated(self, sid: str | None, auth: str | None, bearer: str | None) -> bool:
        if self.password is None:
            return True
        if bearer is not None and self.password_ok(bearer):
            return True
        if not sid or not auth:
            return False
        return hmac.compare_digest(self.auth_token(sid), auth)

    def password_ok(self, given: str) -> bool:
        if self.password is None:
            return False
        return hmac.compare_digest(self.password.encode(), given.encode())


def new_sid() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
