//! Targets as URLs whose scheme picks the transport: `udp://127.0.0.1:5353`, `tcp://[::1]:53`,
//! `tls://127.0.0.1:853` (DoT), `https://dns.example/dns-query` (DoH), `h3://dns.example`
//! (DoH over HTTP/3), `quic://127.0.0.1:853` (DoQ).

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;

use thiserror::Error;

/// A client transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// DNS over UDP (RFC 1035).
    Udp,
    /// DNS over TCP (RFC 1035 4.2.2, RFC 7766): 2-byte length prefix, pipelined.
    Tcp,
    /// DNS over TLS (RFC 7858): TCP framing inside TLS, pipelined.
    Tls,
    /// DNS over HTTPS (RFC 8484): HTTP/1.1, HTTP/2 or HTTP/3 as `LaneOptions::http` says.
    Https,
    /// DNS over HTTPS over HTTP/3 (`h3://`, shorthand for `https://` with `--http 3`).
    H3,
    /// DNS over QUIC (RFC 9250): one bidirectional stream per query.
    Quic,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Udp => "udp",
            Scheme::Tcp => "tcp",
            Scheme::Tls => "tls",
            Scheme::Https => "https",
            Scheme::H3 => "h3",
            Scheme::Quic => "quic",
        }
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Udp | Scheme::Tcp => 53,
            Scheme::Tls | Scheme::Quic => 853,
            Scheme::Https | Scheme::H3 => 443,
        }
    }

    /// Whether the transport is encrypted (TLS or QUIC): TLS settings apply.
    pub fn is_encrypted(self) -> bool {
        !matches!(self, Scheme::Udp | Scheme::Tcp)
    }

    /// Whether this is DNS over HTTPS (any HTTP version).
    pub fn is_https(self) -> bool {
        matches!(self, Scheme::Https | Scheme::H3)
    }

    /// Every scheme this build understands, for messages.
    pub const ALL: &'static [Scheme] =
        &[Scheme::Udp, Scheme::Tcp, Scheme::Tls, Scheme::Https, Scheme::H3, Scheme::Quic];
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    /// Host as written (a name or an address), without brackets.
    pub host: String,
    pub port: u16,
    /// The address connected to: the first of `addrs`, or the one a probe found answering
    /// ([`crate::probe::probe_addresses`]).
    pub addr: SocketAddr,
    /// Every address the host has, in the order they are tried (RFC 8305 in spirit): the
    /// resolver's order with IPv6 and IPv4 interleaved; a `localhost` name has both loopback
    /// addresses (RFC 6761) whatever the hosts file says. One address when written as one.
    pub addrs: Vec<SocketAddr>,
    /// DoH: the path and query of the URL (`/dns-query` when the URL has none); empty for
    /// the other schemes.
    pub path: String,
    /// The URL as given, for results.
    pub url: String,
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("unparsable target '{0}': expected SCHEME://HOST[:PORT] with SCHEME one of {1}")]
    Syntax(String, String),
    #[error("unparsable target '{url}': {why}")]
    Bad { url: String, why: String },
    #[error("target '{0}': cannot resolve host '{1}'")]
    Resolve(String, String),
}

fn schemes() -> String {
    Scheme::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
}

/// A target URL's parts, before its host is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlParts {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// Checks a target URL's syntax and splits it, resolving nothing.
pub(crate) fn parse_url(url: &str) -> Result<UrlParts, TargetError> {
    let bad = |why: &str| TargetError::Bad { url: url.to_string(), why: why.to_string() };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| TargetError::Syntax(url.to_string(), schemes()))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "udp" => Scheme::Udp,
        "tcp" => Scheme::Tcp,
        "tls" | "dot" => Scheme::Tls,
        "https" | "doh" => Scheme::Https,
        "h3" => Scheme::H3,
        "quic" | "doq" => Scheme::Quic,
        other => return Err(bad(&format!("unknown scheme '{other}' (known: {})", schemes()))),
    };
    let hostport = rest.split(['/', '?', '#']).next().unwrap_or("");
    let tail = rest[hostport.len()..].split('#').next().unwrap_or("");
    let path = if scheme.is_https() {
        match tail {
            "" | "/" => "/dns-query".to_string(),
            t if t.starts_with('?') => format!("/dns-query{t}"),
            t => t.to_string(),
        }
    } else {
        if !matches!(tail, "" | "/") {
            return Err(bad(&format!("a {scheme}:// target has no path ('{tail}')")));
        }
        String::new()
    };
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("the path contains spaces or control characters"));
    }
    if hostport.is_empty() {
        return Err(bad("missing host"));
    }
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let (h, after) = inner.split_once(']').ok_or_else(|| bad("missing ']' after IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("expected ':PORT' after ']'"))?),
        };
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad(&format!("'{h}' is not an IPv6 address")));
        }
        (h.to_string(), port)
    } else if hostport.matches(':').count() > 1 {
        return Err(bad("IPv6 addresses go in brackets, e.g. udp://[::1]:53"));
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let port = match port {
        None => scheme.default_port(),
        Some(p) => p.parse::<u16>().map_err(|_| bad(&format!("invalid port '{p}'")))?,
    };
    if port == 0 {
        return Err(bad("port 0 is not a destination"));
    }
    Ok(UrlParts { scheme, host, port, path })
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(url: &str) -> Result<Target, TargetError> {
        let UrlParts { scheme, host, port, path } = parse_url(url)?;
        let addrs = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let found: Vec<SocketAddr> =
                    (host.as_str(), port).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
                order_addresses(&host, port, found)
            }
        };
        let addr = *addrs.first().ok_or_else(|| TargetError::Resolve(url.to_string(), host.clone()))?;
        Ok(Target { scheme, host, port, addr, addrs, path, url: url.to_string() })
    }
}

/// The addresses of `host` in the order they are tried: the resolver's order (RFC 6724), each
/// once, the two families interleaved from the first one's (RFC 8305 section 4); a
/// `localhost` name gets the loopback address of a family its resolver left out (RFC 6761
/// section 6.3: such names always resolve to loopback).
fn order_addresses(host: &str, port: u16, found: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let mut found = found;
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        for ip in [IpAddr::from(std::net::Ipv6Addr::LOCALHOST), IpAddr::from(std::net::Ipv4Addr::LOCALHOST)] {
            if !found.iter().any(|a| a.is_ipv6() == ip.is_ipv6()) {
                found.push(SocketAddr::new(ip, port));
            }
        }
    }
    let mut seen = Vec::with_capacity(found.len());
    for a in found {
        if !seen.contains(&a) {
            seen.push(a);
        }
    }
    let first_v6 = seen.first().is_some_and(|a| a.is_ipv6());
    let (mut a, mut b): (std::collections::VecDeque<_>, std::collections::VecDeque<_>) =
        seen.into_iter().partition(|x| x.is_ipv6() == first_v6);
    let mut out = Vec::with_capacity(a.len() + b.len());
    loop {
        match (a.pop_front(), b.pop_front()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

impl Target {
    /// The same target at another of its addresses.
    pub fn at(&self, addr: SocketAddr) -> Target {
        Target { addr, ..self.clone() }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.addr, self.path)
    }
}

impl Target {
    /// Whether the host was written as an IP address (no SNI is sent then).
    pub fn host_is_ip(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok()
    }

    /// The HTTP authority: host (IPv6 in brackets) and the port when it is not 443.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == 443 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let t: Target = "udp://127.0.0.1:5353".parse().unwrap();
        assert_eq!((t.scheme, t.addr), (Scheme::Udp, "127.0.0.1:5353".parse().unwrap()));
        let t: Target = "tcp://[::1]".parse().unwrap();
        assert_eq!(t.addr, "[::1]:53".parse().unwrap());
        let t: Target = "TCP://localhost:53".parse().unwrap();
        assert_eq!(t.port, 53);
        for bad in [
            "foo://x",
            "udp://",
            "udp://[::1",
            "udp://::1",
            "udp://1.2.3.4:x",
            "127.0.0.1",
            "udp://[zz]:5",
            "udp://h:0",
        ] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
        let e = "foo://x".parse::<Target>().unwrap_err().to_string();
        assert!(e.contains("unknown scheme 'foo'"), "{e}");
    }

    #[test]
    fn addresses_interleave_families_and_localhost_has_both_loopbacks() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let got = order_addresses(
            "example.test",
            53,
            vec![a("[2001:db8::1]:53"), a("[2001:db8::2]:53"), a("192.0.2.1:53"), a("[2001:db8::1]:53")],
        );
        assert_eq!(got, [a("[2001:db8::1]:53"), a("192.0.2.1:53"), a("[2001:db8::2]:53")]);
        let got =
            order_addresses("example.test", 53, vec![a("192.0.2.1:53"), a("[2001:db8::1]:53"), a("192.0.2.2:53")]);
        assert_eq!(got, [a("192.0.2.1:53"), a("[2001:db8::1]:53"), a("192.0.2.2:53")]);
        // A hosts file that gives localhost only 127.0.0.1: ::1 is tried too (RFC 6761).
        assert_eq!(order_addresses("LocalHost.", 853, vec![a("127.0.0.1:853")]), [a("127.0.0.1:853"), a("[::1]:853")]);
        assert_eq!(order_addresses("localhost", 853, vec![]), [a("[::1]:853"), a("127.0.0.1:853")]);
        assert!(order_addresses("example.test", 53, vec![]).is_empty());
        let t: Target = "tls://localhost:853".parse().unwrap();
        assert!(t.addrs.len() >= 2 && t.addr == t.addrs[0], "{:?}", t.addrs);
        let t: Target = "tls://[::1]:853".parse().unwrap();
        assert_eq!(t.addrs, [t.addr]);
    }

    #[test]
    fn encrypted_schemes() {
        let t: Target = "tls://127.0.0.1".parse().unwrap();
        assert_eq!((t.scheme, t.port, t.path.as_str()), (Scheme::Tls, 853, ""));
        let t: Target = "quic://[::1]".parse().unwrap();
        assert_eq!((t.scheme, t.addr), (Scheme::Quic, "[::1]:853".parse().unwrap()));
        let t: Target = "https://127.0.0.1".parse().unwrap();
        assert_eq!((t.scheme, t.port, t.path.as_str()), (Scheme::Https, 443, "/dns-query"));
        assert_eq!(t.authority(), "127.0.0.1");
        let t: Target = "https://127.0.0.1:4431/resolve?x=1#frag".parse().unwrap();
        assert_eq!((t.port, t.path.as_str()), (4431, "/resolve?x=1"));
        assert_eq!(t.authority(), "127.0.0.1:4431");
        assert_eq!(t.to_string(), "https://127.0.0.1:4431/resolve?x=1");
        let t: Target = "h3://[::1]:8443".parse().unwrap();
        assert_eq!((t.scheme, t.path.as_str(), t.authority().as_str()), (Scheme::H3, "/dns-query", "[::1]:8443"));
        assert!(t.host_is_ip());
        let t: Target = "https://localhost/".parse().unwrap();
        assert_eq!(t.path, "/dns-query");
        assert!(!t.host_is_ip());
        assert!("tls://127.0.0.1/x".parse::<Target>().is_err());
        assert!("https://127.0.0.1/a b".parse::<Target>().is_err());
        assert!(Scheme::Quic.is_encrypted() && !Scheme::Tcp.is_encrypted() && Scheme::H3.is_https());
        // The aliases named after the protocols (docs/run.md).
        for (alias, scheme, port) in
            [("dot", Scheme::Tls, 853), ("doh", Scheme::Https, 443), ("doq", Scheme::Quic, 853)]
        {
            let t: Target = format!("{alias}://127.0.0.1").parse().unwrap();
            assert_eq!((t.scheme, t.port), (scheme, port), "{alias}");
            assert!(t.to_string().starts_with(&format!("{}://", scheme.as_str())), "{t}");
        }
    }
}
