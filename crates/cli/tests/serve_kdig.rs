//! `volley serve` queried by a real client, kdig (Knot DNS), over UDP and TCP; and raw queries
//! for what kdig's text output cannot show exactly (ID, question and RDATA octets).

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::*;

/// kdig's output, with the header fields pulled out.
struct Dig {
    text: String,
}

impl Dig {
    fn status(&self) -> &str {
        self.header_field("status:")
    }

    fn id(&self) -> u16 {
        self.header_field("id:").parse().unwrap_or_else(|_| panic!("no id in kdig output:\n{}", self.text))
    }

    fn header_field(&self, key: &str) -> &str {
        let line = self
            .text
            .lines()
            .find(|l| l.contains("->>HEADER<<-"))
            .unwrap_or_else(|| panic!("no header in kdig output:\n{}", self.text));
        let at = line.find(key).unwrap_or_else(|| panic!("no `{key}` in {line}"));
        line[at + key.len()..].trim().split(|c: char| c == ';' || c.is_whitespace()).next().unwrap()
    }

    /// The flags of the `;; Flags: qr aa rd; QUERY: 1; ...` line.
    fn flags(&self) -> Vec<&str> {
        let line = self
            .text
            .lines()
            .find(|l| l.starts_with(";; Flags:"))
            .unwrap_or_else(|| panic!("no flags line in kdig output:\n{}", self.text));
        line[";; Flags:".len()..].split(';').next().unwrap().split_whitespace().collect()
    }

    fn count(&self, section: &str) -> u32 {
        let line = self.text.lines().find(|l| l.starts_with(";; Flags:")).unwrap();
        let key = format!("{section}: ");
        let at = line.find(&key).unwrap_or_else(|| panic!("no {section} count in {line}"));
        line[at + key.len()..].split(';').next().unwrap().trim().parse().unwrap()
    }

    /// Lines of the answer section, as kdig prints them.
    fn answers(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut inside = false;
        for l in self.text.lines() {
            if l.starts_with(";; ANSWER SECTION:") {
                inside = true;
                continue;
            }
            if inside {
                if l.trim().is_empty() || l.starts_with(";;") {
                    break;
                }
                out.push(l);
            }
        }
        out
    }

    fn question(&self) -> String {
        let mut lines = self.text.lines().skip_while(|l| !l.starts_with(";; QUESTION SECTION:"));
        lines.next();
        lines.next().unwrap_or_else(|| panic!("no question in kdig output:\n{}", self.text)).to_string()
    }

    /// `UDP size: 1232 B` from the EDNS pseudo-section, None when the response has no OPT.
    fn edns_udp_size(&self) -> Option<u32> {
        if !self.text.contains("EDNS PSEUDOSECTION") {
            return None;
        }
        let line = self.text.lines().find(|l| l.contains("UDP size:"))?;
        let at = line.find("UDP size:").unwrap();
        line[at + "UDP size:".len()..].split_whitespace().next()?.parse().ok()
    }
}

fn kdig(server: SocketAddr, tcp: bool, args: &[&str]) -> Dig {
    let bin = require("kdig");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .arg(if tcp { "+tcp" } else { "+notcp" })
        // Show a truncated UDP answer instead of retrying over TCP; one try, bounded wait.
        .arg("+ignore")
        .arg("+retry=0")
        .arg("+time=5")
        .args(args);
    let out = run_cmd(&mut cmd, Duration::from_secs(30));
    assert!(out.status.success(), "kdig {args:?} failed ({}):\n{}\n{}", out.status, out.stdout, out.stderr);
    Dig { text: out.stdout }
}

fn addr(s: &Server, tcp: bool) -> SocketAddr {
    if tcp {
        s.tcp_addr()
    } else {
        s.udp_addr()
    }
}

#[test]
fn a_aaaa_txt_answers_over_udp_and_tcp() {
    let s = Server::start();
    for tcp in [false, true] {
        let d = kdig(addr(&s, tcp), tcp, &["www.example.test", "A"]);
        assert_eq!(d.status(), "NOERROR", "{}", d.text);
        assert!(d.flags().contains(&"qr"), "{}", d.text);
        let ans = d.answers();
        assert_eq!(ans.len(), 1, "{}", d.text);
        let f: Vec<&str> = ans[0].split_whitespace().collect();
        assert_eq!(f, ["www.example.test.", "300", "IN", "A", "192.0.2.1"], "{}", d.text);

        let d = kdig(addr(&s, tcp), tcp, &["www.example.test", "AAAA"]);
        assert_eq!(d.status(), "NOERROR", "{}", d.text);
        let ans = d.answers();
        assert_eq!(ans.len(), 1, "{}", d.text);
        let f: Vec<&str> = ans[0].split_whitespace().collect();
        assert_eq!(f, ["www.example.test.", "300", "IN", "AAAA", "2001:db8::1"], "{}", d.text);

        let d = kdig(addr(&s, tcp), tcp, &["any.name.example", "TXT"]);
        assert_eq!(d.status(), "NOERROR", "{}", d.text);
        let ans = d.answers();
        assert_eq!(ans.len(), 1, "{}", d.text);
        let f: Vec<&str> = ans[0].split_whitespace().collect();
        assert_eq!(f, ["any.name.example.", "300", "IN", "TXT", "\"volley\""], "{}", d.text);
    }
}

#[test]
fn nxdomain_servfail_and_nodata() {
    let s = Server::start();
    for tcp in [false, true] {
        let d = kdig(addr(&s, tcp), tcp, &["x.nx.test", "A"]);
        assert_eq!(d.status(), "NXDOMAIN", "{}", d.text);
        assert_eq!(d.count("ANSWER"), 0, "{}", d.text);

        let d = kdig(addr(&s, tcp), tcp, &["x.fail.test", "A"]);
        assert_eq!(d.status(), "SERVFAIL", "{}", d.text);
        assert_eq!(d.count("ANSWER"), 0, "{}", d.text);

        // Another qtype: NOERROR with an empty answer (NODATA).
        let d = kdig(addr(&s, tcp), tcp, &["www.example.test", "MX"]);
        assert_eq!(d.status(), "NOERROR", "{}", d.text);
        assert_eq!(d.count("ANSWER"), 0, "{}", d.text);
        assert!(d.answers().is_empty(), "{}", d.text);
    }
}

#[test]
fn large_answer_truncated_over_udp_and_whole_over_tcp() {
    let s = Server::start();
    let d = kdig(s.udp_addr(), false, &["+bufsize=1232", "size-3000.test", "TXT"]);
    assert!(d.flags().contains(&"tc"), "expected TC=1 over UDP:\n{}", d.text);
    assert!(d.text.contains("Received"), "{}", d.text);

    let d = kdig(s.tcp_addr(), true, &["+bufsize=1232", "size-3000.test", "TXT"]);
    assert!(!d.flags().contains(&"tc"), "no TC over TCP:\n{}", d.text);
    assert_eq!(d.status(), "NOERROR", "{}", d.text);
    assert_eq!(d.count("ANSWER"), 1, "{}", d.text);

    // The exact octets, which kdig's presentation format hides.
    let q = build_query(0x3000, "size-3000.test", 16, Some(1232));
    let udp = parse_msg(&udp_exchange(s.udp_addr(), &q, Duration::from_secs(5)).unwrap()).unwrap();
    assert!(udp.tc(), "TC over UDP");
    let tcp = parse_msg(&tcp_exchange(s.tcp_addr(), &q, Duration::from_secs(5)).unwrap()).unwrap();
    assert!(!tcp.tc());
    assert_eq!(tcp.answers.len(), 1);
    assert_eq!(tcp.answers[0].rtype, 16);
    assert_eq!(tcp.answers[0].rdata.len(), 3000, "RDATA of exactly 3000 octets");

    // Smaller sizes fit in UDP and are exact too.
    let q = build_query(0x0100, "size-100.test", 16, Some(1232));
    let r = parse_msg(&udp_exchange(s.udp_addr(), &q, Duration::from_secs(5)).unwrap()).unwrap();
    assert!(!r.tc());
    assert_eq!(r.answers.len(), 1);
    assert_eq!(r.answers[0].rdata.len(), 100);
}

#[test]
fn edns_opt_echoed_with_size_1232() {
    let s = Server::start();
    for tcp in [false, true] {
        let d = kdig(addr(&s, tcp), tcp, &["+edns", "+bufsize=4096", "www.example.test", "A"]);
        assert_eq!(d.edns_udp_size(), Some(1232), "EDNS OPT with UDP size 1232 expected:\n{}", d.text);
        let d = kdig(addr(&s, tcp), tcp, &["+edns", "+bufsize=512", "www.example.test", "A"]);
        assert_eq!(d.edns_udp_size(), Some(1232), "{}", d.text);
        // No OPT in the query: none in the response (RFC 6891 section 7).
        let d = kdig(addr(&s, tcp), tcp, &["+noedns", "www.example.test", "A"]);
        assert_eq!(d.edns_udp_size(), None, "no OPT expected without EDNS in the query:\n{}", d.text);
    }
}

#[test]
fn id_and_question_echoed() {
    let s = Server::start();
    // kdig checks the ID and the question itself; its output shows both.
    for tcp in [false, true] {
        let d = kdig(addr(&s, tcp), tcp, &["Mixed.Case.Example", "AAAA"]);
        d.id(); // kdig prints the ID it matched

        let question = d.question().to_ascii_lowercase();
        let q: Vec<&str> = question.split_whitespace().collect();
        assert_eq!(q, [";;", "mixed.case.example.", "in", "aaaa"], "{}", d.text);
    }
    // Exact octets: the same ID, the same question section (case preserved), QR and RD.
    for (id, name, qtype) in
        [(0u16, "www.example.test", 1u16), (0xbeef, "MiXeD.case.test", 28), (0xffff, "a.b.c.d", 16)]
    {
        let q = build_query(id, name, qtype, Some(1232));
        let question_len = q.len() - 12 - 11; // without header and OPT
        for tcp in [false, true] {
            let raw = if tcp {
                tcp_exchange(s.tcp_addr(), &q, Duration::from_secs(5))
            } else {
                udp_exchange(s.udp_addr(), &q, Duration::from_secs(5))
            }
            .unwrap_or_else(|e| panic!("{name} over {}: {e}", if tcp { "tcp" } else { "udp" }));
            let r = parse_msg(&raw).unwrap_or_else(|e| panic!("malformed response to {name}: {e}"));
            assert_eq!(r.id, id);
            assert!(r.qr(), "QR set");
            assert!(r.rd(), "RD copied from the query");
            assert_eq!(r.qdcount, 1);
            assert_eq!(r.question, q[12..12 + question_len], "question echoed octet for octet");
            let opt = r.opt().expect("OPT echoed");
            assert_eq!(opt.class, 1232, "OPT UDP size");
        }
    }
}
