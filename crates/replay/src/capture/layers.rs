//! From a captured frame to addresses, ports and payload. The link layer is found from the
//! capture's link type: Ethernet (with VLAN tags) through etherparse; Linux cooked v1/v2, raw IP
//! and BSD/OpenBSD loopback are a fixed-size header naming the protocol, read here (etherparse's
//! Linux cooked parser refuses every hardware type but Ethernet and a few others, the loopback
//! device `tcpdump -i any` captures on among them, and it has no v2). IPv4 (with options),
//! IPv6 (with its extension headers), UDP and TCP are etherparse's slices.
//!
//! Every length is checked: any input gives a [`Decoded`] or a [`DropReason`], never a panic.

use std::net::IpAddr;

use etherparse::{ether_type, ip_number, EtherType, Ethernet2Slice, IpPayloadSlice, Ipv4Slice, Ipv6Slice};
use etherparse::{SingleVlanSlice, TcpSlice, UdpSlice};

use super::linktype;

/// Why a packet carries no DNS message we can use, at the link, IP or transport layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Not IPv4 or IPv6 (ARP, an unknown link type, ...).
    NotIp,
    /// IP, but neither UDP nor TCP (ICMP, ...).
    OtherProtocol,
    /// An IP fragment (IPv4 MF/offset, an IPv6 fragment header with MF or an offset): DNS
    /// queries are not reassembled from fragments.
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
            let eth = Ethernet2Slice::from_slice_without_fcs(frame).map_err(|_| DropReason::Malformed)?;
            let (mut et, mut payload) = (eth.ether_type(), eth.payload_slice());
            let mut tags = 0;
            while matches!(
                et,
                ether_type::VLAN_TAGGED_FRAME | ether_type::PROVIDER_BRIDGING | ether_type::VLAN_DOUBLE_TAGGED_FRAME
            ) {
                tags += 1;
                if tags > MAX_VLAN_TAGS {
                    return Err(DropReason::Malformed);
                }
                let vlan = SingleVlanSlice::from_slice(payload).map_err(|_| DropReason::Malformed)?;
                (et, payload) = (vlan.ether_type(), vlan.payload_slice());
            }
            (Some(et), payload)
        }
        // Linux cooked v1: packet type, ARPHRD type, address length, address (8); protocol.
        linktype::LINUX_SLL => cooked(frame, 14, 16)?,
        // Linux cooked v2: protocol first, then reserved, interface, ARPHRD type, ... (20 bytes).
        linktype::LINUX_SLL2 => cooked(frame, 0, 20)?,
        linktype::RAW | linktype::RAW_BSD12 | linktype::RAW_BSD14 | linktype::IPV4 | linktype::IPV6 => (None, frame),
        linktype::NULL | linktype::LOOP => {
            let b = frame.get(..4).ok_or(DropReason::Malformed)?;
            let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            // The family is in the capturing host's byte order for NULL, network order for
            // LOOP; small values tell which. 2: AF_INET; 10 (Linux), 24, 28, 30 (BSDs): AF_INET6.
            let af = if linktype == linktype::LOOP || be < 256 { be } else { le };
            let et = match af {
                2 => ether_type::IPV4,
                10 | 24 | 28 | 30 => ether_type::IPV6,
                _ => return Err(DropReason::NotIp),
            };
            (Some(et), &frame[4..])
        }
        _ => return Err(DropReason::NotIp),
    };
    let version = ip.first().map(|b| b >> 4);
    let (src, dst, payload) = match (ethertype, version) {
        (Some(ether_type::IPV4), _) | (None, Some(4)) => {
            let p = Ipv4Slice::from_slice(ip).map_err(|_| DropReason::Malformed)?;
            let h = p.header();
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), p.payload().clone())
        }
        (Some(ether_type::IPV6), _) | (None, Some(6)) => {
            let p = Ipv6Slice::from_slice(ip).map_err(|_| DropReason::Malformed)?;
            let h = p.header();
            // A payload length of 0 is a jumbogram's (RFC 2675), which etherparse reads as the
            // rest of the frame: no DNS message travels in one.
            if h.payload_length() == 0 {
                return Err(DropReason::Malformed);
            }
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), p.payload().clone())
        }
        (None, None) => return Err(DropReason::Malformed),
        _ => return Err(DropReason::NotIp),
    };
    transport(src, dst, payload)
}

/// A cooked (Linux SLL) header: the protocol (an EtherType) at `proto_at`, the IP packet at `ip_at`.
fn cooked(frame: &[u8], proto_at: usize, ip_at: usize) -> Result<(Option<EtherType>, &[u8]), DropReason> {
    let p = frame.get(proto_at..proto_at + 2).ok_or(DropReason::Malformed)?;
    let ip = frame.get(ip_at..).ok_or(DropReason::Malformed)?;
    Ok((Some(EtherType(u16::from_be_bytes([p[0], p[1]]))), ip))
}

fn transport(src: IpAddr, dst: IpAddr, ip: IpPayloadSlice<'_>) -> Result<Decoded<'_>, DropReason> {
    if ip.fragmented {
        return Err(DropReason::Fragment);
    }
    match ip.ip_number {
        ip_number::UDP => {
            let u = UdpSlice::from_slice(ip.payload).map_err(|_| DropReason::Malformed)?;
            // etherparse reads a length of 0 as a jumbogram's (RFC 2675: the rest of the IP
            // payload); no packet of 64 KiB or less has it, and DNS has no jumbograms.
            if u.length() == 0 {
                return Err(DropReason::Malformed);
            }
            Ok(Decoded {
                src,
                dst,
                sport: u.source_port(),
                dport: u.destination_port(),
                transport: Transport::Udp,
                payload: u.payload(),
            })
        }
        ip_number::TCP => {
            let t = TcpSlice::from_slice(ip.payload).map_err(|_| DropReason::Malformed)?;
            Ok(Decoded {
                src,
                dst,
                sport: t.source_port(),
                dport: t.destination_port(),
                transport: Transport::Tcp { seq: t.sequence_number(), syn: t.syn(), fin: t.fin(), rst: t.rst() },
                payload: t.payload(),
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
        // Linux cooked v1 of the loopback device (ARPHRD_LOOPBACK, 772), which etherparse's
        // own cooked parser refuses.
        let mut sll = vec![0, 0, 0x03, 0x04, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        assert_eq!(decode(linktype::LINUX_SLL, &sll).unwrap().payload, b"hello");
        assert!(etherparse::LinuxSllSlice::from_slice(&sll).is_err());
        // A UDP length of 0 (a jumbogram's) is malformed.
        let mut zero = ip.clone();
        zero[24..26].copy_from_slice(&[0, 0]);
        assert_eq!(decode(linktype::RAW, &zero), Err(DropReason::Malformed));
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
