//! Refusing non-public destinations (SSRF guard). Unless a provider sets
//! `allow_private_addresses`, the client never connects to loopback, private (RFC 1918),
//! link-local, unique-local IPv6, unspecified or "this network" (0.0.0.0/8) addresses,
//! including IPv4 addresses written as IPv4-mapped IPv6.
//!
//! Two checks cover the two ways a destination is named: [`check_literal_host`] for IP
//! literals in the URL (reqwest does not resolve those), and [`PublicOnlyResolver`], a DNS
//! resolver that drops non-public answers and fails when none remain. Filtering the
//! resolver's answers (rather than checking a name before connecting) means the address
//! that was checked is the address that is connected to.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

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
            .map(|ip| format!("{ip} ({})", non_public_range(*ip).unwrap_or("non-public")))
            .collect();
        write!(
            f,
            "{} resolves only to non-public addresses: {} (allow_private_addresses is off)",
            self.host,
            described.join(", ")
        )
    }
}

/// The name of the non-public range `ip` belongs to, or `None` for a public address.
pub fn non_public_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => non_public_v4(v4),
            None => non_public_v6(v6),
        },
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.octets()[0] == 0 {
        Some("unspecified")
    } else {
        None
    }
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first_segment = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if first_segment & 0xfe00 == 0xfc00 {
        Some("unique-local")
    } else if first_segment & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else {
        None
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

    #[test]
    fn ranges_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("127.0.0.1", Some("loopback")),
            ("127.255.0.9", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            ("169.254.169.254", Some("link-local")),
            ("0.0.0.0", Some("unspecified")),
            ("0.1.2.3", Some("unspecified")),
            ("::1", Some("loopback")),
            ("::", Some("unspecified")),
            ("fd00::1", Some("unique-local")),
            ("fc00::1", Some("unique-local")),
            ("fe80::1", Some("link-local")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:10.0.0.1", Some("private")),
            ("172.32.0.1", None),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
            ("2606:4700::1111", None),
            ("::ffff:8.8.8.8", None),
        ];
        for (ip, expected) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(non_public_range(ip), *expected, "{ip}");
        }
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
        assert!(refused.to_string().contains("(loopback)"), "{refused}");
    }
}
