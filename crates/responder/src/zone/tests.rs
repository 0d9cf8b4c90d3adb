use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::answer::{AnswerConfig, Answerer, Transport};
use volley_wire::display::format_message;
use volley_wire::{Edns, Name, QType, QueryOptions, QueryTemplate};

const ZONE: &str = "\
$ORIGIN example.test.
$TTL 3600
@       IN SOA ns1 hostmaster ( 1 7200 900 1209600
                                300 )
        IN NS  ns1
        IN MX  10 mail
ns1     IN A   192.0.2.53
mail    IN A   192.0.2.25
www     IN A   192.0.2.80
        IN A   192.0.2.80
        IN A   192.0.2.81
alias   IN CNAME www
loop1   IN CNAME loop2
loop2   IN CNAME loop1
a.b.c   IN TXT \"deep\"
*.wild  IN A   192.0.2.99
sub     IN NS  ns.sub
ns.sub  IN A   192.0.2.200
unk     IN TYPE65280 \\# 2 0102
";

fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn answerer(zones: Zones, zones_only: bool) -> Answerer {
    Answerer::new(AnswerConfig { zones: Some(Arc::new(zones)), zones_only, ..AnswerConfig::default() })
}

fn ask(a: &Answerer, name: &str, qtype: u16, edns: Option<u16>) -> String {
    let opts = QueryOptions {
        edns: edns.map(|s| Edns { udp_size: s, dnssec_ok: false, version: 0 }),
        ..QueryOptions::default()
    };
    let t = QueryTemplate::new(&name.parse::<Name>().unwrap(), QType(qtype), opts);
    let mut q = Vec::new();
    t.write(7, &mut q);
    let mut out = Vec::new();
    a.answer(&q, Transport::Udp, &mut out);
    format_message(&out).unwrap()
}

fn example() -> (tempfile::TempDir, Answerer) {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "example.zone", ZONE);
    let zones = load(&[p]).unwrap();
    (dir, answerer(zones, false))
}

#[test]
fn qname_lowercases_and_finds_suffixes() {
    let q = QName::new(b"\x03WwW\x07Example\x04test\x00").unwrap();
    assert_eq!(q.wire(), b"\x03www\x07example\x04test\x00");
    assert_eq!(q.suffix(2).unwrap(), b"\x07example\x04test\x00");
    assert_eq!(q.suffix(0).unwrap(), b"\x00");
    assert_eq!(q.suffix(3).unwrap(), q.wire());
    assert!(q.suffix(4).is_none());
    assert!(QName::new(b"\x03www").is_none(), "no root label");
    assert_eq!((q.labels(), q.suffix_at(9), q.suffix_at(0)), (3, 0, 17), "more labels than there are: the whole");
    // A name read over one that failed to read, and over a longer one, holds only itself.
    let mut q = QName::empty();
    assert!(!q.read(b"\x03abc\x02de"));
    assert_eq!((q.wire(), q.labels(), q.suffix_at(1)), (&b""[..], 0, 0));
    assert!(q.read(b"\x05ABCDE\x04test\x00") && q.read(b"\x01X\x00"));
    assert_eq!((q.wire(), q.labels(), q.suffix(1)), (&b"\x01x\x00"[..], 1, Some(&b"\x01x\x00"[..])));
    assert_eq!(is_below(b"\x03www\x07example\x04test\x00", b"\x04test\x00"), Some(12));
    assert_eq!(is_below(b"\x03www\x07example\x04test\x00", b"\x03est\x00"), None, "not at a label boundary");
    assert_eq!(name_text(b"\x03www\x04te.t\x00"), "www.te\\.t.");
}

#[test]
fn names_compare_as_slices_do() {
    // Every length up to three words and a half, equal, and differing at each octet in turn
    // (the overlapping last word included); slices of different lengths never equal.
    let a: Vec<u8> = (0..28u8).map(|i| i.wrapping_mul(37).wrapping_add(5)).collect();
    let copy = a.clone();
    for n in 0..=a.len() {
        let x = &a[..n];
        assert!(names::same(x, &copy[..n]), "{n} octets, equal");
        for at in 0..n {
            let mut y = x.to_vec();
            y[at] ^= 0x20;
            assert!(!names::same(x, &y), "{n} octets, differing at {at}");
        }
        if n > 0 {
            assert!(!names::same(x, &a[..n - 1]) && !names::same(&a[..n - 1], x), "{n} against {}", n - 1);
        }
    }
}

#[test]
fn entries_are_found_on_their_lines() {
    let text = b"$ORIGIN x.\n; c\n\n@ SOA a b ( 1\n 2 3 4 5 )\n  NS a ; (\nwww A 1.2.3.4\n$TTL 5\nt TXT \"a;(\n\" x\n$INCLUDE f\nlast A 1.2.3.4";
    assert_eq!(entry_lines_of(text), vec![4, 6, 7, 9, 11, 12]);
}

fn entry_lines_of(text: &[u8]) -> Vec<u32> {
    load::entry_lines_for_tests(text)
}

#[test]
fn answers_records_and_negatives() {
    let (_d, a) = example();
    let r = ask(&a, "WWW.example.test", 1, None);
    assert!(r.contains("status: NOERROR") && r.contains("flags: qr aa rd;"), "{r}");
    assert!(r.contains("WWW.example.test.\t3600\tIN\tA\t192.0.2.80"), "owner as asked: {r}");
    assert_eq!(r.matches("\tA\t").count(), 2, "a duplicate record is one: {r}");
    let r = ask(&a, "nope.example.test", 1, None);
    assert!(r.contains("status: NXDOMAIN") && r.contains("flags: qr aa rd;"), "{r}");
    assert!(r.contains("example.test.\t300\tIN\tSOA\tns1.example.test. hostmaster.example.test. 1 7200"), "{r}");
    let r = ask(&a, "www.example.test", 16, None);
    assert!(r.contains("status: NOERROR") && r.contains("ANSWER: 0, AUTHORITY: 1"), "NODATA: {r}");
    let r = ask(&a, "b.c.example.test", 1, None);
    assert!(r.contains("status: NOERROR") && r.contains("ANSWER: 0, AUTHORITY: 1"), "empty non-terminal: {r}");
    let r = ask(&a, "unk.example.test", 65280, None);
    assert!(r.contains("ANSWER: 1"), "{r}");
}

#[test]
fn follows_cnames_and_wildcards() {
    let (_d, a) = example();
    let r = ask(&a, "alias.example.test", 1, None);
    assert!(r.contains("alias.example.test.\t3600\tIN\tCNAME\twww.example.test."), "{r}");
    assert!(r.contains("www.example.test.\t3600\tIN\tA\t192.0.2.81") && r.contains("ANSWER: 3"), "{r}");
    let r = ask(&a, "loop1.example.test", 1, Some(4096));
    assert!(r.contains("status: NOERROR"), "a loop ends: {r}");
    assert_eq!(r.matches("CNAME").count(), answer::MAX_CHAIN + 1, "{r}");
    let r = ask(&a, "x.y.wild.example.test", 1, None);
    assert!(r.contains("x.y.wild.example.test.\t3600\tIN\tA\t192.0.2.99"), "{r}");
    let r = ask(&a, "wild.example.test", 1, None);
    assert!(r.contains("ANSWER: 0, AUTHORITY: 1"), "the wildcard's parent exists, empty: {r}");
}

#[test]
fn refers_below_cuts_and_adds_addresses() {
    let (_d, a) = example();
    let r = ask(&a, "deep.sub.example.test", 1, None);
    assert!(r.contains("flags: qr rd;") && r.contains("status: NOERROR"), "referral, AA clear: {r}");
    assert!(r.contains("sub.example.test.\t3600\tIN\tNS\tns.sub.example.test."), "{r}");
    assert!(r.contains("ns.sub.example.test.\t3600\tIN\tA\t192.0.2.200"), "glue: {r}");
    let r = ask(&a, "example.test", 15, None);
    assert!(r.contains("ADDITIONAL: 1") && r.contains("mail.example.test.\t3600\tIN\tA\t192.0.2.25"), "{r}");
}

#[test]
fn outside_the_zones_synthesised_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "example.zone", ZONE);
    let r = ask(&answerer(load(std::slice::from_ref(&p)).unwrap(), false), "nx.other.test", 1, None);
    assert!(r.contains("status: NXDOMAIN") && !r.contains("SOA"), "special labels outside: {r}");
    let r = ask(&answerer(load(std::slice::from_ref(&p)).unwrap(), false), "nx.example.test", 1, None);
    assert!(r.contains("status: NXDOMAIN") && r.contains("SOA"), "from the zone: {r}");
    let r = ask(&answerer(load(&[p]).unwrap(), true), "www.other.test", 1, None);
    assert!(r.contains("status: REFUSED") && r.contains("flags: qr rd;"), "{r}");
}

#[test]
fn the_deepest_zone_answers() {
    let dir = tempfile::tempdir().unwrap();
    let parent = write(dir.path(), "p.zone", ZONE);
    let child = write(
        dir.path(),
        "c.zone",
        "sub.example.test. 60 IN SOA ns. hm. 1 2 3 4 5\nwww.sub.example.test. 60 IN A 192.0.2.7\n",
    );
    let a = answerer(load(&[parent, child]).unwrap(), false);
    let r = ask(&a, "www.sub.example.test", 1, None);
    assert!(r.contains("flags: qr aa rd;") && r.contains("192.0.2.7"), "{r}");
}

#[test]
fn the_deepest_zone_is_found_among_few_and_many() {
    // Few zones are compared one by one, many looked up by suffix: both find the deepest,
    // whatever the order the zones were given in.
    let dir = tempfile::tempdir().unwrap();
    let zone = |apex: &str| {
        let file = format!("{apex}zone");
        write(dir.path(), &file, &format!("{apex} 60 IN SOA ns. hm. 1 2 3 4 5\n"))
    };
    for many in [false, true] {
        let mut files = vec![zone("sub.example.test."), zone("example.test."), zone("test.")];
        if many {
            files.extend((0..SCAN_ZONES).map(|i| zone(&format!("z{i}.other."))));
        }
        for reversed in [false, true] {
            if reversed {
                files.reverse();
            }
            let zones = load(&files).unwrap();
            let apex = |name: &str| {
                let name = name.parse::<Name>().unwrap();
                zones.find(&QName::new(name.wire()).unwrap()).map(|z| z.apex_text())
            };
            let ctx = format!("{} zones, reversed {reversed}", zones.zones().len());
            assert_eq!(apex("www.sub.example.test").as_deref(), Some("sub.example.test."), "{ctx}");
            assert_eq!(apex("SUB.example.test").as_deref(), Some("sub.example.test."), "{ctx}");
            assert_eq!(apex("www.example.test").as_deref(), Some("example.test."), "{ctx}");
            assert_eq!(apex("x.test").as_deref(), Some("test."), "{ctx}");
            assert_eq!(apex("x.other").as_deref(), None, "{ctx}");
            assert_eq!(apex("a.z3.other").as_deref(), many.then_some("z3.other."), "{ctx}");
        }
    }
}

#[test]
fn big_answers_drop_additional_then_truncate() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("$ORIGIN t.\n@ 60 SOA ns hm 1 2 3 4 5\n");
    for i in 0..15 {
        text.push_str(&format!("@ 60 MX {i} mx{i}\nmx{i} 60 A 192.0.2.{i}\n"));
    }
    let a = answerer(load(&[write(dir.path(), "t.zone", &text)]).unwrap(), false);
    let r = ask(&a, "t", 15, Some(4096));
    assert!(r.contains("ANSWER: 15") && r.contains("ADDITIONAL: 16"), "{r}");
    let r = ask(&a, "t", 15, None);
    assert!(r.contains("ANSWER: 15") && r.contains("ADDITIONAL: 0") && !r.contains(" tc"), "fits without: {r}");
    let mut text = String::from("$ORIGIN t.\n@ 60 SOA ns hm 1 2 3 4 5\n");
    for i in 0..60 {
        text.push_str(&format!("@ 60 MX {i} mx{i}\n"));
    }
    let a = answerer(load(&[write(dir.path(), "t.zone", &text)]).unwrap(), false);
    let r = ask(&a, "t", 15, None);
    assert!(r.contains("flags: qr aa tc rd;") && r.contains("ANSWER: 0"), "{r}");
}

fn load_err(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "bad.zone", text);
    let e = load(&[p]).expect_err("an error").to_string();
    e.replace(&format!("{}/", dir.path().display()), "")
}

#[test]
fn zone_errors_name_file_and_line() {
    let head = "$ORIGIN example.test.\n$TTL 300\n@ SOA ns hm (\n 1 2 3 4 5 )\n";
    assert!(load_err(&format!("{head}\nwww 1x A 192.0.2.1\n")).starts_with("bad.zone:6: expected [TTL]"));
    assert!(load_err(&format!("{head}www FOO 192.0.2.1\n")).starts_with("bad.zone:5: expected [TTL]"));
    assert!(load_err(&format!("{head}www A 192.0.2.300\n")).starts_with("bad.zone:5: expected IPv4"));
    assert!(load_err("$ORIGIN example.test.\n; x\nwww 60 A 192.0.2.1\n").starts_with("bad.zone:3: no SOA record"));
    let e = load_err(&format!("{head}$ORIGIN other.\n\nwww A 192.0.2.1\n"));
    assert!(e.starts_with("bad.zone:7: www.other. is outside the zone example.test."), "{e}");
    let e = load_err(&format!("{head}x.example.test. SOA ns hm 1 2 3 4 5\n"));
    assert!(e.starts_with("bad.zone:5: a second SOA record"), "{e}");
    let e = load_err(&format!("{head}www CNAME a\nwww A 192.0.2.1\n"));
    assert!(e.starts_with("bad.zone:6: www.example.test. has a CNAME and other records"), "{e}");
    let e = load_err(&format!("{head}$INCLUDE nothere.inc\n"));
    assert!(e.starts_with("bad.zone:5: $INCLUDE"), "{e}");
    let e = load_err(&format!("{head}www CH A 192.0.2.1\n"));
    assert!(e.starts_with("bad.zone:5: different class"), "{e}");
    // An entry the end of the file cuts off inside parentheses (the scanner of domain 0.12.3
    // panicked on a TXT record there: found by the zone_file fuzz target) or a quoted string.
    let e = load_err(&format!("{head}www A 192.0.2.1\n@ IN (TXT \"a\"\nmail A 192.0.2.2\n"));
    assert_eq!(e, "bad.zone:6: '(' opened in this entry is not closed before the end of the file");
    // A TXT record and a comment the end of the file cuts off (no line end): it panicked too;
    // a file's last line needs no line end.
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "last.zone", &format!("{head}x TXT abc ;c"));
    let a = answerer(load(&[p]).unwrap(), false);
    assert!(ask(&a, "x.example.test", 16, None).contains("\"abc\""));
    // The scanner quotes the token it could not take, line ends and all: one line still.
    let e = load_err(&format!("{head}\"$ORIGIN x.\n$TTL 3\" A 192.0.2.1\n"));
    assert!(e.starts_with("bad.zone:") && e.contains("unknown control") && !e.contains('\n'), "{e}");
    let e = load_err(&format!("{head}www TXT \"a\n"));
    assert_eq!(e, "bad.zone:5: a quoted string opened in this entry is not closed before the end of the file");
}

#[test]
fn includes_are_read_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("inc")).unwrap();
    let parent = "$ORIGIN z.test.\n$TTL 77\n@ SOA ns hm 1 2 3 4 5\n$INCLUDE inc/hosts sub.z.test.\nafter A 192.0.2.8\n";
    write(dir.path(), "inc/hosts", "host A 192.0.2.9\nbad 60 A 1.2.3\n");
    let p = write(dir.path(), "z.zone", parent);
    let e = load(&[p]).unwrap_err().to_string();
    assert!(e.ends_with("inc/hosts:2: expected IPv4 address"), "{e}");
    write(dir.path(), "inc/hosts", "host A 192.0.2.9\n$ORIGIN elsewhere.z.test.\nx A 192.0.2.10\n");
    let p = write(dir.path(), "z.zone", parent);
    let a = answerer(load(&[p]).unwrap(), false);
    let r = ask(&a, "host.sub.z.test", 1, None);
    assert!(r.contains("host.sub.z.test.\t77\tIN\tA\t192.0.2.9"), "the $TTL in force: {r}");
    assert!(ask(&a, "x.elsewhere.z.test", 1, None).contains("192.0.2.10"));
    let r = ask(&a, "after.z.test", 1, None);
    assert!(r.contains("after.z.test.\t77\tIN\tA\t192.0.2.8"), "the origin is back after the include: {r}");
}

#[test]
fn the_smallest_ttl_bounds_an_http_cache() {
    let (_d, a) = example();
    let ttl_of = |name: &str, qtype: u16| {
        let t = QueryTemplate::new(&name.parse::<Name>().unwrap(), QType(qtype), QueryOptions::default());
        let mut q = Vec::new();
        t.write(7, &mut q);
        let mut out = Vec::new();
        a.answer(&q, Transport::Doh, &mut out);
        crate::answer::min_ttl(&out)
    };
    assert_eq!(ttl_of("www.example.test", 1), Some(3600));
    assert_eq!(ttl_of("nope.example.test", 1), Some(300), "the negative SOA's");
    assert_eq!(ttl_of("www.other.test", 1), Some(300), "synthesised: --ttl");
    assert_eq!(ttl_of("drop.other.test", 1), None, "no response");
}

/// A zone without cuts is answered by walking up from the name (its nearest ancestor the zone
/// holds, and that node's wildcard mark); one with cuts by walking down from the apex: both
/// give the same answers where no cut is in the way.
#[test]
fn zones_with_and_without_cuts_agree() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "*.x.y IN TXT \"w\"\na.*.ent IN A 192.0.2.5\nto-wild IN CNAME q.wild\nto-nx IN CNAME a.nope\n";
    let no_cuts: String = ZONE.lines().filter(|l| !l.contains("sub")).map(|l| format!("{l}\n")).collect();
    let with_cuts = format!("{no_cuts}{extra}zz IN NS ns.zz\nns.zz IN A 192.0.2.9\n");
    let no_cuts = format!("{no_cuts}{extra}");
    let plain = load(&[write(dir.path(), "plain.zone", &no_cuts)]).unwrap();
    assert!(!plain.zones()[0].has_cuts);
    assert_eq!(plain.zones()[0].nodes.names().count(), plain.zones()[0].names());
    let plain = answerer(plain, false);
    let cut = answerer(load(&[write(dir.path(), "cut.zone", &with_cuts)]).unwrap(), false);
    let names = [
        "example.test",
        "WWW.Example.TEST",
        "nope.example.test",
        "a.b.nope.example.test",
        "c.example.test",
        "b.c.example.test",
        "x.b.c.example.test",
        "a.b.c.example.test",
        "z.a.b.c.example.test",
        "wild.example.test",
        "*.wild.example.test",
        "q.wild.example.test",
        "p.q.wild.example.test",
        "y.example.test",
        "x.y.example.test",
        "k.x.y.example.test",
        "j.k.x.y.example.test",
        "*.ent.example.test",
        "a.*.ent.example.test",
        "b.ent.example.test",
        "to-wild.example.test",
        "to-nx.example.test",
        "alias.example.test",
        "loop1.example.test",
    ];
    let mut seen = 0;
    for name in names {
        for qtype in [1, 2, 5, 6, 15, 16, 28, 46, 255] {
            let (p, c) = (ask(&plain, name, qtype, Some(4096)), ask(&cut, name, qtype, Some(4096)));
            assert_eq!(p, c, "{name} type {qtype}");
            seen += usize::from(p.contains("status: NXDOMAIN")) + 2 * usize::from(p.contains("ANSWER: 0"));
        }
    }
    assert!(seen > 0);
    let r = ask(&plain, "a.b.q.wild.example.test", 1, None);
    assert!(r.contains("a.b.q.wild.example.test.\t3600\tIN\tA\t192.0.2.99"), "{r}");
    let r = ask(&plain, "b.ent.example.test", 1, None);
    assert!(r.contains("status: NOERROR") && r.contains("ANSWER: 0, AUTHORITY: 1"), "an empty wildcard: {r}");
    let r = ask(&plain, "a.nope.example.test", 1, None);
    assert!(r.contains("status: NXDOMAIN"), "{r}");
}

/// Two loads of one zone hold the same names and nodes (wherever the buffer put them), and
/// a zone with one record more differs.
#[test]
fn loads_of_one_zone_compare_equal() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "example.zone", ZONE);
    let (a, b) = (load(std::slice::from_ref(&p)).unwrap(), load(std::slice::from_ref(&p)).unwrap());
    assert!(a == b);
    assert_eq!(a.zones()[0].nodes.names().count(), a.zones()[0].names());
    let q = write(dir.path(), "more.zone", &format!("{ZONE}more IN A 192.0.2.1\n"));
    assert!(a != load(&[q]).unwrap());
}

/// Prefetching is a hint: whatever the messages hold, it changes no answer and never panics.
#[test]
fn prefetch_changes_no_answer() {
    let (_d, a) = example();
    let names = ["www.example.test", "nope.example.test", "x.sub.example.test", "other.test", "example.test"];
    let mut queries: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            let mut q = Vec::new();
            QueryTemplate::new(&n.parse::<Name>().unwrap(), QType(1), QueryOptions::default()).write(7, &mut q);
            q
        })
        .collect();
    let before: Vec<String> = names.iter().map(|n| ask(&a, n, 1, None)).collect();
    queries.extend([vec![], vec![0; 12], vec![0xFF; 300], [&[0u8; 12][..], &[63; 200]].concat()]);
    for _ in 0..3 {
        a.prefetch(queries.iter().map(|q| &q[..]));
    }
    a.prefetch(std::iter::repeat_n(&queries[0][..], 1000));
    let after: Vec<String> = names.iter().map(|n| ask(&a, n, 1, None)).collect();
    assert_eq!(before, after);
}

/// A wildcard right below the apex (whose node, like the apex's, the zone keeps at hand): it
/// answers the names the zone lacks below the apex, at any depth, with and without cuts; a
/// name below an existing node without one is NXDOMAIN.
#[test]
fn a_wildcard_at_the_apex_answers() {
    let dir = tempfile::tempdir().unwrap();
    let base = "$ORIGIN example.test.\n$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 900 1209600 300\n@ IN NS ns1\n\
                ns1 IN A 192.0.2.53\n* IN A 192.0.2.77\nwww IN A 192.0.2.80\n";
    let plain = load(&[write(dir.path(), "plain.zone", base)]).unwrap();
    let zone = &plain.zones()[0];
    assert_eq!(zone.nodes.apex().map(|n| n.name()), Some(&*zone.apex));
    assert_eq!(zone.nodes.apex_wildcard().map(|n| n.name()), Some(&b"\x01*\x07example\x04test\x00"[..]));
    let cut = format!("{base}sub IN NS ns.sub\nns.sub IN A 192.0.2.9\n");
    let cut = answerer(load(&[write(dir.path(), "cut.zone", &cut)]).unwrap(), false);
    let plain = answerer(plain, false);
    for a in [&plain, &cut] {
        let r = ask(a, "Nope.example.test", 1, None);
        assert!(r.contains("Nope.example.test.\t3600\tIN\tA\t192.0.2.77") && r.contains("ANSWER: 1"), "{r}");
        let r = ask(a, "a.b.nope.example.test", 1, None);
        assert!(r.contains("a.b.nope.example.test.\t3600\tIN\tA\t192.0.2.77"), "{r}");
        let r = ask(a, "nope.example.test", 28, None);
        assert!(r.contains("status: NOERROR") && r.contains("ANSWER: 0, AUTHORITY: 1"), "NODATA: {r}");
        let r = ask(a, "a.www.example.test", 1, None);
        assert!(r.contains("status: NXDOMAIN"), "{r}");
        for (name, qtype) in
            [("*.example.test", 1), ("www.example.test", 1), ("example.test", 6), ("x.y.z.example.test", 16)]
        {
            assert_eq!(ask(&plain, name, qtype, Some(4096)), ask(&cut, name, qtype, Some(4096)), "{name} type {qtype}");
        }
    }
    let r = ask(&cut, "x.sub.example.test", 1, None);
    assert!(r.contains("AUTHORITY: 1") && !r.contains("192.0.2.77"), "a referral, not the wildcard: {r}");
    let no_wildcard = load(&[write(dir.path(), "none.zone", &base.replace("* IN A 192.0.2.77\n", ""))]).unwrap();
    assert!(no_wildcard.zones()[0].nodes.apex_wildcard().is_none());
}
