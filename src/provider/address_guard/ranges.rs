//! The special-purpose address tables behind the SSRF guard: every entry of the IANA IPv4
//! and IPv6 Special-Purpose Address Registries, plus multicast and the blocks the IPv6
//! addressing architecture deprecated, each with its registry name and RFC. An address is
//! judged by the longest prefix containing it:
//!
//! * `Refuse`: not globally reachable (or deprecated, or not forwardable) — refused.
//! * `Global`: the registry marks it globally reachable (e.g. `192.0.0.9/32`) — allowed.
//! * `EmbeddedV4`: the address carries an IPv4 address (IPv4-mapped, NAT64, 6to4), which
//!   is what is reached — judged by that IPv4 address.
//!
//! IPv6 outside global unicast `2000::/3` and in no table row is refused as well (IANA has
//! allocated nothing else for public unicast).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The special-purpose block an address was refused for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialRange {
    /// The block, e.g. `100.64.0.0/10`.
    pub block: &'static str,
    /// The registry's name for it.
    pub name: &'static str,
    /// Where it is defined.
    pub rfc: &'static str,
    /// The IPv6 block the IPv4 address was embedded in, when it was judged through one.
    pub via: Option<&'static str>,
}

impl fmt::Display for SpecialRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}, {}", self.name, self.block, self.rfc)?;
        if let Some(via) = self.via {
            write!(f, "; embedded in {via}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Refuse,
    Global,
    EmbeddedV4,
}
use Verdict::{EmbeddedV4, Global, Refuse};

struct Entry<T> {
    net: T,
    len: u32,
    block: &'static str,
    name: &'static str,
    rfc: &'static str,
    verdict: Verdict,
}

const fn v4(
    net: [u8; 4],
    len: u32,
    block: &'static str,
    name: &'static str,
    rfc: &'static str,
    verdict: Verdict,
) -> Entry<u32> {
    Entry {
        net: u32::from_be_bytes(net),
        len,
        block,
        name,
        rfc,
        verdict,
    }
}

const fn v6(
    net: [u16; 8],
    len: u32,
    block: &'static str,
    name: &'static str,
    rfc: &'static str,
    verdict: Verdict,
) -> Entry<u128> {
    let mut bits = 0u128;
    let mut i = 0;
    while i < 8 {
        bits = (bits << 16) | net[i] as u128;
        i += 1;
    }
    Entry {
        net: bits,
        len,
        block,
        name,
        rfc,
        verdict,
    }
}

/// IANA IPv4 Special-Purpose Address Registry, and IPv4 multicast.
#[rustfmt::skip]
const IPV4: &[Entry<u32>] = &[
    v4([0, 0, 0, 0], 8, "0.0.0.0/8", "\"This network\"", "RFC 791", Refuse),
    v4([0, 0, 0, 0], 32, "0.0.0.0/32", "\"This host on this network\"", "RFC 1122", Refuse),
    v4([10, 0, 0, 0], 8, "10.0.0.0/8", "Private-Use", "RFC 1918", Refuse),
    v4([100, 64, 0, 0], 10, "100.64.0.0/10", "Shared Address Space", "RFC 6598", Refuse),
    v4([127, 0, 0, 0], 8, "127.0.0.0/8", "Loopback", "RFC 1122", Refuse),
    v4([169, 254, 0, 0], 16, "169.254.0.0/16", "Link Local", "RFC 3927", Refuse),
    v4([172, 16, 0, 0], 12, "172.16.0.0/12", "Private-Use", "RFC 1918", Refuse),
    v4([192, 0, 0, 0], 24, "192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890", Refuse),
    v4([192, 0, 0, 0], 29, "192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", Refuse),
    v4([192, 0, 0, 8], 32, "192.0.0.8/32", "IPv4 dummy address", "RFC 7600", Refuse),
    v4([192, 0, 0, 9], 32, "192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", Global),
    v4([192, 0, 0, 10], 32, "192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", Global),
    v4([192, 0, 0, 170], 32, "192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880", Refuse),
    v4([192, 0, 0, 171], 32, "192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880", Refuse),
    v4([192, 0, 2, 0], 24, "192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", Refuse),
    v4([192, 31, 196, 0], 24, "192.31.196.0/24", "AS112-v4", "RFC 7535", Global),
    v4([192, 52, 193, 0], 24, "192.52.193.0/24", "AMT", "RFC 7450", Global),
    v4([192, 88, 99, 0], 24, "192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", Refuse),
    v4([192, 88, 99, 2], 32, "192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", Refuse),
    v4([192, 168, 0, 0], 16, "192.168.0.0/16", "Private-Use", "RFC 1918", Refuse),
    v4([192, 175, 48, 0], 24, "192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", Global),
    v4([198, 18, 0, 0], 15, "198.18.0.0/15", "Benchmarking", "RFC 2544", Refuse),
    v4([198, 51, 100, 0], 24, "198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", Refuse),
    v4([203, 0, 113, 0], 24, "203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", Refuse),
    v4([224, 0, 0, 0], 4, "224.0.0.0/4", "Multicast", "RFC 5771", Refuse),
    v4([240, 0, 0, 0], 4, "240.0.0.0/4", "Reserved", "RFC 1112", Refuse),
    v4([255, 255, 255, 255], 32, "255.255.255.255/32", "Limited Broadcast", "RFC 919", Refuse),
];

/// IANA IPv6 Special-Purpose Address Registry, multicast, and deprecated blocks.
#[rustfmt::skip]
const IPV6: &[Entry<u128>] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "::/128", "Unspecified Address", "RFC 4291", Refuse),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "::1/128", "Loopback Address", "RFC 4291", Refuse),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "::/96", "IPv4-Compatible Address (deprecated)", "RFC 4291", Refuse),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", EmbeddedV4),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "64:ff9b::/96", "IPv4-IPv6 Translation", "RFC 6052", EmbeddedV4),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "64:ff9b:1::/48", "IPv4-IPv6 Translation (local use)", "RFC 8215", Refuse),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "100::/64", "Discard-Only Address Block", "RFC 6666", Refuse),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", Refuse),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "2001::/23", "IETF Protocol Assignments", "RFC 2928", Refuse),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "2001::/32", "TEREDO", "RFC 4380", Refuse),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, "2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", Global),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, "2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", Global),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, "2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", Global),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, "2001:2::/48", "Benchmarking", "RFC 5180", Refuse),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, "2001:3::/32", "AMT", "RFC 7450", Global),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, "2001:4:112::/48", "AS112-v6", "RFC 7535", Global),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, "2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", Refuse),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "2001:20::/28", "ORCHIDv2", "RFC 7343", Global),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, "2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", Global),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "2001:db8::/32", "Documentation", "RFC 3849", Refuse),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "2002::/16", "6to4", "RFC 3056", EmbeddedV4),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", Global),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "3fff::/20", "Documentation", "RFC 9637", Refuse),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", Refuse),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "fc00::/7", "Unique-Local", "RFC 4193", Refuse),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "fe80::/10", "Link-Local Unicast", "RFC 4291", Refuse),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "fec0::/10", "Site-Local Unicast (deprecated)", "RFC 3879", Refuse),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "ff00::/8", "Multicast", "RFC 4291", Refuse),
];

/// IPv6 outside every table row and outside `2000::/3`.
const NOT_GLOBAL_UNICAST: SpecialRange = SpecialRange {
    block: "outside 2000::/3",
    name: "Reserved by IETF (not global unicast)",
    rfc: "RFC 4291",
    via: None,
};

fn longest_match<T: Copy + Into<u128>>(
    table: &'static [Entry<T>],
    addr: u128,
    width: u32,
) -> Option<&'static Entry<T>> {
    table
        .iter()
        .filter(|e| {
            let shift = width - e.len;
            let mask = if e.len == 0 {
                0
            } else {
                (u128::MAX >> (128 - width)) >> shift << shift
            };
            addr & mask == e.net.into() & mask
        })
        .max_by_key(|e| e.len)
}

fn range_of<T>(e: &Entry<T>) -> SpecialRange {
    SpecialRange {
        block: e.block,
        name: e.name,
        rfc: e.rfc,
        via: None,
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<SpecialRange> {
    let entry = longest_match(IPV4, u128::from(u32::from(ip)), 32)?;
    (entry.verdict == Refuse).then(|| range_of(entry))
}

fn non_public_v6(ip: Ipv6Addr) -> Option<SpecialRange> {
    let bits = u128::from(ip);
    let Some(entry) = longest_match(IPV6, bits, 128) else {
        let global_unicast = bits >> 125 == 0b001;
        return (!global_unicast).then_some(NOT_GLOBAL_UNICAST);
    };
    match entry.verdict {
        Refuse => Some(range_of(entry)),
        Global => None,
        EmbeddedV4 => {
            // 6to4 carries the IPv4 address in bits 16..48, the others in the last 32.
            let v4 = if entry.block == "2002::/16" {
                (bits >> 80) as u32
            } else {
                bits as u32
            };
            non_public_v4(Ipv4Addr::from(v4)).map(|range| SpecialRange {
                via: Some(entry.block),
                ..range
            })
        }
    }
}

/// The special-purpose block that makes `ip` non-public, or `None` for a public address.
pub fn non_public_range(ip: IpAddr) -> Option<SpecialRange> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}
