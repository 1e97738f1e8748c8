"""Which IP addresses a fetch must not reach."""

import ipaddress


def refusal_reason(ip: str) -> str | None:
    """Why ``ip`` must not be fetched from, or ``None`` when it is a public address.

    IPv4-mapped IPv6 addresses (``::ffff:127.0.0.1``) are judged as the IPv4 address they carry.

    Args:
        ip: an IPv4 or IPv6 address literal (an IPv6 scope such as ``%eth0`` is accepted).

    Returns:
        A short reason ("loopback", "private", "link-local", ...) or ``None``.
    """
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return f"not an IP address ({ip!r})"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_unspecified:
        return "unspecified address"
    if addr.is_loopback:
        return "loopback address"
    if addr.is_link_local:
        return "link-local address"
    if addr.is_multicast:
        return "multicast address"
    if addr.is_reserved:
        return "reserved address"
    if addr.is_private:
        return "private address"
    if not addr.is_global:
        return "non-global address"
    return None
