//! Reading a clients file (from `volley pcap`) into what the engine replays.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use volley_engine::clients::Replay;
use volley_engine::QuerySet;
use volley_wire::{Edns, QueryOptions, QueryTemplate};

use crate::error::{CliError, CliResult};

/// What makes two captured queries the same query: name (lower case), type, class, RD, CD,
/// EDNS size with the DO bit in its top bit.
type Question = (Vec<u8>, u16, u16, bool, bool, Option<u16>);

/// The captured clients and the distinct questions they ask (each prepared once).
pub fn load(path: &Path) -> CliResult<(Arc<Replay>, QuerySet)> {
    let mut file = volley_replay::ClientsFile::open(path).map_err(CliError::usage)?;
    let mut index: HashMap<Question, u32> = HashMap::new();
    let mut templates = Vec::new();
    let mut clients = Vec::new();
    let mut first = u64::MAX;
    let mut last = 0u64;
    while let Some(c) = file.next_client().map_err(CliError::usage)? {
        let mut qs = Vec::with_capacity(c.queries.len());
        for q in &c.queries {
            let key = (
                q.qname.wire().to_ascii_lowercase(),
                q.qtype.0,
                q.qclass.0,
                q.rd,
                q.cd,
                q.edns.map(|s| s | (q.dnssec_ok as u16) << 15),
            );
            let i = *index.entry(key).or_insert_with(|| {
                let opts = QueryOptions {
                    recursion_desired: q.rd,
                    checking_disabled: q.cd,
                    edns: q.edns.map(|udp_size| Edns { udp_size, dnssec_ok: q.dnssec_ok, version: 0 }),
                };
                templates.push(QueryTemplate::new(&q.qname, q.qtype, opts));
                (templates.len() - 1) as u32
            });
            first = first.min(q.offset_ns);
            last = last.max(q.offset_ns);
            qs.push((q.offset_ns, i));
        }
        clients.push(qs);
    }
    if clients.is_empty() {
        return Err(CliError::usage(format!("{}: the clients file holds no clients", path.display())));
    }
    // Offsets from the first query, so the replay starts at once.
    for qs in &mut clients {
        for (off, _) in qs.iter_mut() {
            *off -= first;
        }
    }
    let n = templates.len();
    let set = QuerySet::from_templates(templates, format!("replay:{} ({n} distinct questions)", path.display()));
    Ok((Arc::new(Replay { clients, span_ns: last.saturating_sub(first).max(1) }), set))
}
