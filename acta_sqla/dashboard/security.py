"""The dashboard's security model: who may look (a password when one is configured), and
that every action was asked for by this dashboard's own page (CSRF).

* A browser gets a random session id (cookie ``acta_sid``: HttpOnly, SameSite=Strict).
* Every form carries a token derived from it with the app's secret (HMAC-SHA256): a page
  of another site can make the browser send the cookie, never know the token, so its
  forged POST is refused (403). The ``Origin`` header, when the browser sends one, must
  also name this host.
* With a password, the login gives a fresh session id and sets ``acta_auth``:
  ``<issued-at>.<HMAC of (session id, issued-at)>``, keyed by a key derived from the
  secret AND the password. So it is worth nothing without the secret, it dies with a
  password change (every login of the old password fails its HMAC), and it expires
  ``lifetime`` seconds after the login. Logout revokes the session id in this process
  (``Keys.revoke``): the same two cookies replayed afterwards are refused. Scripts may
  send ``Authorization: Bearer <password>``.
* Failed passwords (form or bearer) are counted per client address and overall over a
  window (``Throttle``); past either limit every attempt is refused, the right password
  too, with one answer that does not say which limit was hit.

No table holds sessions (a new one would need a migration): the revocation set lives in
the process's memory, bounded by the lifetime (an entry is dropped once its token would
have expired anyway). docs/dashboard.md says what that means for several processes.

The secret is random per process unless given (several processes behind one balancer
must share one, or each refuses the others' tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import deque
from collections.abc import Callable

SID_COOKIE = "acta_sid"
AUTH_COOKIE = "acta_auth"
CSRF_FIELD = "csrf"

DEFAULT_LIFETIME = 8 * 3600.0
"""Seconds a login lasts (a working day); then the login page returns."""
CLOCK_SKEW = 60.0
"""A token issued up to this far in the future (another process's clock) still counts."""


class Keys:
    def __init__(
        self,
        secret: bytes | str | None,
        password: str | None,
        *,
        lifetime: float = DEFAULT_LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(secret, str):
            secret = secret.encode()
        self._secret = secret or secrets.token_bytes(32)
        self.password = password or None
        self.lifetime = lifetime
        self._clock = clock
        # The login key: a password change (same secret) makes every older login fail.
        digest = hashlib.sha256((self.password or "").encode()).digest()
        self._login_key = hmac.new(self._secret, b"login\0" + digest, hashlib.sha256).digest()
        self._revoked: dict[str, float] = {}
        """Session ids logged out -> when their login would have expired anyway."""

    def _mac(self, purpose: str, sid: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{sid}".encode(), hashlib.sha256).hexdigest()

    def csrf_token(self, sid: str) -> str:
        return self._mac("csrf", sid)

    def csrf_ok(self, sid: str | None, token: object) -> bool:
        if not sid or not isinstance(token, str):
            return False
        return hmac.compare_digest(self.csrf_token(sid), token)

    def _login_mac(self, sid: str, issued: int) -> str:
        message = f"auth:{sid}:{issued}".encode()
        return hmac.new(self._login_key, message, hashlib.sha256).hexdigest()

    def auth_token(self, sid: str) -> str:
        """The login cookie's value for a session id logged in now."""
        issued = int(self._clock())
        return f"{issued}.{self._login_mac(sid, issued)}"

    def _issued(self, sid: str, auth: str) -> int | None:
        """When the valid login token ``auth`` of ``sid`` was issued; None if invalid."""
        issued_text, _, mac = auth.partition(".")
        if not issued_text.isdigit() or len(issued_text) > 12:
            return None
        issued = int(issued_text)
        if not hmac.compare_digest(self._login_mac(sid, issued), mac):
            return None
        return issued

    def session_ok(self, sid: str | None, auth: str | None) -> bool:
        """A login of the current password, not expired, not logged out."""
        if not sid or not auth:
            return False
        issued = self._issued(sid, auth)
        if issued is None:
            return False
        now = self._clock()
        if not now - self.lifetime < issued <= now + CLOCK_SKEW:
            return False
        return sid not in self._revoked

    def revoke(self, sid: str | None, auth: str | None) -> bool:
        """Log out: the login of ``sid`` is refused from now on, in this process. Only a
        valid login is recorded (so the set holds at most the logins of the lifetime);
        True if there was one."""
        if not sid or not auth or not self.session_ok(sid, auth):
            return False
        issued = self._issued(sid, auth)
        assert issued is not None
        now = self._clock()
        for gone in [s for s, until in self._revoked.items() if until <= now]:
            del self._revoked[gone]
        self._revoked[sid] = issued + self.lifetime + CLOCK_SKEW
        return True

    def bearer_ok(self, bearer: str | None) -> bool:
        return bearer is not None and self.password_ok(bearer)

    def password_ok(self, given: str) -> bool:
        if self.password is None:
            return False
        return hmac.compare_digest(self.password.encode(), given.encode())


class Throttle:
    """Failed passwords counted over a sliding ``window`` of seconds, per client address
    and overall. ``refused(client)`` names the limit reached (for the log), or None.

    Checked and counted without an ``await`` between them, so that N guesses sent in
    parallel are counted one after the other: at most ``per_client`` of them are ever
    compared with the password in one window. Refused attempts are not counted (a client
    refused keeps its place in the window; memory holds at most ``overall`` entries)."""

    def __init__(
        self,
        per_client: int,
        overall: int,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.overall = overall
        self.window = window
        self._clock = clock
        self._all: deque[tuple[float, str]] = deque()
        self._by_client: dict[str, int] = {}

    def _forget_old(self) -> None:
        horizon = self._clock() - self.window
        while self._all and self._all[0][0] <= horizon:
            _, client = self._all.popleft()
            left = self._by_client[client] - 1
            if left:
                self._by_client[client] = left
            else:
                del self._by_client[client]

    def refused(self, client: str) -> str | None:
        self._forget_old()
        if len(self._all) >= self.overall:
            return f"{self.overall} failed attempts from all clients in {self.window:g} s"
        if self._by_client.get(client, 0) >= self.per_client:
            return f"{self.per_client} failed attempts from this client in {self.window:g} s"
        return None

    def failed(self, client: str) -> None:
        self._all.append((self._clock(), client))
        self._by_client[client] = self._by_client.get(client, 0) + 1

    def retry_after(self) -> int:
        """Whole seconds until the oldest counted failure leaves the window."""
        if not self._all:
            return 0
        return max(1, int(self._all[0][0] + self.window - self._clock()) + 1)


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


def host_of(header: str) -> str:
    """The host name of a ``Host`` header, without its port, lower-case
    (``[::1]:8080`` -> ``::1``, ``Example.COM.:80`` -> ``example.com``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0].rstrip(".") if ":" in header else header.rstrip(".")


def host_allowed(header: str, allowed: frozenset[str]) -> bool:
    """``header`` names one of ``allowed`` (host names or addresses; ``*.example.com``
    matches its subdomains; ``*`` matches any)."""
    if "*" in allowed:
        return True
    host = host_of(header)
    if not host:
        return False
    if host in allowed:
        return True
    return any(a.startswith("*.") and host.endswith(a[1:]) for a in allowed)


def hosts_for_bind(address: str) -> frozenset[str]:
    """The ``Host`` names a dashboard bound to ``address`` answers by default: the address
    itself; for loopback also ``localhost``, ``127.0.0.1`` and ``::1``. A wildcard bind
    (``0.0.0.0``, ``::``) cannot say which names reach it: any (it needs a password)."""
    host = address.strip("[]").lower()
    if host in ("0.0.0.0", "::", ""):
        return frozenset({"*"})
    if is_loopback(host):
        return frozenset({host, "localhost", "127.0.0.1", "::1"})
    return frozenset({host})
