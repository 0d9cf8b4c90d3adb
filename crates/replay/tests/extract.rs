//! Extraction on captures built byte by byte here: every layer this crate decodes, every
//! reason to drop, and every prefix and byte flip of the files (no panic, truncation reported).

use std::io::Cursor;
use std::net::IpAddr;

use volley_replay::{ClientsReader, Extractor, Options, Report};

// ---------------------------------------------------------------------------------------------
// Building packets
// ---------------------------------------------------------------------------------------------

fn query(id: u16, name: &str, qtype: u16, flags: u16, edns: Option<(u16, bool)>) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    m.extend_from_slice(&(edns.is_some() as u16).to_be_bytes());
    for l in name.split('.').filter(|l| !l.is_empty()) {
        m.push(l.len() as u8);
        m.extend_from_slice(l.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if let Some((size, dnssec)) = edns {
        m.push(0);
        m.extend_from_slice(&41u16.to_be_bytes());
        m.extend_from_slice(&size.to_be_bytes());
        m.extend_from_slice(&[0, 0, if dnssec { 0x80 } else { 0 }, 0, 0, 0]);
    }
    m
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.push(5 << 4);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, body: &[u8], frag: u16, options: bool) -> Vec<u8> {
    let ihl = if options { 6 } else { 5 };
    let mut p = vec![0x40 | ihl, 0];
    p.extend_from_slice(&((ihl as usize * 4 + body.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.extend_from_slice(&[64, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    if options {
        p.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    }
    p.extend_from_slice(body);
    p
}

fn ipv6(src: u16, dst: u16, proto: u8, body: &[u8], ext: Option<u8>) -> Vec<u8> {
    let mut inner = Vec::new();
    let next = if let Some(e) = ext {
        inner.extend_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]); // one 8-byte option header
        e
    } else {
        proto
    };
    inner.extend_from_slice(body);
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    p.push(next);
    p.push(64);
    let mut a = [0u8; 16];
    a[14..].copy_from_slice(&src.to_be_bytes());
    p.extend_from_slice(&a);
    a[14..].copy_from_slice(&dst.to_be_bytes());
    p.extend_from_slice(&a);
    p.extend_from_slice(&inner);
    p
}

fn ether(ethertype: u16, ip: &[u8], vlan: bool) -> Vec<u8> {
    let mut e = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    if vlan {
        e.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    e.extend_from_slice(&ethertype.to_be_bytes());
    e.extend_from_slice(ip);
    e
}

fn framed(m: &[u8]) -> Vec<u8> {
    let mut f = (m.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(m);
    f
}

/// (time in µs, Ethernet frame) of a small capture with one of everything.
fn packets() -> Vec<(u64, Vec<u8>)> {
    let c1 = [10, 0, 0, 1];
    let c2 = [10, 0, 0, 2];
    let srv = [10, 0, 0, 53];
    let q1 = query(1, "www.example.test", 1, 0x0100, Some((1232, true)));
    let q2 = query(2, "www.example.test", 28, 0x0110, None);
    let resp = {
        let mut r = q1.clone();
        r[2] |= 0x80;
        r
    };
    let t1 = query(3, "tcp.example.test", 16, 0x0100, None);
    let t2 = query(4, "two.example.test", 15, 0x0100, None);
    let mut stream = framed(&t1);
    stream.extend_from_slice(&framed(&t2));
    let v6q = query(5, "six.example.test", 28, 0x0100, Some((4096, false)));
    vec![
        (1_000_000, ether(0x0800, &ipv4(c1, srv, 17, &udp(40000, 53, &q1), 0, false), false)),
        (1_000_100, ether(0x0800, &ipv4(srv, c1, 17, &udp(53, 40000, &resp), 0, false), false)),
        (1_000_200, ether(0x0806, &[0u8; 28], false)), // ARP
        (1_000_300, ether(0x0800, &ipv4(c1, srv, 1, &[8, 0, 0, 0], 0, false), false)), // ICMP
        (1_000_400, ether(0x0800, &ipv4(c1, srv, 17, &udp(40000, 80, &q1), 0, false), false)), // not DNS
        (1_000_500, ether(0x0800, &ipv4(c1, srv, 17, &udp(40000, 53, &q1), 0x2000, false), false)), // fragment
        (1_000_600, ether(0x0800, &ipv4(c1, srv, 17, &udp(40000, 53, &q1[..14]), 0, false), false)), // malformed DNS
        (1_000_700, ether(0x0800, &ipv4(c1, srv, 17, &udp(40000, 53, &q2), 0, true), true)), // VLAN + IP options
        // TCP from c2: SYN, message 1 split after one byte of its prefix, message 2 whole
        (2_000_000, ether(0x0800, &ipv4(c2, srv, 6, &tcp(50000, 53, 999, 0x02, &[]), 0, false), false)),
        (2_000_100, ether(0x0800, &ipv4(c2, srv, 6, &tcp(50000, 53, 1000, 0x18, &stream[..1]), 0, false), false)),
        (2_000_200, ether(0x0800, &ipv4(c2, srv, 6, &tcp(50000, 53, 1001, 0x18, &stream[1..20]), 0, false), false)),
        (2_000_250, ether(0x0800, &ipv4(c2, srv, 6, &tcp(50000, 53, 1001, 0x18, &stream[1..20]), 0, false), false)), // retransmission
        (2_000_300, ether(0x0800, &ipv4(c2, srv, 6, &tcp(50000, 53, 1020, 0x19, &stream[20..]), 0, false), false)),
        // IPv6 with a destination-options header
        (3_000_000, ether(0x86DD, &ipv6(1, 0x53, 17, &udp(40001, 53, &v6q), Some(60)), false)),
    ]
}

fn pcap(pkts: &[(u64, Vec<u8>)], cut_last: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for (ts, d) in pkts {
        f.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&(d.len() as u32).to_le_bytes());
        f.extend_from_slice(&(d.len() as u32).to_le_bytes());
        f.extend_from_slice(d);
    }
    if cut_last {
        f.truncate(f.len() - 3);
    }
    f
}

fn block(btype: u32, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    while b.len() % 4 != 0 {
        b.push(0);
    }
    let len = (b.len() + 12) as u32;
    let mut out = btype.to_be_bytes().to_vec();
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&b);
    out.extend_from_slice(&len.to_be_bytes());
    out
}

/// A big-endian pcapng file with nanosecond resolution (if_tsresol 9) and a skipped block.
fn pcapng(pkts: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut f = Vec::new();
    let mut shb = 0x1A2B3C4Du32.to_be_bytes().to_vec();
    shb.extend_from_slice(&[0, 1, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_be_bytes());
    f.extend_from_slice(&block(0x0A0D0D0A, &shb));
    let mut idb = vec![0, 1, 0, 0];
    idb.extend_from_slice(&0u32.to_be_bytes());
    idb.extend_from_slice(&[0, 9, 0, 1, 9, 0, 0, 0]); // if_tsresol = 10^-9
    idb.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(&block(1, &idb));
    f.extend_from_slice(&block(4, &[0, 0, 0, 0])); // a name resolution block: skipped
    for (ts, d) in pkts {
        let ns = ts * 1000 + 7; // not whole microseconds: the clients file keeps nanoseconds
        let mut epb = 0u32.to_be_bytes().to_vec();
        epb.extend_from_slice(&((ns >> 32) as u32).to_be_bytes());
        epb.extend_from_slice(&(ns as u32).to_be_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_be_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_be_bytes());
        epb.extend_from_slice(d);
        f.extend_from_slice(&block(6, &epb));
    }
    f
}

fn extract(file: &[u8]) -> Result<(Report, Vec<u8>), volley_replay::ExtractError> {
    let mut ex = Extractor::new(Options::default());
    ex.read_capture(file)?;
    let (report, out) = ex.write(Cursor::new(Vec::new())).unwrap();
    Ok((report, out.into_inner()))
}

fn clients(bytes: &[u8]) -> Vec<volley_replay::Client> {
    let r = ClientsReader::new(bytes, std::path::Path::new("t.clients"), Some(bytes.len() as u64)).unwrap();
    r.collect::<Result<Vec<_>, _>>().unwrap()
}

#[test]
fn one_of_everything() {
    for (what, file, tick) in [("pcap", pcap(&packets(), false), 1000u64), ("pcapng", pcapng(&packets()), 1)] {
        let (r, out) = extract(&file).unwrap();
        assert_eq!(r.packets, 14, "{what}");
        assert_eq!((r.not_ip, r.other_protocol, r.not_dns_port, r.fragment), (1, 1, 1, 1), "{what}");
        assert_eq!((r.queries, r.udp_queries, r.tcp_queries), (5, 3, 2), "{what}");
        assert_eq!((r.responses, r.malformed_messages), (1, 1), "{what}");
        assert_eq!(r.tcp_client.retransmitted, 1, "{what}");
        assert_eq!(r.tcp_incomplete(), 0, "{what}");
        assert!(r.truncated.is_none());
        assert_eq!(r.per_client, vec![2, 2, 1]);
        let cs = clients(&out);
        let c1 = &cs[0];
        assert_eq!(c1.addr, Some("10.0.0.1".parse::<IpAddr>().unwrap()));
        let q = &c1.queries;
        assert_eq!(
            (q[0].qname.to_string().as_str(), q[0].qtype.0, q[0].edns, q[0].dnssec_ok, q[0].cd),
            ("www.example.test.", 1, Some(1232), true, false)
        );
        assert_eq!((q[1].qtype.0, q[1].edns, q[1].cd), (28, None, true));
        assert_eq!(q[0].offset_ns, 0);
        assert_eq!(q[1].offset_ns, 700_000, "{what}");
        let c2 = &cs[1];
        assert_eq!(
            c2.queries.iter().map(|q| q.qname.to_string()).collect::<Vec<_>>(),
            ["tcp.example.test.", "two.example.test."]
        );
        assert!(c2.queries.iter().all(|q| q.tcp));
        // The split message counts from its first byte; the second from the segment holding its start.
        assert_eq!(c2.queries[0].offset_ns, 1_000_100_000, "{what}");
        assert_eq!(c2.queries[1].offset_ns, 1_000_300_000, "{what}");
        assert_eq!(
            volley_replay::ClientsReader::new(&out[..], std::path::Path::new("x"), None).unwrap().header().tick_ns
                as u64,
            tick
        );
        assert_eq!(cs[2].addr, Some("::1".parse::<IpAddr>().unwrap()));
        assert_eq!(cs[2].queries[0].edns, Some(4096));
    }
}

#[test]
fn truncated_captures_keep_what_came_before() {
    let file = pcap(&packets(), true);
    let (r, out) = extract(&file).unwrap();
    let t = r.truncated.as_deref().unwrap();
    assert!(t.contains("packet 14") && t.contains("cut short"), "{t}");
    assert_eq!(r.packets, 13);
    assert_eq!(clients(&out).len(), 2);
}

#[test]
fn not_captures() {
    for (bytes, what) in [
        (&b""[..], "empty"),
        (b"hello world, this is text", "unknown magic"),
        (b"\x1f\x8b\x08\x00", "gzip"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "header cut short"),
    ] {
        let e = extract(bytes).unwrap_err().to_string();
        assert!(e.contains("not a pcap or pcapng capture") && e.contains(what), "{e}");
    }
}

#[test]
fn every_prefix_and_byte_flip() {
    for file in [pcap(&packets(), false), pcapng(&packets())] {
        let (full, _) = extract(&file).unwrap();
        let mut last = 0;
        for i in 0..file.len() {
            match extract(&file[..i]) {
                Ok((r, out)) => {
                    // Queries only grow as more of the file is read.
                    assert!(r.queries >= last && r.queries <= full.queries, "prefix {i}");
                    last = r.queries;
                    if let Some(t) = &r.truncated {
                        assert!(t.starts_with("capture truncated at byte "), "{t}");
                    }
                    let _ = clients(&out);
                }
                Err(e) => assert!(i < 40, "prefix {i}: {e}"),
            }
            for v in [0x00, 0x01, 0x45, 0x7f, 0x80, 0xff] {
                let mut m = file.clone();
                m[i] = v;
                if let Ok((_, out)) = extract(&m) {
                    let _ = clients(&out);
                }
            }
        }
    }
}

/// A little-endian pcapng file of several interfaces: `ifaces` are (link type, if_tsresol, or
/// none for the default of microseconds), `pkts` are (interface, time in its units, frame).
fn pcapng_ifaces(ifaces: &[(u16, Option<u8>)], pkts: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
    let le_block = |btype: u32, body: &[u8]| {
        let mut b = body.to_vec();
        while b.len() % 4 != 0 {
            b.push(0);
        }
        let len = (b.len() + 12) as u32;
        let mut out = btype.to_le_bytes().to_vec();
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&b);
        out.extend_from_slice(&len.to_le_bytes());
        out
    };
    let mut f = Vec::new();
    let mut shb = 0x1A2B3C4Du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    f.extend_from_slice(&le_block(0x0A0D0D0A, &shb));
    for &(linktype, tsresol) in ifaces {
        let mut idb = linktype.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0]);
        idb.extend_from_slice(&0u32.to_le_bytes()); // snaplen: none
        if let Some(r) = tsresol {
            idb.extend_from_slice(&[9, 0, 1, 0, r, 0, 0, 0]); // if_tsresol
            idb.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
        }
        f.extend_from_slice(&le_block(1, &idb));
    }
    for (iface, ts, d) in pkts {
        let mut epb = iface.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(*ts as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(d);
        f.extend_from_slice(&le_block(6, &epb));
    }
    f
}

/// An Ethernet frame (without VLAN tag) as a Linux cooked (SLL v1) one: packet type, ARPHRD
/// type, address length and address, then the same EtherType and packet.
fn as_cooked(frame: &[u8]) -> Vec<u8> {
    let mut c = vec![0, 0, 0, 1, 0, 6]; // sent to us, ARPHRD_ETHER, 6-byte address
    c.extend_from_slice(&frame[6..12]);
    c.extend_from_slice(&[0, 0]);
    c.extend_from_slice(&frame[12..]); // EtherType and packet
    c
}

/// The same packets captured on two interfaces (Ethernet in microseconds, the default
/// resolution; Linux cooked in nanoseconds, if_tsresol 9), each packet's time in its
/// interface's units, give the same report and the same clients file as one Ethernet
/// interface: each packet is decoded by its own interface's link type and clock.
#[test]
fn pcapng_with_two_interfaces_reads_as_one() {
    let pkts = packets();
    let single: Vec<(u32, u64, Vec<u8>)> = pkts.iter().map(|(us, d)| (0, us * 1000, d.clone())).collect();
    let single = pcapng_ifaces(&[(1, Some(9))], &single);
    // Every other packet on the cooked interface, but for the VLAN-tagged one (a cooked
    // header carries no tag).
    let mut on_cooked = 0;
    let two: Vec<(u32, u64, Vec<u8>)> = pkts
        .iter()
        .enumerate()
        .map(|(i, (us, d))| {
            let vlan = d[12..14] == [0x81, 0x00];
            if i % 2 == 1 && !vlan {
                on_cooked += 1;
                (1, us * 1000, as_cooked(d))
            } else {
                (0, *us, d.clone())
            }
        })
        .collect();
    assert!(on_cooked >= 6, "{on_cooked} packets on the second interface");
    // Both interfaces carry TCP segments of the one stream (IP at 16 after a cooked header, 14 after Ethernet).
    assert!(two.iter().any(|p| p.0 == 1 && p.2[16 + 9] == 6), "no TCP on the cooked interface");
    assert!(two.iter().any(|p| p.0 == 0 && p.2[14 + 9] == 6), "no TCP on the Ethernet interface");
    let two = pcapng_ifaces(&[(1, None), (113, Some(9))], &two);

    let (r1, out1) = extract(&single).unwrap();
    let (r2, out2) = extract(&two).unwrap();
    assert_eq!((r2.queries, r2.udp_queries, r2.tcp_queries), (5, 3, 2));
    assert_eq!((r2.not_ip, r2.other_protocol, r2.not_dns_port, r2.fragment), (1, 1, 1, 1));
    assert_eq!(r2.tcp_client.retransmitted, 1);
    assert!(r2.truncated.is_none());
    assert_eq!(format!("{r1:?}"), format!("{r2:?}"));
    assert_eq!(out1, out2, "the clients files differ");
    let cs = clients(&out2);
    assert_eq!(cs[1].queries[1].offset_ns, 1_000_300_000);
    assert_eq!(cs[0].queries[1].offset_ns, 700_000);
}
