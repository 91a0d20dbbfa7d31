"""Who a visitor is, as well as a request can tell: the key every per-visitor limit counts by
(uploads a minute, the queue's share, the agents' tools).

The socket's peer is the visitor, unless proxies this host knows of stand in front: then each
appends the address it received from to X-Forwarded-For, and the visitor is the address the
outermost trusted proxy received from. Anything else in that header is the client's own words:
with no proxy in front, a client that wrote a fresh address in every request escaped every
limit (45 of 45 uploads, 68 of 70 joins at once) and filled the queue for everyone. So the
header is believed only where a proxy is known to be: on a Hugging Face Space (SPACE_ID is set;
its proxy appends one hop) or where VIT_TRUSTED_PROXIES says how many there are.

This machine's own requests are limited like anyone's: a forwarder on this machine (`ssh -L`,
socat, a reverse proxy that adds no header) makes every visitor's request look local, and a
free pass for loopback switched every limit off behind one. A person alone on their own
machine who wants their scripts unlimited says so (VIT_UNLIMITED_LOCAL=1).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass


def forwarded_hops(scope) -> list[str]:
    """Every X-Forwarded-For line in order, as one list: a proxy appends to the last (a client
    that sent two lines had its own first one believed)."""
    return [h for h in (hop.strip() for key, value in scope.get("headers", ())
                        if key == b"x-forwarded-for"
                        for hop in value.decode("latin-1").split(",")) if h]


@dataclass(frozen=True)
class Identity:
    trusted_proxies: int = 0        # proxies in front that append to X-Forwarded-For
    unlimited_local: bool = False   # this machine's own requests skip the per-visitor limits

    def visitor(self, scope) -> str:
        """The address the outermost trusted proxy received from (`trusted_proxies` from the end
        of X-Forwarded-For), else the socket's peer."""
        hops = forwarded_hops(scope) if self.trusted_proxies else []
        if hops:
            return hops[-min(self.trusted_proxies, len(hops))][:64]
        client = scope.get("client")
        return str(client[0]) if client else "?"

    def unlimited(self, scope) -> bool:
        """Whether the per-visitor limits skip this request: only with `unlimited_local`, and
        only for a request from this machine that no proxy forwarded."""
        if not self.unlimited_local or forwarded_hops(scope):
            return False
        client = scope.get("client")
        try:
            return bool(client) and ipaddress.ip_address(client[0]).is_loopback
        except ValueError:
            return False
