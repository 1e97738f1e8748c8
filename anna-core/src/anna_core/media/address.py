"""Which IP addresses a fetch must not reach.

An IPv6 address may carry an IPv4 address that the network delivers to: IPv4-mapped (``::ffff:a.b.c.d``),
IPv4-translated (``::ffff:0:a.b.c.d``), IPv4-compatible (``::a.b.c.d``), 6to4 (``2002:aabb:ccdd::/48``), Teredo
(``2001::/32``, server and client) and NAT64 (``64:ff9b::/96`` and the local-use ``64:ff9b:1::/48``). Each
carried address is judged by the same rules as the address itself, so ``2002:7f00:1::1`` is refused as loopback.

The rule, in order: an address carrying a refused IPv4 address is refused for it; unspecified, link-local,
multicast and cloud metadata addresses (:data:`.ranges.METADATA_ADDRESSES`) are always refused; unless the host
is listed, loopback, reserved, private (site-local ``fec0::/10`` included) and non-global addresses are refused,
non-global meaning outside ``ipaddress``'s global space *or* inside the explicit
:data:`.ranges.NON_GLOBAL_NETWORKS`, so the verdict does not depend on the Python release's tables.
"""

import ipaddress

from anna_core.media.ranges import (
    IPV4_COMPATIBLE_PREFIX,
    IPV4_TRANSLATED_PREFIX,
    LOCAL_NAT64_PREFIX,
    METADATA_ADDRESSES,
    NAT64_PREFIX,
    SITE_LOCAL,
    in_non_global_range,
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
    bare = _without_scope(addr)
    last32 = ipaddress.IPv4Address(int(bare) & 0xFFFFFFFF)
    if bare in NAT64_PREFIX:
        found.append(("a NAT64 address", last32))
    if bare in LOCAL_NAT64_PREFIX:
        found.append(("a local-use NAT64 address", last32))
    if bare in IPV4_TRANSLATED_PREFIX:
        found.append(("an IPv4-translated address", last32))
    if bare in IPV4_COMPATIBLE_PREFIX and int(bare) > 1:  # :: and ::1 are unspecified and loopback
        found.append(("an IPv4-compatible address", last32))
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
    if addr.is_private or _without_scope(addr) in SITE_LOCAL:
        return "private address"
    if not addr.is_global or in_non_global_range(_without_scope(addr)):
        return "non-global address"
    return None


def _without_scope(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        return ipaddress.IPv6Address(int(addr))
    return addr
