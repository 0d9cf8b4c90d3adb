//! Targets as URLs whose scheme picks the transport: `udp://127.0.0.1:5353`, `tcp://[::1]:53`.

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
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Udp => "udp",
            Scheme::Tcp => "tcp",
        }
    }

    pub fn default_port(self) -> u16 {
        53
    }

    /// Every scheme this build understands, for messages.
    pub const ALL: &'static [Scheme] = &[Scheme::Udp, Scheme::Tcp];
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
    /// The address connected to (the first the host resolves to).
    pub addr: SocketAddr,
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

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(url: &str) -> Result<Target, TargetError> {
        let bad = |why: &str| TargetError::Bad { url: url.to_string(), why: why.to_string() };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| TargetError::Syntax(url.to_string(), schemes()))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "udp" => Scheme::Udp,
            "tcp" => Scheme::Tcp,
            other => return Err(bad(&format!("unknown scheme '{other}' (known: {})", schemes()))),
        };
        let hostport = rest.split(['/', '?']).next().unwrap_or("");
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
        let addr = match host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => (host.as_str(), port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| TargetError::Resolve(url.to_string(), host.clone()))?,
        };
        Ok(Target { scheme, host, port, addr, url: url.to_string() })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.addr)
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
}
