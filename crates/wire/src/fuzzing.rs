//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes and must never panic. Not an API.

use crate::{format_message, parse_name, parse_query, question_key, skip_name, Header, QueryView, HEADER_LEN};

/// A DNS message as the generator reads an answer: its header, its question's key (the
/// question check), the question as a view and as a parsed query, and its dig-like display.
pub fn message(data: &[u8]) {
    if let Ok(h) = Header::parse(data) {
        let _ = (h.is_response(), h.truncated(), h.rcode(), h.opcode());
    }
    let key = question_key(data);
    if let Ok(v) = QueryView::parse(data) {
        assert!(v.question_end <= data.len());
        let _ = (v.labels().count(), v.question(), v.qname_wire());
    }
    if let Ok(q) = parse_query(data) {
        assert!(q.question_end <= data.len());
        let _ = q.qname.labels().count();
        // A question the responder reads has a key the generator can match.
        assert!(key.is_ok(), "parse_query read a question question_key refuses: {key:?}");
    }
    if data.len() > HEADER_LEN {
        let at = data[0] as usize % data.len();
        let _ = parse_name(data, at);
        let _ = skip_name(data, at);
    }
    if let Ok(text) = format_message(data) {
        assert!(!text.is_empty());
    }
}
