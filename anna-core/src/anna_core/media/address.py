"""Which IP addresses a fetch must not reach.

An IPv6 address may carry an IPv4 address that the network delivers to: IPv4-mapped (``::ffff:a.b.c.d``),
6to4 (``2002:aabb:ccdd::/48``), Teredo (``2001::/32``, server and client) and NAT64 (``64:ff9b::/96``). Each
carried address is judged by the same rules as the address itself, so ``2002:7f00:1::1`` is refused as loopback.
"""

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
METADATA_ADDRESSES = frozenset({ipaddress.IPv6Address("fd00:ec2::254")})
"""Cloud metadata services outside the link-local ranges (AWS's IPv6 endpoint)."""


def refusal_reason(ip: str, *, private_ok: bool = False) -> str | None:
    """Why ``ip`` must not be fetched from, or ``None`` when it may be.

    Args:
        ip: an IPv4 or IPv6 address literal (an IPv6 scope such as ``%eth0`` is accepted).
        private_ok: the host is one the operator listed (``allowed_media_domains``): loopback, private and
            reserved addresses pass, but link-local ones (the cloud metadata service ``169.254.169.254``),
            metadata addresses, multicast and unspecified addresses are still refused.

    Returns:
        A short reason ("loopback address", "private address (embedded in a 6to4 address)", ...) or ``None``.
    """
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return f"not an IP address ({ip!r})"
    return _reason(addr, private_ok)


def embedded_ipv4(addr: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form; empty for IPv4."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return []
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if addr.ipv4_mapped is not None:
        found.append(("an IPv4-mapped address", addr.ipv4_mapped))
    if addr.sixtofour is not None:
        found.append(("a 6to4 address", addr.sixtofour))
    if addr.teredo is not None:
        server, client = addr.teredo
        found += [("a Teredo address (server)", server), ("a Teredo address (client)", client)]
    if _without_scope(addr) in NAT64_PREFIX:
        found.append(("a NAT64 address", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)))
    return found


def _reason(addr: IPAddress, private_ok: bool) -> str | None:
    for form, v4 in embedded_ipv4(addr):
        reason = _reason(v4, private_ok)
        if reason is not None:
            return f"{reason} (embedded in {form})"
    if addr.is_unspecified:
        return "unspecified address"
    if addr.is_link_local:
        return "link-local address"
    if addr.is_multicast:
        return "multicast address"
    if _without_scope(addr) in METADATA_ADDRESSES:
        return "cloud metadata address"
    if private_ok:
        return None
    if addr.is_loopback:
        return "loopback address"
    if addr.is_reserved:
        return "reserved address"
    if addr.is_private:
        return "private address"
    if not addr.is_global:
        return "non-global address"
    return None


def _without_scope(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        return ipaddress.IPv6Address(int(addr))
    return addr
