//! Where frames to the target go: the interface and source address of the kernel's route,
//! the interface's MAC address and the next hop's (the kernel's neighbour table, resolved by
//! the kernel when it has no entry yet), as kxdpgun does. Read with iproute2 (`ip route get`,
//! `ip neigh`) and sysfs.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use super::XdpError;

pub struct Route {
    pub iface: String,
    pub ifindex: u32,
    pub src: IpAddr,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Receive queues of the interface.
    pub queues: u32,
}

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The word after `key` in iproute2's one-line output.
fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut w = line.split_whitespace();
    while let Some(x) = w.next() {
        if x == key {
            return w.next();
        }
    }
    None
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

fn sysfs(iface: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{what}")).ok().map(|s| s.trim().to_string())
}

/// Resolves the way to `target`, over `iface` when given.
pub fn resolve(target: IpAddr, iface: Option<&str>) -> Result<Route, XdpError> {
    if let Some(i) = iface {
        check_iface(i)?;
    }
    let t = target.to_string();
    let mut args = vec!["-o", "route", "get", t.as_str()];
    if let Some(i) = iface {
        args.extend(["oif", i]);
    }
    let line = ip(&args).map_err(|e| XdpError::NoRoute(target, e))?;
    let dev = after(&line, "dev").ok_or_else(|| XdpError::NoRoute(target, line.trim().to_string()))?.to_string();
    if let Some(i) = iface {
        if i != dev {
            return Err(XdpError::WrongInterface(target, dev, i.to_string()));
        }
    }
    check_iface(&dev)?;
    let src: IpAddr = after(&line, "src")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| XdpError::NoRoute(target, format!("no source address on {dev}")))?;
    let hop: IpAddr = after(&line, "via").and_then(|s| s.parse().ok()).unwrap_or(target);
    let ifindex =
        sysfs(&dev, "ifindex").and_then(|s| s.parse().ok()).ok_or_else(|| XdpError::NoInterface(dev.clone()))?;
    let src_mac =
        sysfs(&dev, "address").and_then(|s| parse_mac(&s)).ok_or_else(|| XdpError::NoNeighbour(hop, dev.clone()))?;
    let dst_mac = neighbour(hop, src, &dev)?;
    let queues = std::fs::read_dir(format!("/sys/class/net/{dev}/queues"))
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count() as u32)
        .unwrap_or(1);
    Ok(Route { iface: dev, ifindex, src, src_mac, dst_mac, queues })
}

fn check_iface(i: &str) -> Result<(), XdpError> {
    if i.is_empty() || i.contains('/') || sysfs(i, "ifindex").is_none() {
        return Err(XdpError::NoInterface(i.to_string()));
    }
    let flags = sysfs(i, "flags").and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok()).unwrap_or(0);
    if flags & libc::IFF_LOOPBACK as u32 != 0 {
        return Err(XdpError::Loopback(i.to_string()));
    }
    Ok(())
}

/// The MAC address of `hop` on `dev`. Without a usable entry the kernel is made to resolve
/// it (a datagram to the discard port) and asked again, for up to a second.
fn neighbour(hop: IpAddr, src: IpAddr, dev: &str) -> Result<[u8; 6], XdpError> {
    let h = hop.to_string();
    let look = || {
        let out = ip(&["-o", "neigh", "show", "to", h.as_str(), "dev", dev]).ok()?;
        out.lines().find_map(|l| {
            if l.contains("FAILED") || l.contains("INCOMPLETE") {
                return None;
            }
            after(l, "lladdr").and_then(parse_mac)
        })
    };
    if let Some(m) = look() {
        return Ok(m);
    }
    if let Ok(s) = UdpSocket::bind(SocketAddr::new(src, 0)) {
        let _ = s.send_to(&[], SocketAddr::new(hop, 9));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(m) = look() {
            return Ok(m);
        }
    }
    Err(XdpError::NoNeighbour(hop, dev.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_iproute2_lines() {
        let l = "192.0.2.1 via 10.0.0.1 dev veth0 src 10.0.0.2 uid 0 \\    cache";
        assert_eq!(after(l, "dev"), Some("veth0"));
        assert_eq!(after(l, "via"), Some("10.0.0.1"));
        assert_eq!(after(l, "src"), Some("10.0.0.2"));
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
    }
}
