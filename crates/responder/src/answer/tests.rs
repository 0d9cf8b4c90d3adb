use super::*;
use volley_wire::{parse_query, Edns, Name, QueryOptions, QueryTemplate};

fn q(name: &str, qtype: QType, edns: Option<Edns>) -> Vec<u8> {
    let opts = QueryOptions { edns, ..QueryOptions::default() };
    let t = QueryTemplate::new(&name.parse::<Name>().unwrap(), qtype, opts);
    let mut v = Vec::new();
    t.write(0xABCD, &mut v);
    v
}

fn e(size: u16) -> Option<Edns> {
    Some(Edns { udp_size: size, dnssec_ok: false, version: 0 })
}

/// A parsed answer record: (type, class, ttl, rdata).
type Rr = (u16, u16, u32, Vec<u8>);
/// A parsed OPT record: (udp size, extended rcode, version, DO).
type Opt = (u16, u8, u8, bool);

/// Header, the answer records, and the OPT (udp size, ext rcode, version, DO) if present.
fn decode(query: &[u8], resp: &[u8]) -> (Header, Vec<Rr>, Option<Opt>) {
    let h = Header::parse(resp).unwrap();
    let qv = QueryView::parse(query).unwrap();
    assert_eq!(&resp[12..qv.question_end], qv.question(), "question echoed byte for byte");
    let mut at = qv.question_end;
    let mut rrs = Vec::new();
    for _ in 0..h.ancount {
        assert_eq!(&resp[at..at + 2], &[0xC0, 12]);
        let f = &resp[at + 2..at + 12];
        let rdlen = u16::from_be_bytes([f[8], f[9]]) as usize;
        rrs.push((
            u16::from_be_bytes([f[0], f[1]]),
            u16::from_be_bytes([f[2], f[3]]),
            u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
            resp[at + 12..at + 12 + rdlen].to_vec(),
        ));
        at += 12 + rdlen;
    }
    let mut opt = None;
    if h.arcount == 1 {
        let o = &resp[at..];
        assert_eq!(o.len(), 11);
        assert_eq!(&o[..3], &[0, 0, 41]);
        opt = Some((u16::from_be_bytes([o[3], o[4]]), o[5], o[6], o[7] & 0x80 != 0));
        at += 11;
    }
    assert_eq!(at, resp.len(), "no trailing bytes");
    (h, rrs, opt)
}

fn run(a: &Answerer, query: &[u8], t: Transport) -> (Verdict, Vec<u8>) {
    let mut out = Vec::new();
    let v = a.answer(query, t, &mut out);
    (v, out)
}

const NOW: Verdict = Verdict::Reply { delay: None };

#[test]
fn synthesised_records() {
    let a = Answerer::new(AnswerConfig { ttl: 42, ..AnswerConfig::default() });
    for (qtype, rdata) in [
        (QType::A, vec![192, 0, 2, 1]),
        (QType::AAAA, vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        (QType::TXT, b"\x06volley".to_vec()),
        (QType::ANY, b"\x06volley".to_vec()),
    ] {
        let query = q("WwW.Example.Test", qtype, None);
        let (v, out) = run(&a, &query, Transport::Udp);
        assert_eq!(v, NOW);
        let (h, rrs, opt) = decode(&query, &out);
        assert_eq!(h.id, 0xABCD);
        assert_eq!(h.flags, Header::QR | Header::AA | Header::RD);
        assert_eq!((h.qdcount, h.ancount, h.nscount, h.arcount), (1, 1, 0, 0));
        let want_type = if qtype == QType::ANY { QType::TXT } else { qtype };
        assert_eq!(rrs, vec![(want_type.0, 1, 42, rdata)]);
        assert_eq!(opt, None);
    }
}

#[test]
fn nodata_nx_fail() {
    let a = Answerer::new(AnswerConfig::default());
    let query = q("a.test", QType::MX, None);
    let (h, rrs, _) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!((h.rcode(), rrs.len()), (Rcode::NOERROR, 0));
    for (name, rcode) in [
        ("a.nx.example.test", Rcode::NXDOMAIN),
        ("foo.NX", Rcode::NXDOMAIN),
        ("x.fail.test", Rcode::SERVFAIL),
        ("nx.fail.test", Rcode::SERVFAIL),
        ("nxx.test", Rcode::NOERROR),
        ("failing.test", Rcode::NOERROR),
    ] {
        let query = q(name, QType::A, None);
        let (v, out) = run(&a, &query, Transport::Udp);
        assert_eq!(v, NOW);
        let (h, rrs, _) = decode(&query, &out);
        assert_eq!(h.rcode(), rcode, "{name}");
        assert_eq!(rrs.len(), usize::from(rcode == Rcode::NOERROR), "{name}");
        assert_eq!(h.flags & Header::AA != 0, rcode != Rcode::SERVFAIL);
    }
}

#[test]
fn size_n_txt() {
    let a = Answerer::new(AnswerConfig::default());
    for n in [0usize, 1, 2, 254, 255, 256, 509, 510, 511, 1000, 3000, 65000] {
        let query = q(&format!("size-{n}.x.test"), QType::TXT, e(65535));
        let (v, out) = run(&a, &query, Transport::Tcp);
        assert_eq!(v, NOW);
        let (h, rrs, opt) = decode(&query, &out);
        assert!(!h.truncated());
        assert_eq!(opt, Some((1232, 0, 0, false)));
        let rdata = &rrs[0].3;
        assert_eq!(rdata.len(), n, "size-{n}");
        // well-formed character-strings, each at most 255 octets with its length octet
        let mut at = 0;
        while at < rdata.len() {
            let l = rdata[at] as usize;
            assert!(l <= 254);
            assert!(rdata[at + 1..at + 1 + l].iter().all(|&c| c == b'x'));
            at += 1 + l;
        }
        assert_eq!(at, n);
    }
    // out of range or not a number: not special
    for name in ["size-65001.test", "size-x.test", "size-.test", "size-100000.test"] {
        let query = q(name, QType::TXT, None);
        let (_, rrs, _) = decode(&query, &run(&a, &query, Transport::Tcp).1);
        assert_eq!(rrs[0].3, b"\x06volley", "{name}");
    }
    // size- with qtype A: plain A answer
    let query = q("size-3000.test", QType::A, None);
    let (_, rrs, _) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!(rrs[0].3, vec![192, 0, 2, 1]);
}

#[test]
fn edns_echo_size_and_truncation() {
    let a = Answerer::new(AnswerConfig { edns_size: 4096, ..AnswerConfig::default() });
    let dq = Some(Edns { udp_size: 1232, dnssec_ok: true, version: 0 });
    let query = q("a.test", QType::A, dq);
    let (h, _, opt) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!(h.arcount, 1);
    assert_eq!(opt, Some((4096, 0, 0, true)));

    // size-1000 fits in 1232 but not in 512
    let big = q("size-1000.test", QType::TXT, e(1232));
    let (h, rrs, opt) = decode(&big, &run(&a, &big, Transport::Udp).1);
    assert!(!h.truncated());
    assert_eq!(rrs[0].3.len(), 1000);
    assert!(opt.is_some());
    // requester's size below 512 counts as 512
    let small = q("size-1000.test", QType::TXT, e(100));
    let (v, out) = run(&a, &small, Transport::Udp);
    assert_eq!(v, NOW);
    let (h, rrs, opt) = decode(&small, &out);
    assert!(h.truncated());
    assert!(rrs.is_empty());
    assert_eq!(opt, Some((4096, 0, 0, false)));
    // no EDNS: 512
    let plain = q("size-600.test", QType::TXT, None);
    let (h, rrs, opt) = decode(&plain, &run(&a, &plain, Transport::Udp).1);
    assert!(h.truncated() && rrs.is_empty() && opt.is_none());
    let (h, rrs, _) = decode(&plain, &run(&a, &plain, Transport::Tcp).1);
    assert!(!h.truncated());
    assert_eq!(rrs[0].3.len(), 600);
    // exactly at the limit: 512 octets fit
    let base = run(&a, &q("size-000.test", QType::TXT, None), Transport::Udp).1.len();
    let fit = q(&format!("size-{:03}.test", 512 - base), QType::TXT, None);
    let out = run(&a, &fit, Transport::Udp).1;
    assert_eq!(out.len(), 512);
    assert!(!Header::parse(&out).unwrap().truncated());
    let over = q(&format!("size-{:03}.test", 513 - base), QType::TXT, None);
    assert!(Header::parse(&run(&a, &over, Transport::Udp).1).unwrap().truncated());
}

#[test]
fn error_rcodes() {
    let a = Answerer::new(AnswerConfig::default());
    // BADVERS
    let query = q("a.test", QType::A, Some(Edns { udp_size: 1232, dnssec_ok: false, version: 1 }));
    let (h, rrs, opt) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!(h.rcode(), Rcode::NOERROR, "low bits of 16 are 0");
    assert!(rrs.is_empty());
    assert_eq!(opt, Some((1232, 1, 0, false)));
    // REFUSED for class CH; ANY class is answered
    let mut query = q("a.test", QType::A, None);
    let n = query.len();
    query[n - 1] = 3;
    let (h, rrs, _) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!((h.rcode(), rrs.len()), (Rcode::REFUSED, 0));
    query[n - 1] = 255;
    let (h, rrs, _) = decode(&query, &run(&a, &query, Transport::Udp).1);
    assert_eq!((h.rcode(), rrs.len()), (Rcode::NOERROR, 1));
    // NOTIMP: opcode 2 (STATUS), header only, opcode echoed
    let mut query = q("a.test", QType::A, None);
    query[2] |= 2 << 3;
    let (v, out) = run(&a, &query, Transport::Udp);
    assert_eq!(v, Verdict::Error, "an error answer, which UDP may withhold");
    let h = Header::parse(&out).unwrap();
    assert_eq!(out.len(), 12);
    assert_eq!((h.id, h.rcode(), h.opcode().0, h.qdcount), (0xABCD, Rcode::NOTIMP, 2, 0));
    // FORMERR: qdcount 2, and a truncated question
    let mut query = q("a.test", QType::A, None);
    query[5] = 2;
    let (v, out) = run(&a, &query, Transport::Udp);
    assert_eq!(v, Verdict::Error);
    let h = Header::parse(&out).unwrap();
    assert_eq!((out.len(), h.id, h.rcode(), h.is_response()), (12, 0xABCD, Rcode::FORMERR, true));
    let query = q("a.test", QType::A, None);
    let out = run(&a, &query[..15], Transport::Udp).1;
    assert_eq!(Header::parse(&out).unwrap().rcode(), Rcode::FORMERR);
    // QR=1 and no header: not queries
    let mut query = q("a.test", QType::A, None);
    query[2] |= 0x80;
    assert_eq!(run(&a, &query, Transport::Udp).0, Verdict::Invalid);
    assert_eq!(run(&a, &query[..11], Transport::Udp).0, Verdict::Invalid);
    assert_eq!(run(&a, &[], Transport::Tcp).0, Verdict::Invalid);
}

#[test]
fn labels_drop_and_delay() {
    let a = Answerer::new(AnswerConfig::default());
    assert_eq!(run(&a, &q("x.DROP.test", QType::A, None), Transport::Udp).0, Verdict::Drop);
    let d = |s: &str| run(&a, &q(s, QType::A, None), Transport::Udp).0;
    assert_eq!(d("delay-200ms.test"), Verdict::Reply { delay: Some(Duration::from_millis(200)) });
    assert_eq!(d("DELAY-1S.test"), Verdict::Reply { delay: Some(Duration::from_secs(1)) });
    assert_eq!(d("delay-1500us.x"), Verdict::Reply { delay: Some(Duration::from_micros(1500)) });
    assert_eq!(d("delay-0ms.x"), NOW);
    assert_eq!(d("delay-2h.x"), NOW, "over the cap: not special");
    assert_eq!(d("delay-abc.x"), NOW);
    // combined: delay + nx
    let query = q("delay-1s.nx.test", QType::A, None);
    let (v, out) = run(&a, &query, Transport::Tcp);
    assert_eq!(v, Verdict::Reply { delay: Some(Duration::from_secs(1)) });
    assert_eq!(Header::parse(&out).unwrap().rcode(), Rcode::NXDOMAIN);
}

#[test]
fn rule_sequencing_is_exact() {
    let a = Answerer::new(AnswerConfig {
        delays: vec!["1s:1/25".parse().unwrap(), "5ms:2/10".parse().unwrap()],
        drop: Some("1/50".parse().unwrap()),
        ..AnswerConfig::default()
    });
    let query = q("a.test", QType::A, None);
    let mut out = Vec::new();
    let mut got = Vec::new();
    for _ in 0..100 {
        got.push(a.answer(&query, Transport::Udp, &mut out));
    }
    for (i, v) in got.iter().enumerate() {
        let k = i as u64 + 1;
        let want = if [50, 100].contains(&k) {
            Verdict::Drop
        } else if [25, 75].contains(&k) {
            Verdict::Reply { delay: Some(Duration::from_secs(1)) }
        } else if matches!(k % 10, 0 | 9) {
            Verdict::Reply { delay: Some(Duration::from_millis(5)) }
        } else {
            NOW
        };
        assert_eq!(*v, want, "query {k}");
    }
    // the label delay and a rule delay: the larger wins
    let a = Answerer::new(AnswerConfig { delays: vec!["1s:1/1".parse().unwrap()], ..AnswerConfig::default() });
    let query = q("delay-2s.test", QType::A, None);
    assert_eq!(a.answer(&query, Transport::Udp, &mut out), Verdict::Reply { delay: Some(Duration::from_secs(2)) });
    // malformed queries take no sequence number
    let a = Answerer::new(AnswerConfig { delays: vec!["1s:1/2".parse().unwrap()], ..AnswerConfig::default() });
    let good = q("a.test", QType::A, None);
    assert_eq!(a.answer(&good, Transport::Udp, &mut out), NOW);
    assert_eq!(a.answer(&good[..14], Transport::Udp, &mut out), Verdict::Error);
    assert_eq!(a.answer(&good, Transport::Udp, &mut out), Verdict::Reply { delay: Some(Duration::from_secs(1)) });
}

#[test]
fn fuzzish_inputs_never_panic() {
    let a = Answerer::new(AnswerConfig { delays: vec!["1ms:1/3".parse().unwrap()], ..AnswerConfig::default() });
    let mut out = Vec::new();
    let seeds = [
        q("size-3000.nx.delay-1ms.test", QType::TXT, e(1232)),
        q("a.b.c.d.e.f", QType::AAAA, None),
        q(".", QType::ANY, e(4096)),
    ];
    let check = |m: &[u8], out: &mut Vec<u8>| {
        for t in [Transport::Udp, Transport::Tcp] {
            if let Verdict::Reply { .. } | Verdict::Error = a.answer(m, t, out) {
                assert!(out.len() >= 12);
                assert!(out.len() <= 65535);
                let h = Header::parse(out).unwrap();
                assert!(h.is_response());
                assert_eq!(&out[..2], &m[..2]);
                // every reply is itself a parseable message when it has a question
                if h.qdcount == 1 {
                    assert!(parse_query(out).is_ok());
                }
            }
        }
    };
    for s in &seeds {
        for i in 0..=s.len() {
            check(&s[..i], &mut out);
        }
        for i in 0..s.len() {
            for b in 0..=255u8 {
                let mut m = s.clone();
                m[i] = b;
                check(&m, &mut out);
            }
        }
    }
    // pseudo-random bytes (xorshift), with a plausible header so the parser gets further
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let len = (rnd() % 80) as usize;
        let mut m: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        if m.len() > 12 && rnd() % 2 == 0 {
            m[2] &= 0x07;
            m[4] = 0;
            m[5] = 1;
        }
        check(&m, &mut out);
    }
}

#[test]
fn udp_responses_fit_their_limit() {
    let a = Answerer::new(AnswerConfig::default());
    let mut out = Vec::new();
    for n in (0..3000).step_by(97) {
        for size in [None, e(0), e(512), e(1232), e(1400)] {
            let query = q(&format!("size-{n}.x.test"), QType::TXT, size);
            a.answer(&query, Transport::Udp, &mut out);
            let limit = size.map_or(512, |e| (e.udp_size as usize).max(512));
            assert!(out.len() <= limit, "n={n} size={size:?} len={}", out.len());
        }
    }
}
