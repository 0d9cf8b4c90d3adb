//! From a captured frame to addresses, ports and payload: link layer (Ethernet with VLAN tags,
//! Linux cooked v1/v2, raw IP, BSD/OpenBSD loopback), IPv4 (with options) and IPv6 (hop-by-hop,
//! routing and destination options skipped; fragments refused), then UDP or TCP.
//!
//! Every length is checked: any input gives a [`Decoded`] or a [`DropReason`], never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::linktype;

/// Why a packet carries no DNS message we can use, at the link, IP or transport layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Not IPv4 or IPv6 (ARP, an unknown link type, ...).
    NotIp,
    /// IP, but neither UDP nor TCP (ICMP, ...).
    OtherProtocol,
    /// An IP fragment (IPv4 MF/offset, IPv6 fragment header): DNS queries are not reassembled
    /// from fragments.
    Fragment,
    /// A header is inconsistent or cut short (by the snap length or corruption).
    Malformed,
}

/// The transport part of a decoded packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    /// A TCP segment: its sequence number and the SYN/FIN/RST flags.
    Tcp {
        seq: u32,
        syn: bool,
        fin: bool,
        rst: bool,
    },
}

/// An IP packet carrying UDP or TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub transport: Transport,
    /// The UDP payload or the TCP segment's data.
    pub payload: &'a [u8],
}

/// Most VLAN tags followed before giving up (802.1ad QinQ uses two).
const MAX_VLAN_TAGS: usize = 8;

/// Decodes a frame of link type `linktype`.
pub fn decode(linktype: u32, frame: &[u8]) -> Result<Decoded<'_>, DropReason> {
    let (ethertype, ip) = match linktype {
        linktype::ETHERNET => {
            let mut at = 12;
            let mut et = be16(frame, at).ok_or(DropReason::Malformed)?;
            let mut tags = 0;
            while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
                tags += 1;
                if tags > MAX_VLAN_TAGS {
                    return Err(DropReason::Malformed);
                }
                at += 4;
                et = be16(frame, at).ok_or(DropReason::Malformed)?;
            }
            (Some(et), frame.get(at + 2..).ok_or(DropReason::Malformed)?)
        }
        linktype::LINUX_SLL => {
            (Some(be16(frame, 14).ok_or(DropReason::Malformed)?), frame.get(16..).ok_or(DropReason::Malformed)?)
        }
        linktype::LINUX_SLL2 => {
            (Some(be16(frame, 0).ok_or(DropReason::Malformed)?), frame.get(20..).ok_or(DropReason::Malformed)?)
        }
        linktype::RAW | linktype::RAW_BSD12 | linktype::RAW_BSD14 | linktype::IPV4 | linktype::IPV6 => (None, frame),
        linktype::NULL | linktype::LOOP => {
            let b = frame.get(..4).ok_or(DropReason::Malformed)?;
            let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            // The family is in the capturing host's byte order for NULL, network order for
            // LOOP; small values tell which. 2: AF_INET; 10 (Linux), 24, 28, 30 (BSDs): AF_INET6.
            let af = if linktype == linktype::LOOP || be < 256 { be } else { le };
            let et = match af {
                2 => 0x0800,
                10 | 24 | 28 | 30 => 0x86DD,
                _ => return Err(DropReason::NotIp),
            };
            (Some(et), &frame[4..])
        }
        _ => return Err(DropReason::NotIp),
    };
    let version = ip.first().map(|b| b >> 4);
    match (ethertype, version) {
        (Some(0x0800), _) | (None, Some(4)) => ipv4(ip),
        (Some(0x86DD), _) | (None, Some(6)) => ipv6(ip),
        (None, None) => Err(DropReason::Malformed),
        _ => Err(DropReason::NotIp),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn ipv4(p: &[u8]) -> Result<Decoded<'_>, DropReason> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return Err(DropReason::Malformed);
    }
    let ihl = (p[0] & 0x0f) as usize * 4;
    let total = be16(p, 2).unwrap() as usize;
    if ihl < 20 || total < ihl || p.len() < total {
        return Err(DropReason::Malformed);
    }
    let frag = be16(p, 6).unwrap();
    if frag & 0x2000 != 0 || frag & 0x1fff != 0 {
        return Err(DropReason::Fragment);
    }
    let src = IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19]));
    // Ethernet pads short frames: the IP total length says where the packet really ends.
    transport(p[9], src, dst, &p[ihl..total])
}

fn ipv6(p: &[u8]) -> Result<Decoded<'_>, DropReason> {
    if p.len() < 40 || p[0] >> 4 != 6 {
        return Err(DropReason::Malformed);
    }
    let plen = be16(p, 4).unwrap() as usize;
    if p.len() < 40 + plen {
        // plen 0 with a jumbo payload option is not something DNS uses.
        return Err(DropReason::Malformed);
    }
    let mut src = [0u8; 16];
    src.copy_from_slice(&p[8..24]);
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&p[24..40]);
    let (src, dst) = (IpAddr::V6(Ipv6Addr::from(src)), IpAddr::V6(Ipv6Addr::from(dst)));
    let body = &p[40..40 + plen];
    let mut next = p[6];
    let mut at = 0;
    // Bounded: each extension header is at least 8 bytes of a body of at most 64 KiB.
    loop {
        match next {
            // Hop-by-hop, routing, destination options: length in 8-byte units, not counting the first 8.
            0 | 43 | 60 => {
                let h = body.get(at..at + 2).ok_or(DropReason::Malformed)?;
                next = h[0];
                at += 8 + h[1] as usize * 8;
                if at > body.len() {
                    return Err(DropReason::Malformed);
                }
            }
            44 => return Err(DropReason::Fragment),
            _ => return transport(next, src, dst, &body[at..]),
        }
    }
}

fn transport(proto: u8, src: IpAddr, dst: IpAddr, seg: &[u8]) -> Result<Decoded<'_>, DropReason> {
    match proto {
        17 => {
            if seg.len() < 8 {
                return Err(DropReason::Malformed);
            }
            let ulen = be16(seg, 4).unwrap() as usize;
            if ulen < 8 || ulen > seg.len() {
                return Err(DropReason::Malformed);
            }
            Ok(Decoded {
                src,
                dst,
                sport: be16(seg, 0).unwrap(),
                dport: be16(seg, 2).unwrap(),
                transport: Transport::Udp,
                payload: &seg[8..ulen],
            })
        }
        6 => {
            if seg.len() < 20 {
                return Err(DropReason::Malformed);
            }
            let off = (seg[12] >> 4) as usize * 4;
            if off < 20 || off > seg.len() {
                return Err(DropReason::Malformed);
            }
            let flags = seg[13];
            Ok(Decoded {
                src,
                dst,
                sport: be16(seg, 0).unwrap(),
                dport: be16(seg, 2).unwrap(),
                transport: Transport::Tcp {
                    seq: u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]),
                    syn: flags & 0x02 != 0,
                    fin: flags & 0x01 != 0,
                    rst: flags & 0x04 != 0,
                },
                payload: &seg[off..],
            })
        }
        _ => Err(DropReason::OtherProtocol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_v4() -> Vec<u8> {
        let payload = b"hello";
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 2, 127, 0, 0, 1];
        let total = 20 + 8 + payload.len();
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip.extend_from_slice(&[0x30, 0x39, 0, 53]);
        ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.extend_from_slice(payload);
        ip
    }

    #[test]
    fn link_types() {
        let ip = udp_v4();
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x00]);
        eth.extend_from_slice(&ip);
        eth.extend_from_slice(&[0; 10]); // Ethernet padding
        let d = decode(linktype::ETHERNET, &eth).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.dport, 53);
        assert_eq!(d.src, "127.0.0.2".parse::<IpAddr>().unwrap());
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        assert_eq!(decode(linktype::NULL, &null).unwrap().payload, b"hello");
        let mut lp = 2u32.to_be_bytes().to_vec();
        lp.extend_from_slice(&ip);
        assert_eq!(decode(linktype::LOOP, &lp).unwrap().payload, b"hello");
        assert_eq!(decode(linktype::RAW, &ip).unwrap().payload, b"hello");
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(decode(linktype::LINUX_SLL2, &sll2).unwrap().payload, b"hello");
        // fragment
        let mut frag = ip.clone();
        frag[6] = 0x20;
        assert_eq!(decode(linktype::RAW, &frag), Err(DropReason::Fragment));
        assert_eq!(decode(9999, &ip), Err(DropReason::NotIp));
        for i in 0..eth.len() {
            let _ = decode(linktype::ETHERNET, &eth[..i]);
            for lt in [0, 1, 101, 108, 113, 276] {
                let _ = decode(lt, &eth[i..]);
            }
        }
    }
}
