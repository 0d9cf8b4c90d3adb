//! `volley serve --zone FILE`: answers from a zone file compared with a real authoritative
//! server's (BIND's named, serving the same file) for the same questions, asked by kdig; the
//! zone over every transport; `--zones-only`; zone file errors (FILE:LINE, exit 2).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A zone with each feature: `$ORIGIN`, `$TTL`, `$INCLUDE`, relative and absolute names, a
/// multi-line SOA, NS, MX and SRV with targets inside and outside the zone, TXT, CAA, DNSKEY,
/// RRSIG, DS at a delegation with glue, CNAME chains (inside, dangling, leaving the zone),
/// wildcards (data and CNAME), an empty non-terminal, a duplicate record, a type in RFC 3597
/// form, a known type in RFC 3597 form, and an RRset with its own TTL.
const ZONE: &str = r#"; A zone with each feature volley serves.
$ORIGIN example.test.
$TTL 3600
@       IN  SOA ns1 hostmaster (
                2024010101 ; serial
                7200       ; refresh
                900        ; retry
                1209600    ; expire
                300 )      ; minimum: negative caching TTL
        IN  NS  ns1
        IN  NS  ns2.example.test.
        IN  MX  10 mail
        IN  MX  20 mail2.elsewhere.test.
        IN  TXT "v=spf1 -all"
        IN  CAA 0 issue "ca.example.net"
        IN  DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==
ns1     IN  A     192.0.2.53
ns1     IN  AAAA  2001:db8::53
ns2  60 IN  A     192.0.2.54
mail    IN  A     192.0.2.25
www     IN  A     192.0.2.80
        IN  A     192.0.2.81
        IN  A     192.0.2.81
        IN  AAAA  2001:db8::80
        IN  RRSIG A 13 3 3600 20300101000000 20240101000000 12345 example.test. Wq8uZz2l7PMGp9pSBCb8ILa2cP1F7QhQdL7o0z7mz6c0q2J9Yx2sBcZ8xwqN1a9ZcZr1HrE4e9bJ7yH6mH0cQw==
alias   IN  CNAME www
chain   IN  CNAME alias
dangling IN CNAME nothere
outside IN  CNAME www.elsewhere.test.
_sip._tcp IN SRV 10 60 5060 sip
sip     IN  A     192.0.2.60
a.b.c   IN  TXT   "deep" "two strings"
*.wild  IN  A     192.0.2.99
*.wild  IN  TXT   "wildcard"
*.cnamewild IN CNAME www
sub     IN  NS    ns.sub
sub     IN  DS    12345 13 2 3A3E4E9F3D5F6A5B8C9D0E1F2A3B4C5D6E7F8091A2B3C4D5E6F708192A3B4C5D
ns.sub  IN  A     192.0.2.200
unk     IN  TYPE65280 \# 4 0A000001
unk     IN  A     \# 4 C0000207
$TTL 600
$INCLUDE example.test.inc
$ORIGIN hosts.example.test.
h1      IN  A     192.0.2.101
"#;

const INCLUDED: &str = "; included with the current origin and $TTL\ninc     IN  A     192.0.2.70\n";

/// The questions both servers are asked: (name, type).
const QUESTIONS: &[(&str, &str)] = &[
    ("example.test", "SOA"),
    ("example.test", "NS"),
    ("example.test", "MX"),
    ("example.test", "TXT"),
    ("example.test", "CAA"),
    ("example.test", "DNSKEY"),
    ("example.test", "ANY"),
    ("example.test", "A"),
    ("www.example.test", "A"),
    ("WwW.ExAmPlE.tEsT", "A"),
    ("www.example.test", "AAAA"),
    ("www.example.test", "MX"),
    ("www.example.test", "RRSIG"),
    ("www.example.test", "ANY"),
    ("ns2.example.test", "A"),
    ("nope.example.test", "A"),
    ("deeper.nope.example.test", "TXT"),
    ("alias.example.test", "A"),
    ("alias.example.test", "CNAME"),
    ("chain.example.test", "AAAA"),
    ("chain.example.test", "TXT"),
    ("dangling.example.test", "A"),
    ("outside.example.test", "A"),
    ("_sip._tcp.example.test", "SRV"),
    ("a.b.c.example.test", "TXT"),
    ("b.c.example.test", "TXT"),
    ("c.example.test", "A"),
    ("foo.wild.example.test", "A"),
    ("foo.wild.example.test", "TXT"),
    ("x.y.wild.example.test", "A"),
    ("foo.wild.example.test", "AAAA"),
    ("wild.example.test", "A"),
    ("x.cnamewild.example.test", "A"),
    ("sub.example.test", "NS"),
    ("sub.example.test", "A"),
    ("x.sub.example.test", "A"),
    ("ns.sub.example.test", "A"),
    ("sub.example.test", "DS"),
    ("unk.example.test", "TYPE65280"),
    ("unk.example.test", "A"),
    ("inc.example.test", "A"),
    ("h1.hosts.example.test", "A"),
    ("hosts.example.test", "A"),
];

/// A reply as kdig shows it: RCODE, whether AA is set, and each section as a set of records
/// (owner lowercased, fields separated by one space).
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    status: String,
    aa: bool,
    tc: bool,
    sections: BTreeMap<String, BTreeSet<String>>,
}

fn kdig(port: u16, name: &str, qtype: &str, extra: &[&str]) -> Result<Reply, String> {
    let out = run_cmd(
        Command::new(require("kdig"))
            .arg("@127.0.0.1")
            .arg("-p")
            .arg(port.to_string())
            .args(["+timeout=2", "+retry=1", "+nocrypto"])
            .args(extra)
            .arg(name)
            .arg(qtype),
        Duration::from_secs(15),
    );
    if !out.status.success() {
        return Err(format!("kdig {name} {qtype}: {}\n{}{}", out.status, out.stdout, out.stderr));
    }
    parse_kdig(&out.stdout).ok_or_else(|| format!("kdig {name} {qtype}: unexpected output:\n{}", out.stdout))
}

fn parse_kdig(text: &str) -> Option<Reply> {
    let header = text.lines().find(|l| l.contains("->>HEADER<<-"))?;
    let status = header.split("status: ").nth(1)?.split(';').next()?.trim().to_string();
    let flags = text.lines().find(|l| l.starts_with(";; Flags:"))?;
    let flags: Vec<&str> = flags[";; Flags:".len()..].split(';').next()?.split_whitespace().collect();
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = None;
    for l in text.lines() {
        if let Some(s) = l.strip_prefix(";; ").and_then(|s| s.strip_suffix(" SECTION:")) {
            section = Some(s.to_string());
            continue;
        }
        if l.starts_with(";;") || l.trim().is_empty() {
            if l.trim().is_empty() || l.starts_with(";; Received") {
                section = None;
            }
            continue;
        }
        if let Some(s) = section.as_ref().filter(|s| *s != "QUESTION") {
            let mut fields = l.split_whitespace();
            let owner = fields.next()?.to_ascii_lowercase();
            let rest: Vec<&str> = fields.collect();
            sections.entry(s.clone()).or_default().insert(format!("{owner} {}", rest.join(" ")));
        }
    }
    Some(Reply { status, aa: flags.contains(&"aa"), tc: flags.contains(&"tc"), sections })
}

/// BIND's named, authoritative for `example.test` from `dir/example.test.zone` on a free
/// loopback port (UDP and TCP): `recursion no`, and `minimal-responses no-auth` (no NS
/// records in the authority section of positive answers: what volley, Knot and BIND's own
/// default for recursive queries do). Killed when dropped.
struct Named {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Named {
    fn start(dir: &Path) -> Named {
        let named = require("named");
        let mut last = String::new();
        for attempt in 0..5 {
            let port = free_port();
            let conf = format!(
                "controls {{ }};\noptions {{\n  directory \"{dir}\";\n  pid-file none;\n  session-keyfile \"{dir}/session-{attempt}.key\";\n  managed-keys-directory \"{dir}\";\n  listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  recursion no;\n  dnssec-validation no;\n  minimal-responses no-auth;\n  notify no;\n  allow-query {{ 127.0.0.0/8; }};\n}};\nzone \"example.test\" {{ type primary; file \"{dir}/example.test.zone\"; }};\n",
                dir = dir.display()
            );
            let conf_path = dir.join("named.conf");
            fs::write(&conf_path, conf).expect("write named.conf");
            let log = dir.join(format!("named-{attempt}.log"));
            let logf = fs::File::create(&log).expect("named log");
            let child = Command::new(&named)
                .args(["-g", "-n", "1", "-c"])
                .arg(&conf_path)
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(logf.try_clone().unwrap())
                .stderr(logf)
                .spawn()
                .expect("start named");
            let mut n = Named { child, port, log };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(status)) = n.child.try_wait() {
                    last = format!("named exited: {status}\n{}", n.log());
                    break;
                }
                if let Ok(r) = kdig(port, "example.test", "SOA", &["+retry=0", "+timeout=1"]) {
                    if r.status == "NOERROR" && r.aa {
                        return n;
                    }
                }
                if Instant::now() >= deadline {
                    last = format!("named not answering on port {port}\n{}", n.log());
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("named did not start: {last}");
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn zone_dir_with(zone: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("example.test.zone"), zone).unwrap();
    fs::write(dir.path().join("example.test.inc"), INCLUDED).unwrap();
    dir
}

fn zone_dir() -> tempfile::TempDir {
    zone_dir_with(ZONE)
}

/// Asks named and volley, both serving `dir`'s zone, each question over UDP, TCP and with
/// DO set; returns volley (still serving) and the questions whose answers differ.
fn compare_with_named(dir: &Path, questions: &[(&str, &str)]) -> (Server, Vec<String>) {
    let zone = dir.join("example.test.zone");
    let named = Named::start(dir);
    let volley = Server::start_with(&["--zone", zone.to_str().unwrap()]);
    let vport = volley.udp_addr().port();
    let mut differ = Vec::new();
    for &(name, qtype) in questions {
        for extra in [&[][..], &["+tcp"][..], &["+norec", "+dnssec"][..]] {
            let theirs = kdig(named.port, name, qtype, extra).unwrap_or_else(|e| panic!("{e}\n{}", named.log()));
            // `-p 0` gives UDP and TCP a free port each.
            let port = if extra.contains(&"+tcp") { volley.tcp_addr().port() } else { vport };
            let ours = kdig(port, name, qtype, extra).unwrap();
            assert!(!theirs.tc, "the test zone's answers fit in UDP: {name} {qtype} {theirs:?}");
            if ours != theirs {
                differ.push(format!("{name} {qtype} {extra:?}\n  named:  {theirs:?}\n  volley: {ours:?}"));
            }
        }
    }
    (volley, differ)
}

#[test]
fn answers_as_bind_does_for_the_same_zone_file() {
    let dir = zone_dir();
    let (volley, differ) = compare_with_named(dir.path(), QUESTIONS);
    let vport = volley.udp_addr().port();
    assert!(differ.is_empty(), "volley and named differ:\n{}", differ.join("\n"));
    // The questions cover each kind of answer.
    let kinds: BTreeSet<(String, bool, bool)> = QUESTIONS
        .iter()
        .map(|(n, t)| {
            let r = kdig(vport, n, t, &[]).unwrap();
            (r.status.clone(), r.aa, r.sections.contains_key("ADDITIONAL"))
        })
        .collect();
    for kind in [("NOERROR", true, false), ("NOERROR", true, true), ("NXDOMAIN", true, false), ("NOERROR", false, true)]
    {
        assert!(kinds.contains(&(kind.0.to_string(), kind.1, kind.2)), "no answer of kind {kind:?}: {kinds:?}");
    }
}

/// The same zone without its delegation: volley finds names in a zone without cuts another
/// way (walking up from the name to its closest encloser), and answers as named still does.
#[test]
fn answers_as_bind_does_for_a_zone_without_delegations() {
    let zone: String =
        ZONE.lines().filter(|l| !l.starts_with("sub") && !l.starts_with("ns.sub")).map(|l| format!("{l}\n")).collect();
    assert!(!zone.contains("IN  NS    ns.sub"));
    let dir = zone_dir_with(&zone);
    let more = [
        ("x.sub.example.test", "A"),
        ("a.b.nope.example.test", "A"),
        ("x.b.c.example.test", "A"),
        ("*.wild.example.test", "A"),
        ("a.b.x.wild.example.test", "TXT"),
        ("a.b.x.cnamewild.example.test", "AAAA"),
        ("x.h1.hosts.example.test", "A"),
    ];
    let questions: Vec<(&str, &str)> = QUESTIONS.iter().copied().chain(more).collect();
    let (_volley, differ) = compare_with_named(dir.path(), &questions);
    assert!(differ.is_empty(), "volley and named differ:\n{}", differ.join("\n"));
}

#[test]
fn every_transport_serves_the_zone() {
    let dir = zone_dir();
    let zone = dir.path().join("example.test.zone");
    let server = Server::start_encrypted(&["--zone", zone.to_str().unwrap()]);
    for transport in ["udp", "tcp", "tls", "https", "h3", "quic"] {
        let out = run_cmd(
            Command::new(volley())
                .args(["query", &server.url(transport), "chain.example.test", "AAAA", "--ca", server.ca_str()])
                .args(["--sni", "localhost"]),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{transport}: {}{}", out.stdout, out.stderr);
        for want in [
            "chain.example.test.\t3600\tIN\tCNAME\talias.example.test.",
            "alias.example.test.\t3600\tIN\tCNAME\twww.example.test.",
            "www.example.test.\t3600\tIN\tAAAA\t2001:db8::80",
            "status: NOERROR",
            "flags: qr aa rd;",
        ] {
            assert!(out.stdout.contains(want), "{transport}: no `{want}` in\n{}", out.stdout);
        }
        let out = run_cmd(
            Command::new(volley())
                .args(["query", &server.url(transport), "nope.example.test", "A", "--ca", server.ca_str()])
                .args(["--sni", "localhost"]),
            Duration::from_secs(30),
        );
        assert!(
            out.stdout.contains("status: NXDOMAIN") && out.stdout.contains("IN\tSOA\tns1.example.test."),
            "{transport}: {}",
            out.stdout
        );
    }
}

#[test]
fn names_outside_the_zones_are_synthesised_or_refused() {
    let dir = zone_dir();
    let zone = dir.path().join("example.test.zone");
    let zone = zone.to_str().unwrap();
    let plain = Server::start_with(&["--zone", zone]);
    let r = kdig(plain.udp_addr().port(), "www.other.test", "A", &[]).unwrap();
    assert_eq!(r.status, "NOERROR");
    assert!(r.aa && r.sections["ANSWER"].contains("www.other.test. 300 IN A 192.0.2.1"), "{r:?}");
    let r = kdig(plain.udp_addr().port(), "nx.example.test", "A", &[]).unwrap();
    assert!(
        r.status == "NXDOMAIN" && r.sections["AUTHORITY"].iter().any(|s| s.contains("SOA")),
        "zone, not label: {r:?}"
    );
    let r = kdig(plain.udp_addr().port(), "www.nx.other.test", "A", &[]).unwrap();
    assert!(r.status == "NXDOMAIN" && r.sections.is_empty(), "special label outside: {r:?}");

    let only = Server::start_with(&["--zone", zone, "--zones-only"]);
    let r = kdig(only.udp_addr().port(), "www.other.test", "A", &[]).unwrap();
    assert!(r.status == "REFUSED" && !r.aa && r.sections.is_empty(), "{r:?}");
    let r = kdig(only.udp_addr().port(), "www.example.test", "A", &[]).unwrap();
    assert!(r.status == "NOERROR" && r.aa && r.sections["ANSWER"].len() == 2, "{r:?}");
}

/// `volley serve --zone FILE` with a bad file: exit 2 and one line naming FILE:LINE and the
/// fault, before any listener.
fn zone_error(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.zone");
    fs::write(&path, text).unwrap();
    let out = run_cmd(Command::new(volley()).args(["serve", "-p", "0", "--zone"]).arg(&path), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "exit 2 for\n{text}\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "no listener: {}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    out.stderr.trim().replace(&format!("{}/", dir.path().display()), "")
}

#[test]
fn zone_file_errors_name_file_and_line() {
    let head =
        "$ORIGIN example.test.\n$TTL 300\n@ IN SOA ns1 hostmaster (\n    1 7200 900 1209600 300 )\n  IN NS ns1\n";
    let e = zone_error(&format!("{head}ns1 IN A 192.0.2.53\n; a bad TTL\nwww 1x IN A 192.0.2.80\n"));
    assert!(e.starts_with("volley: error: bad.zone:8: expected [TTL] [CLASS] TYPE"), "bad TTL: {e}");
    let e = zone_error(&format!("{head}$TTL forever\nwww IN A 192.0.2.80\n"));
    assert!(e.starts_with("volley: error: bad.zone:6: expected decimal number"), "bad $TTL: {e}");
    let e = zone_error(&format!("{head}ns1 IN A 192.0.2.53\nwww IN FOO 192.0.2.80\n"));
    assert!(e.starts_with("volley: error: bad.zone:7: expected [TTL] [CLASS] TYPE"), "unknown type: {e}");
    let e = zone_error("$ORIGIN example.test.\n$TTL 300\n\nwww IN A 192.0.2.80\nmail IN A 192.0.2.25\n");
    assert!(e.starts_with("volley: error: bad.zone:4: no SOA record"), "missing SOA: {e}");
    let e = zone_error(&format!("{head}ns1 IN A 192.0.2.53\nwww.other.test. IN A 192.0.2.80\n"));
    assert_eq!(
        e, "volley: error: bad.zone:7: www.other.test. is outside the zone example.test. (whose SOA is at bad.zone:3)",
        "out-of-zone record"
    );
    let e = zone_error(&format!("{head}www IN A 192.0.2.300\n"));
    assert!(e.starts_with("volley: error: bad.zone:6: expected IPv4 address"), "bad address: {e}");
    let e = zone_error(&format!("{head}$INCLUDE missing.inc\n"));
    assert!(e.starts_with("volley: error: bad.zone:6: $INCLUDE missing.inc: cannot read it"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.zone");
    let out =
        run_cmd(Command::new(volley()).args(["serve", "-p", "0", "--zone"]).arg(&missing), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stderr.contains("--zone: cannot read zone file") && out.stderr.contains("missing.zone"),
        "{}",
        out.stderr
    );
}
