"""The address ranges :mod:`.address` judges by, stated here rather than left to ``ipaddress.is_global``.

``ipaddress``'s ``is_private`` / ``is_global`` tables changed between Python releases (``192.0.0.0/24`` and
``fec0::/10`` among them), so the ranges a fetch must never reach are listed explicitly from the IANA
special-purpose registries; an address in any of them is non-global whatever the running Python says.
"""

import ipaddress

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "fd00:ec2::254",    # AWS (IPv6)
    "192.0.0.192",      # Oracle Cloud
    "100.100.100.200",  # Alibaba Cloud
))
"""Cloud metadata services outside the link-local ranges (refused even for listed hosts)."""

SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
"""Deprecated IPv6 site-local addresses (RFC 3879): private, like ``fc00::/7``."""

NON_GLOBAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
    "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
))
"""Special-purpose ranges that are not globally reachable (IPv4 and IPv6 special-purpose registries)."""

NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
"""Well-known NAT64 prefix (RFC 6052): the IPv4 address is the last 32 bits."""

LOCAL_NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b:1::/48")
"""Local-use NAT64 prefix (RFC 8215): the IPv4 address is the last 32 bits."""

IPV4_TRANSLATED_PREFIX = ipaddress.IPv6Network("::ffff:0:0:0/96")
"""IPv4-translated addresses (RFC 2765, ``::ffff:0:a.b.c.d``)."""

IPV4_COMPATIBLE_PREFIX = ipaddress.IPv6Network("::/96")
"""Deprecated IPv4-compatible addresses (``::a.b.c.d``); ``::`` and ``::1`` are unspecified and loopback."""


def in_non_global_range(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``addr`` (without an IPv6 scope) lies in one of :data:`NON_GLOBAL_NETWORKS`."""
    return any(addr.version == net.version and addr in net for net in NON_GLOBAL_NETWORKS)
