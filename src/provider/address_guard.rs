//! Refusing non-public destinations (SSRF guard). Unless a provider sets
//! `allow_private_addresses`, the client never connects to an address that the IANA
//! special-purpose address registries (IPv4 and IPv6) mark as not globally reachable, nor
//! to multicast, the deprecated IPv6 blocks (site-local `fec0::/10`, IPv4-compatible
//! `::/96`) or anything outside IPv6 global unicast `2000::/3`. Addresses that embed an
//! IPv4 address (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are
//! judged by that IPv4 address; Teredo `2001::/32` is refused. The ranges are tables in
//! [`ranges`], one row per registry entry with its name and RFC.
//!
//! Two checks cover the two ways a destination is named: [`check_literal_host`] for IP
//! literals in the URL (reqwest does not resolve those), and [`PublicOnlyResolver`], a DNS
//! resolver that drops non-public answers and fails when none remain. Filtering the
//! resolver's answers (rather than checking a name before connecting) means the address
//! that was checked is the address that is connected to.

mod ranges;

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

pub use ranges::{non_public_range, SpecialRange};

/// A destination was refused because all its addresses are non-public.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NonPublicDestination {
    /// The host as written in the URL.
    pub host: String,
    /// The refused addresses.
    pub addresses: Vec<IpAddr>,
}

impl fmt::Display for NonPublicDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let described: Vec<String> = self
            .addresses
            .iter()
            .map(|ip| match non_public_range(*ip) {
                Some(range) => format!("{ip} ({range})"),
                None => format!("{ip} (non-public)"),
            })
            .collect();
        write!(
            f,
            "{} resolves only to non-public addresses: {} (allow_private_addresses is off)",
            self.host,
            described.join(", ")
        )
    }
}

/// Refuses a URL whose host is a non-public IP literal; host names pass (the resolver
/// checks what they resolve to).
pub fn check_literal_host(url: &Url) -> Result<(), NonPublicDestination> {
    let ip = match url.host() {
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(Host::Domain(_)) | None => return Ok(()),
    };
    match non_public_range(ip) {
        Some(_) => Err(NonPublicDestination {
            host: ip.to_string(),
            addresses: vec![ip],
        }),
        None => Ok(()),
    }
}

/// A DNS resolver (system resolver via tokio) that returns only public addresses, and a
/// [`NonPublicDestination`] error when a name resolves to nothing else.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if resolved.is_empty() {
                let error = io::Error::new(io::ErrorKind::NotFound, "name resolved to no address");
                return Err(error.into());
            }
            let (public, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved
                .into_iter()
                .partition(|addr| non_public_range(addr.ip()).is_none());
            if public.is_empty() {
                let addresses = refused.iter().map(SocketAddr::ip).collect();
                return Err(Box::new(NonPublicDestination { host, addresses }) as _);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One address inside and one just outside every special-purpose range (IANA IPv4 and
    /// IPv6 special-purpose registries, multicast, the deprecated IPv6 blocks, and the
    /// IPv4-embedding prefixes judged by their IPv4 address): `true` is refused.
    const SPECIAL_PURPOSE_CASES: &[(&str, bool)] = &[
        // 0.0.0.0/8 this network
        ("0.255.255.255", true),
        ("1.0.0.0", false),
        // 10.0.0.0/8 private-use
        ("10.255.255.255", true),
        ("11.0.0.0", false),
        ("9.255.255.255", false),
        // 100.64.0.0/10 shared address space (carrier-grade NAT, some metadata services)
        ("100.64.0.0", true),
        ("100.100.100.200", true),
        ("100.127.255.255", true),
        ("100.63.255.255", false),
        ("100.128.0.0", false),
        // 127.0.0.0/8 loopback
        ("127.255.255.255", true),
        ("128.0.0.0", false),
        // 169.254.0.0/16 link local
        ("169.254.169.254", true),
        ("169.253.255.255", false),
        ("169.255.0.0", false),
        // 172.16.0.0/12 private-use
        ("172.16.0.0", true),
        ("172.31.255.255", true),
        ("172.15.255.255", false),
        ("172.32.0.0", false),
        // 192.0.0.0/24 IETF protocol assignments (192.0.0.9 and .10 are global anycast)
        ("192.0.0.0", true),
        ("192.0.0.8", true),
        ("192.0.0.170", true),
        ("192.0.0.255", true),
        ("192.0.0.9", false),
        ("192.0.0.10", false),
        ("191.255.255.255", false),
        ("192.0.1.0", false),
        // 192.0.2.0/24 documentation (TEST-NET-1)
        ("192.0.2.1", true),
        ("192.0.3.0", false),
        // 192.88.99.0/24 deprecated 6to4 relay anycast
        ("192.88.99.1", true),
        ("192.88.98.255", false),
        ("192.88.100.0", false),
        // 192.168.0.0/16 private-use
        ("192.168.255.255", true),
        ("192.167.255.255", false),
        ("192.169.0.0", false),
        // 198.18.0.0/15 benchmarking
        ("198.18.0.0", true),
        ("198.19.255.255", true),
        ("198.17.255.255", false),
        ("198.20.0.0", false),
        // 198.51.100.0/24 documentation (TEST-NET-2)
        ("198.51.100.7", true),
        ("198.51.101.0", false),
        // 203.0.113.0/24 documentation (TEST-NET-3)
        ("203.0.113.9", true),
        ("203.0.112.255", false),
        ("203.0.114.0", false),
        // 224.0.0.0/4 multicast
        ("224.0.0.1", true),
        ("239.255.255.255", true),
        ("223.255.255.255", false),
        // 240.0.0.0/4 reserved, 255.255.255.255/32 limited broadcast
        ("240.0.0.1", true),
        ("255.255.255.254", true),
        ("255.255.255.255", true),
        // IPv6 ::/128 unspecified, ::1/128 loopback, ::/96 IPv4-compatible (deprecated)
        ("::", true),
        ("::1", true),
        ("::2", true),
        ("::8.8.8.8", true),
        ("::127.0.0.1", true),
        // ::ffff:0:0/96 IPv4-mapped: judged by the IPv4 address
        ("::ffff:127.0.0.1", true),
        ("::ffff:100.64.0.1", true),
        ("::ffff:8.8.8.8", false),
        // 64:ff9b::/96 IPv4/IPv6 translation: judged by the IPv4 address
        ("64:ff9b::10.0.0.1", true),
        ("64:ff9b::169.254.169.254", true),
        ("64:ff9b::8.8.8.8", false),
        // 64:ff9b:1::/48 local-use IPv4/IPv6 translation
        ("64:ff9b:1::8.8.8.8", true),
        // 100::/64 discard-only
        ("100::1", true),
        // 2001::/23 IETF protocol assignments, with Teredo 2001::/32 and benchmarking
        ("2001::1", true),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true),
        ("2001:2::1", true),
        ("2001:10::1", true),
        ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("2001:200::1", false),
        ("2001:1::1", false),
        ("2001:20::1", false),
        // 2001:db8::/32 documentation
        ("2001:db8::1", true),
        ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false),
        ("2001:db9::", false),
        // 2002::/16 6to4: judged by the embedded IPv4 address
        ("2002:a00:1::1", true),
        ("2002:7f00:1::", true),
        ("2002:c0a8:101::1", true),
        ("2002:808:808::1", false),
        // 3fff::/20 documentation
        ("3fff::1", true),
        ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("3fff:1000::", false),
        // 5f00::/16 segment routing SIDs (outside the global unicast 2000::/3)
        ("5f00::1", true),
        // fc00::/7 unique-local, fe80::/10 link-local, fec0::/10 site-local (deprecated)
        ("fc00::1", true),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("fe80::1", true),
        ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("fec0::1", true),
        ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        // ff00::/8 multicast
        ("ff02::1", true),
        ("ff0e::1", true),
        // global unicast just outside the special blocks
        ("2000::1", false),
        ("2606:4700::1111", false),
        ("2a00:1450:4001::1", false),
        ("3ffe:ffff::1", false),
    ];

    #[test]
    fn special_purpose_ranges_inside_and_just_outside() {
        let mut wrong = Vec::new();
        for (ip, refused) in SPECIAL_PURPOSE_CASES {
            let parsed: IpAddr = ip.parse().unwrap();
            if non_public_range(parsed).is_some() != *refused {
                wrong.push(format!("{ip} (expected refused={refused})"));
            }
        }
        assert!(wrong.is_empty(), "misjudged: {}", wrong.join(", "));
    }

    #[test]
    fn refused_addresses_name_their_registry_block() {
        let cases: &[(&str, Option<&str>)] = &[
            ("127.0.0.1", Some("127.0.0.0/8")),
            ("10.1.2.3", Some("10.0.0.0/8")),
            ("172.16.0.1", Some("172.16.0.0/12")),
            ("192.168.1.1", Some("192.168.0.0/16")),
            ("169.254.169.254", Some("169.254.0.0/16")),
            ("100.100.100.200", Some("100.64.0.0/10")),
            ("0.0.0.0", Some("0.0.0.0/32")),
            ("0.1.2.3", Some("0.0.0.0/8")),
            ("192.0.0.8", Some("192.0.0.8/32")),
            ("192.0.0.1", Some("192.0.0.0/29")),
            ("192.0.0.100", Some("192.0.0.0/24")),
            ("255.255.255.255", Some("255.255.255.255/32")),
            ("::1", Some("::1/128")),
            ("::", Some("::/128")),
            ("::10.0.0.1", Some("::/96")),
            ("fd00::1", Some("fc00::/7")),
            ("fe80::1", Some("fe80::/10")),
            ("2001:0:4136:e378::1", Some("2001::/32")),
            ("::ffff:127.0.0.1", Some("127.0.0.0/8")),
            ("::ffff:10.0.0.1", Some("10.0.0.0/8")),
            ("64:ff9b::a9fe:a9fe", Some("169.254.0.0/16")),
            ("2002:a9fe:a9fe::1", Some("169.254.0.0/16")),
            ("8::1", Some("outside 2000::/3")),
            ("172.32.0.1", None),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
            ("2606:4700::1111", None),
            ("::ffff:8.8.8.8", None),
        ];
        for (ip, expected) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(non_public_range(ip).map(|r| r.block), *expected, "{ip}");
        }
        let via = non_public_range("2002:a9fe:a9fe::1".parse().unwrap()).unwrap();
        assert_eq!(via.via, Some("2002::/16"));
        assert_eq!(
            via.to_string(),
            "Link Local, 169.254.0.0/16, RFC 3927; embedded in 2002::/16"
        );
    }

    #[test]
    fn literal_hosts_in_urls() {
        let refused = [
            "http://127.0.0.1:8080/x",
            "https://[::1]/",
            "http://0x7f.1/",
            "http://[::ffff:192.168.0.1]/",
            "http://169.254.169.254/latest/meta-data",
        ];
        for url in refused {
            let url = Url::parse(url).unwrap();
            assert!(check_literal_host(&url).is_err(), "{url}");
        }
        for url in [
            "https://api.example.com/v1",
            "http://8.8.8.8/",
            "http://localhost/",
        ] {
            assert!(
                check_literal_host(&Url::parse(url).unwrap()).is_ok(),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn resolver_refuses_names_resolving_to_loopback() {
        let name: Name = "localhost".parse().unwrap();
        let error = match PublicOnlyResolver.resolve(name).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        let refused = error
            .downcast_ref::<NonPublicDestination>()
            .expect("typed error");
        assert_eq!(refused.host, "localhost");
        assert!(refused.to_string().contains("Loopback"), "{refused}");
    }
}
