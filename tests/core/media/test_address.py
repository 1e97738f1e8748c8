"""refusal_reason: IPv4 addresses carried inside IPv6 ones are judged as themselves."""

import pytest
from anna_core.media import refusal_reason


@pytest.mark.parametrize("ip,reason", [
    ("2002:7f00:1::1", "loopback address (embedded in a 6to4 address)"),
    ("2002:a9fe:a9fe::1", "link-local address (embedded in a 6to4 address)"),
    ("2002:a00:1::1", "private address (embedded in a 6to4 address)"),
    ("64:ff9b::7f00:1", "loopback address (embedded in a NAT64 address)"),
    ("64:ff9b::a9fe:a9fe", "link-local address (embedded in a NAT64 address)"),
    # Teredo: server 65.54.227.120 (public), client 192.0.2.45 (TEST-NET-1, documentation only)
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "private address (embedded in a Teredo address (client))"),
    ("2001:0:a9fe:a9fe:8000:63bf:3fff:fdd2", "link-local address (embedded in a Teredo address (server))"),
    ("::ffff:169.254.169.254", "link-local address (embedded in an IPv4-mapped address)"),
    ("fd00:ec2::254", "cloud metadata address"),
    ("fe80::1%eth0", "link-local address"),
])
def test_embedded_and_metadata_addresses_refused(ip, reason):
    assert refusal_reason(ip) == reason


@pytest.mark.parametrize("ip", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "2002:5db8:d822::1"])
def test_public_addresses_pass(ip):
    # 2002:5db8:d822::1 is the 6to4 address of 93.184.216.34
    assert refusal_reason(ip) is None


@pytest.mark.parametrize("ip", ["127.0.0.1", "10.0.0.1", "::1", "2002:7f00:1::1", "::ffff:10.0.0.1"])
def test_listed_hosts_may_be_private(ip):
    assert refusal_reason(ip, private_ok=True) is None


@pytest.mark.parametrize("ip,reason", [
    ("169.254.169.254", "link-local address"),
    ("fe80::a9fe:a9fe", "link-local address"),
    ("2002:a9fe:a9fe::1", "link-local address (embedded in a 6to4 address)"),
    ("fd00:ec2::254", "cloud metadata address"),
    ("224.0.0.1", "multicast address"),
    ("0.0.0.0", "unspecified address"),
])
def test_listed_hosts_never_reach_metadata_link_local_multicast_or_unspecified(ip, reason):
    assert refusal_reason(ip, private_ok=True) == reason


def test_not_an_address():
    assert refusal_reason("example.com") == "not an IP address ('example.com')"


@pytest.mark.parametrize("ip", ["192.0.0.192", "100.100.100.200", "fd00:ec2::254", "::ffff:100.100.100.200"])
@pytest.mark.parametrize("private_ok", [False, True])
def test_cloud_metadata_addresses_refused_even_for_listed_hosts(ip, private_ok):
    assert refusal_reason(ip, private_ok=private_ok).startswith("cloud metadata address")


def test_site_local_is_private_but_listed_hosts_may_use_it():
    assert refusal_reason("fec0::1") == "private address"
    assert refusal_reason("fec0::1", private_ok=True) is None


@pytest.mark.parametrize("ip,reason", [
    ("::ffff:0:7f00:1", "loopback address (embedded in an IPv4-translated address)"),
    ("::ffff:0:a9fe:a9fe", "link-local address (embedded in an IPv4-translated address)"),
    ("::7f00:1", "loopback address (embedded in an IPv4-compatible address)"),
    ("::a9fe:a9fe", "link-local address (embedded in an IPv4-compatible address)"),
    ("64:ff9b:1::7f00:1", "loopback address (embedded in a local-use NAT64 address)"),
    ("64:ff9b:1::a9fe:a9fe", "link-local address (embedded in a local-use NAT64 address)"),
    ("64:ff9b:1:ffff::c000:c0", "cloud metadata address (embedded in a local-use NAT64 address)"),
])
def test_more_ipv4_carrying_forms_judged_as_their_ipv4(ip, reason):
    assert refusal_reason(ip) == reason


@pytest.mark.parametrize("ip", ["::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe"])
def test_listed_hosts_never_reach_link_local_through_ipv4_carrying_forms(ip):
    assert refusal_reason(ip, private_ok=True).startswith("link-local address (embedded in")


@pytest.mark.parametrize("ip,reason", [("::", "unspecified address"), ("::1", "loopback address")])
def test_unspecified_and_loopback_are_not_ipv4_compatible(ip, reason):
    assert refusal_reason(ip) == reason


@pytest.mark.parametrize("ip", ["192.0.0.8", "100.64.0.1", "198.18.0.1", "192.88.99.1", "3fff::1", "5f00::1",
                                "64:ff9b:1::5db8:d822", "::5db8:d822", "::ffff:0:5db8:d822"])
def test_special_purpose_ranges_refused_whatever_the_python_release(ip):
    assert refusal_reason(ip) is not None
