//! Ethernet frames of DNS over UDP, sans-IO: the template a lane's queries are written from
//! (Ethernet, IPv4 or IPv6, UDP; only the lengths, the source port and the checksums change
//! per query) and the reading of an answer's frame.

use std::net::{IpAddr, SocketAddr};

/// Ethernet + IPv4 + UDP headers.
pub const V4_HEADERS: usize = 14 + 20 + 8;
/// Ethernet + IPv6 + UDP headers.
pub const V6_HEADERS: usize = 14 + 40 + 8;

/// The headers of every query from one source address to one target; [`Template::write`]
/// fills in a query.
#[derive(Clone, Debug)]
pub struct Template {
    hdr: [u8; V6_HEADERS],
    len: usize,
    v6: bool,
}

impl Template {
    /// Headers from `src_mac`/`src` to `dst_mac`/`target` (both addresses of one family).
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], src: IpAddr, target: SocketAddr) -> Template {
        let mut hdr = [0u8; V6_HEADERS];
        hdr[0..6].copy_from_slice(&dst_mac);
        hdr[6..12].copy_from_slice(&src_mac);
        let (len, v6) = match (src, target.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                hdr[12..14].copy_from_slice(&[0x08, 0x00]);
                let ip = &mut hdr[14..34];
                ip[0] = 0x45;
                ip[6] = 0x40; // don't fragment
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                (V4_HEADERS, false)
            }
            (s, d) => {
                let s = match s {
                    IpAddr::V6(s) => s,
                    IpAddr::V4(s) => s.to_ipv6_mapped(),
                };
                let d = match d {
                    IpAddr::V6(d) => d,
                    IpAddr::V4(d) => d.to_ipv6_mapped(),
                };
                hdr[12..14].copy_from_slice(&[0x86, 0xdd]);
                let ip = &mut hdr[14..54];
                ip[0] = 0x60;
                ip[6] = 17;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                (V6_HEADERS, true)
            }
        };
        let udp = len - 8;
        hdr[udp + 2..udp + 4].copy_from_slice(&target.port().to_be_bytes());
        Template { hdr, len, v6 }
    }

    /// Header bytes before the DNS message.
    pub fn headers(&self) -> usize {
        self.len
    }

    /// Completes a frame whose DNS message (`payload` bytes) already sits at
    /// `frame[headers()..]`: headers, lengths, source port, checksums. Returns the frame's
    /// length.
    pub fn finish(&self, frame: &mut [u8], sport: u16, payload: usize) -> usize {
        let h = self.len;
        frame[..h].copy_from_slice(&self.hdr[..h]);
        let udp_len = (8 + payload) as u16;
        let udp = h - 8;
        frame[udp..udp + 2].copy_from_slice(&sport.to_be_bytes());
        frame[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
        if self.v6 {
            frame[18..20].copy_from_slice(&udp_len.to_be_bytes());
            // The UDP checksum is mandatory over IPv6: pseudo-header (addresses, length, next
            // header) and the datagram.
            let mut sum = sum16(&frame[22..54], 0);
            sum += u32::from(udp_len) + 17;
            sum = sum16(&frame[udp..h + payload], sum);
            let c = match fold(sum) {
                0 => 0xffff,
                c => c,
            };
            frame[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
        } else {
            let total = (20 + 8 + payload) as u16;
            frame[16..18].copy_from_slice(&total.to_be_bytes());
            let c = fold(sum16(&frame[14..34], 0));
            frame[24..26].copy_from_slice(&c.to_be_bytes());
            // IPv4's UDP checksum is optional (0: none); the headers' own is set above.
        }
        h + payload
    }
}

/// Adds 16-bit big-endian words (an odd last byte padded with zero).
fn sum16(b: &[u8], mut sum: u32) -> u32 {
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = it.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// The ones' complement of the folded sum: an Internet checksum (the header's own field 0).
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Reads a frame that should be an answer from `target`: its UDP destination port and its
/// DNS message. None when it is not a UDP datagram from `target` (or is cut short).
pub fn parse(frame: &[u8], target: SocketAddr) -> Option<(u16, &[u8])> {
    if frame.len() < V4_HEADERS {
        return None;
    }
    let udp = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => {
            let ip = &frame[14..34];
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17 {
                return None;
            }
            let IpAddr::V4(t) = target.ip() else { return None };
            if ip[12..16] != t.octets() {
                return None;
            }
            14 + ihl
        }
        0x86dd => {
            if frame.len() < V6_HEADERS || frame[20] != 17 {
                return None;
            }
            let IpAddr::V6(t) = target.ip() else { return None };
            if frame[22..38] != t.octets() {
                return None;
            }
            54
        }
        _ => return None,
    };
    let u = frame.get(udp..udp + 8)?;
    if u16::from_be_bytes([u[0], u[1]]) != target.port() {
        return None;
    }
    let dport = u16::from_be_bytes([u[2], u[3]]);
    let len = usize::from(u16::from_be_bytes([u[4], u[5]])).checked_sub(8)?;
    let msg = frame.get(udp + 8..udp + 8 + len)?;
    Some((dport, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap(frame: &mut [u8], v6: bool) {
        // The answer's frame: addresses and ports the other way round.
        let (a, b) = frame.split_at_mut(6);
        a.swap_with_slice(&mut b[..6]);
        let (s, l) = if v6 { (22, 16) } else { (26, 4) };
        let (x, y) = frame[s..].split_at_mut(l);
        x.swap_with_slice(&mut y[..l]);
        let u = if v6 { 54 } else { 34 };
        let (p, q) = frame[u..].split_at_mut(2);
        p.swap_with_slice(&mut q[..2]);
    }

    #[test]
    fn an_answer_reads_back_and_the_checksums_verify() {
        for (src, dst) in [("192.0.2.2", "192.0.2.1:53"), ("2001:db8::2", "[2001:db8::1]:5353")] {
            let target: SocketAddr = dst.parse().unwrap();
            let t = Template::new([2; 6], [4; 6], src.parse().unwrap(), target);
            let mut frame = vec![0u8; 2048];
            let msg = b"\x12\x34\x81\x80hello";
            frame[t.headers()..t.headers() + msg.len()].copy_from_slice(msg);
            let n = t.finish(&mut frame, 40_000, msg.len());
            let f = &mut frame[..n];
            let v6 = target.is_ipv6();
            if v6 {
                // Summed with its pseudo-header, a datagram with its checksum folds to 0.
                let len = (n - 54) as u32;
                let s = sum16(&f[54..], sum16(&f[22..54], len + 17));
                assert_eq!(fold(s), 0);
            } else {
                assert_eq!(fold(sum16(&f[14..34], 0)), 0);
                assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, n - 14);
            }
            assert_eq!(parse(f, target), None, "a query is not an answer");
            swap(f, v6);
            assert_eq!(parse(f, target), Some((40_000, &msg[..])));
            // Cut short: no answer, no panic.
            for k in 0..n {
                let _ = parse(&f[..k], target);
            }
        }
    }
}
