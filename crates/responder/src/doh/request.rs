//! What DoH over HTTP/1.1, HTTP/2 and HTTP/3 share: checking a request (path, method,
//! `?dns=`, content type), answering its query, and applying the HTTP faults.

use std::net::IpAddr;
use std::time::Duration;

use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};

use crate::answer::{Transport, Verdict};
use crate::ctx::Ctx;
use crate::stats::add;

/// The DoH media type.
pub(crate) const DNS_MESSAGE: &str = "application/dns-message";
/// Largest DNS message accepted in a POST body or a `dns` parameter.
pub(crate) const MAX_QUERY: usize = 65_535;
/// Longest request target (path and query) taken: 8 KiB, about 6 KiB of query in `?dns=`
/// (DNS queries are a few hundred octets; larger ones go as POST). Longer: 414.
pub(crate) const MAX_URI: usize = 8 << 10;
/// Longest request head (HTTP/1.1: request line and headers) or header list (HTTP/2, HTTP/3)
/// an HTTP layer reads before it turns the request away (431) without reading more.
pub(crate) const MAX_HEAD: usize = 16 << 10;

/// A request that passed the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// GET: the query, decoded from `?dns=`, is in the scratch buffer.
    Get,
    /// POST: the query is the body.
    Post,
}

/// Checks the target's length (414 over [`MAX_URI`]), path, method and (GET) the `dns`
/// parameter, decoding it into `scratch`; (POST) the content type. The error is the status
/// to answer with.
pub(crate) fn check(
    ctx: &Ctx,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    scratch: &mut Vec<u8>,
) -> Result<Kind, StatusCode> {
    if uri.path_and_query().map_or(0, |p| p.as_str().len()) > MAX_URI {
        return Err(StatusCode::URI_TOO_LONG);
    }
    if uri.path() != &*ctx.doh_path {
        return Err(StatusCode::NOT_FOUND);
    }
    if method == Method::GET {
        let param = uri
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("dns=")))
            .ok_or(StatusCode::BAD_REQUEST)?;
        scratch.clear();
        if param.is_empty() || !base64url_decode(param.as_bytes(), scratch) || scratch.len() > MAX_QUERY {
            return Err(StatusCode::BAD_REQUEST);
        }
        Ok(Kind::Get)
    } else if method == Method::POST {
        let ct = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes).unwrap_or_default();
        let essence = ct.split(|&b| b == b';').next().unwrap_or_default();
        if !essence.trim_ascii().eq_ignore_ascii_case(DNS_MESSAGE.as_bytes()) {
            return Err(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        Ok(Kind::Post)
    } else {
        Err(StatusCode::METHOD_NOT_ALLOWED)
    }
}

/// What to do with a request whose query has been read.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send this head with the bytes in `out` as the body (empty for a status fault), now or
    /// after `delay`.
    Reply { head: Response<()>, delay: Option<Duration> },
    /// Never answer (a dropped query): keep the stream open until the connection ends.
    Drop,
    /// The `rst-stream` fault: reset the stream.
    Reset,
}

/// Answers `query` from client address `peer` into `out` and decides the response, faults
/// and `--max-qps-per-client` included.
pub(crate) fn answer(
    ctx: &Ctx,
    peer: Option<IpAddr>,
    query: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Outcome {
    add(&ctx.counters.queries, 1);
    if let (Some(rate), Some(ip)) = (&ctx.client_rate, peer) {
        if !rate.admit(ip) {
            // Over its rate: no DNS answer, as over UDP and TCP, but the request ends at once
            // (429, no body) rather than holding its stream until the client gives up.
            add(&ctx.counters.rate_limited, 1);
            out.clear();
            return Outcome::Reply { head: rate_limited_head(), delay: None };
        }
    }
    if ctx.faults.rst_stream.as_ref().is_some_and(|s| s.hit()) {
        add(&ctx.counters.dropped, 1);
        return Outcome::Reset;
    }
    if let Some((status, sel)) = &ctx.faults.http_status {
        if sel.hit() {
            add(&ctx.counters.dropped, 1);
            out.clear();
            return Outcome::Reply { head: status_head(*status), delay: None };
        }
    }
    let delay = match ctx.answerer.answer(query, transport, out) {
        Verdict::Drop => {
            add(&ctx.counters.dropped, 1);
            return Outcome::Drop;
        }
        Verdict::Invalid => {
            // No query in the request: a client error, as other DoH servers say.
            add(&ctx.counters.dropped, 1);
            out.clear();
            return Outcome::Reply { head: status_head(StatusCode::BAD_REQUEST), delay: None };
        }
        Verdict::Reply { delay } => delay,
        Verdict::Error => None,
    };
    if delay.is_some() {
        add(&ctx.counters.delayed, 1);
    }
    let ct = match &ctx.faults.content_type {
        Some((v, sel)) if sel.hit() => v.clone(),
        _ => HeaderValue::from_static(DNS_MESSAGE),
    };
    let mut head = Response::new(());
    let h = head.headers_mut();
    h.insert(CONTENT_TYPE, ct);
    // A zone's answer may be cached no longer than its smallest TTL (RFC 8484 section 5.1);
    // synthesised answers all have --ttl.
    let zone_ttl = if ctx.answerer.config().zones.is_some() { crate::answer::min_ttl(out) } else { None };
    match zone_ttl {
        Some(ttl) => h.insert(
            CACHE_CONTROL,
            HeaderValue::from_str(&format!("max-age={ttl}")).unwrap_or_else(|_| ctx.cache_control.clone()),
        ),
        None => h.insert(CACHE_CONTROL, ctx.cache_control.clone()),
    };
    h.insert(CONTENT_LENGTH, HeaderValue::from(out.len()));
    Outcome::Reply { head, delay }
}

/// A response with this status and no body.
pub(crate) fn status_head(status: StatusCode) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        r.headers_mut().insert(http::header::ALLOW, HeaderValue::from_static("GET, POST"));
    }
    r
}

/// The response to a request over `--max-qps-per-client`: 429 Too Many Requests (RFC 6585),
/// no body, `retry-after: 1` (the bucket refills within a second).
pub(crate) fn rate_limited_head() -> Response<()> {
    let mut r = status_head(StatusCode::TOO_MANY_REQUESTS);
    r.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Counts a sent DNS answer (the head's status is 200 and the body the answer).
pub(crate) fn sent(ctx: &Ctx, head: &Response<()>, body: &[u8]) {
    if head.status() == StatusCode::OK {
        ctx.counters.sent(body);
    }
}

/// Decodes base64url (RFC 4648 section 5), with or without padding, appending to `out`.
/// False on any other character or a bad length.
pub(crate) fn base64url_decode(s: &[u8], out: &mut Vec<u8>) -> bool {
    let s = match s.iter().position(|&c| c == b'=') {
        Some(p) if s[p..].iter().all(|&c| c == b'=') && s.len() & 3 == 0 && s.len() - p <= 2 => &s[..p],
        Some(_) => return false,
        None => s,
    };
    if s.len() & 3 == 1 {
        return false;
    }
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32)
    }
    out.reserve(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            let Some(v) = val(c) else { return false };
            acc = acc << 6 | v;
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => {
                acc <<= 6;
                out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8]);
            }
            2 => {
                acc <<= 12;
                out.push((acc >> 16) as u8);
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url() {
        let mut out = Vec::new();
        for (enc, dec) in [
            ("", &b""[..]),
            ("AA", &[0u8][..]),
            ("AAE", &[0, 1][..]),
            ("AAEC", &[0, 1, 2][..]),
            ("_-8", &[0xff, 0xef][..]),
            ("AAE=", &[0, 1][..]),
            ("AA==", &[0][..]),
        ] {
            out.clear();
            assert!(base64url_decode(enc.as_bytes(), &mut out), "{enc}");
            assert_eq!(out, dec, "{enc}");
        }
        for bad in ["A", "AA=A", "A+==", "AB/C", "AAAAA"] {
            out.clear();
            assert!(!base64url_decode(bad.as_bytes(), &mut out), "{bad}");
        }
        // RFC 8484's example query for www.example.com A.
        out.clear();
        assert!(base64url_decode(b"AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB", &mut out));
        assert_eq!(out.len(), 33);
    }
}
