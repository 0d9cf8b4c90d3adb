//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes, as a client could send them, and must never panic. Not an API.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};

use crate::answer::{AnswerConfig, Answerer, Ratio, Transport, Verdict};
use crate::ctx::Ctx;
use crate::doh::request::{self, Kind, Outcome};

/// Answers `query` over `t` and checks the answer: a reply is a response with the query's ID.
fn answer_one(a: &Answerer, query: &[u8], t: Transport, out: &mut Vec<u8>) {
    if let Verdict::Reply { .. } | Verdict::Error = a.answer(query, t, out) {
        let h = volley_wire::Header::parse(out).expect("a reply has a header");
        assert!(h.is_response(), "a reply is a response");
        assert_eq!(out[..2], query[..2], "a reply has the query's ID");
        if t == Transport::Udp {
            assert!(out.len() <= usize::from(u16::MAX));
        }
    }
}

/// A DNS query as the responder's answer engine reads it, over UDP (truncation) and TCP, with
/// the default settings and with delay and drop rules.
pub fn query(data: &[u8]) {
    let mut out = Vec::new();
    let plain = Answerer::new(AnswerConfig::default());
    let ruled = Answerer::new(AnswerConfig {
        delays: vec![crate::DelayRule { ratio: Ratio { n: 1, m: 3 }, delay: Duration::from_millis(5) }],
        drop: Some(Ratio { n: 1, m: 5 }),
        ..AnswerConfig::default()
    });
    for t in [Transport::Udp, Transport::Tcp] {
        answer_one(&plain, data, t, &mut out);
    }
    for _ in 0..3 {
        answer_one(&ruled, data, Transport::Doh, &mut out);
    }
}

fn ctx() -> Ctx {
    Ctx {
        answerer: Arc::new(Answerer::new(AnswerConfig::default())),
        counters: Arc::default(),
        idle_timeout: Duration::from_secs(10),
        max_queries: None,
        in_order: false,
        limits: Arc::new(crate::policy::Limits::new(None, None)),
        request_timeout: std::time::Duration::from_secs(5),
        max_pending_bytes: 256 * 1024,
        client_rate: None,
        open_conns: std::cell::Cell::new(0),
        room: Default::default(),
        crowded_at: 1024,
        max_streams: 100,
        doh_path: Arc::from("/dns-query"),
        faults: Arc::new(crate::faults::Active::new(&[]).expect("no faults")),
        cache_control: HeaderValue::from_static("max-age=300"),
        handshaker: Default::default(),
    }
}

/// An HTTP/1.1 DoH request (head and body) as the responder checks it: path, method, the
/// `?dns=` parameter (base64url), the content type, then the query answered. The head is
/// split by httparse (the parser hyper's server uses) into what hyper hands the responder.
pub fn doh_request(data: &[u8]) {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = req.parse(data) else { return };
    let (Some(m), Some(path)) = (req.method, req.path) else { return };
    let (Ok(method), Ok(uri)) = (Method::from_bytes(m.as_bytes()), path.parse::<Uri>()) else { return };
    let mut map = HeaderMap::new();
    for h in req.headers.iter() {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(h.value)) {
            map.append(n, v);
        }
    }
    let ctx = ctx();
    let (mut scratch, mut out) = (Vec::new(), Vec::new());
    let outcome = match request::check(&ctx, &method, &uri, &map, &mut scratch) {
        Ok(Kind::Get) => {
            assert!(!scratch.is_empty() && scratch.len() <= request::MAX_QUERY);
            request::answer(&ctx, None, &scratch, Transport::Doh, &mut out)
        }
        Ok(Kind::Post) => {
            let body = &data[head..];
            let body = &body[..body.len().min(request::MAX_QUERY)];
            request::answer(&ctx, None, body, Transport::Doh, &mut out)
        }
        Err(status) => {
            assert!(status.is_client_error());
            Outcome::Reply { head: request::status_head(status), delay: None }
        }
    };
    if let Outcome::Reply { head, .. } = outcome {
        if head.status() == StatusCode::OK {
            assert!(volley_wire::Header::parse(&out).is_ok_and(|h| h.is_response()));
        }
    }
    // The decoder alone, on the whole input.
    scratch.clear();
    if request::base64url_decode(data, &mut scratch) {
        assert!(scratch.len() <= data.len());
    }
}

/// A duration as the command line takes it (`--duration`, `--timeout`, delays...).
pub fn duration(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = crate::parse_duration(s);
}

/// A zone file as `volley serve --zone` reads it (text a user wrote), then queries answered
/// from what it loaded. The loader turns any text into zones or a one-line error that names
/// the file and line; the zones it loads answer their apex, names below it and every owner they
/// hold, for each common type, over UDP and TCP, without panicking. `$INCLUDE` is left out
/// (it would read other files of the machine).
pub fn zone_file(data: &[u8]) {
    use volley_wire::{Name, QType, QueryOptions, QueryTemplate};

    if data.windows(8).any(|w| w.eq_ignore_ascii_case(b"$include")) {
        return;
    }
    thread_local! {
        static FILE: std::path::PathBuf =
            std::env::temp_dir().join(format!("volley-fuzz-{}.zone", std::process::id()));
    }
    let path = FILE.with(Clone::clone);
    std::fs::write(&path, data).expect("the fuzzer writes its zone file");
    let zones = match crate::zone::load(std::slice::from_ref(&path)) {
        Ok(zones) => zones,
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "a zone error is one line: {line:?}");
            assert!(line.starts_with(&*path.to_string_lossy()), "a zone error names the file: {line:?}");
            return;
        }
    };
    let mut names: Vec<Vec<u8>> = Vec::new();
    for zone in zones.zones() {
        names.push(zone.apex.to_vec());
        names.extend(zone.nodes.names().take(16).map(|k| k.to_vec()));
        let mut below = vec![1, b'x'];
        below.extend_from_slice(&zone.apex);
        names.push(below);
    }
    let answerer = Answerer::new(AnswerConfig { zones: Some(Arc::new(zones)), ..AnswerConfig::default() });
    let mut out = Vec::new();
    let mut query = Vec::new();
    for wire in names {
        let Ok(name) = Name::from_wire(&wire) else { continue };
        for qtype in [1, 2, 5, 6, 15, 16, 28, 255, 65280] {
            let t = QueryTemplate::new(&name, QType(qtype), QueryOptions::default());
            query.clear();
            t.write(0x1234, &mut query);
            for transport in [Transport::Udp, Transport::Tcp] {
                answer_one(&answerer, &query, transport, &mut out);
            }
        }
    }
}

/// Queries on a TCP or DoT connection as the responder reads them (RFC 7766 length prefixes,
/// any split into reads), with and without delayed and dropped answers, in order or not, with
/// a query limit or not: see `tcp::fuzz_stream` for what is checked.
pub fn stream(data: &[u8]) {
    let mut ctx = ctx();
    if data.get(1).is_some_and(|mode| mode & 4 != 0) {
        ctx.answerer = Arc::new(Answerer::new(AnswerConfig {
            delays: vec![crate::DelayRule { ratio: Ratio { n: 1, m: 3 }, delay: Duration::from_millis(5) }],
            drop: Some(Ratio { n: 1, m: 5 }),
            ..AnswerConfig::default()
        }));
    }
    crate::tcp::fuzz_stream(&mut ctx, data);
}
