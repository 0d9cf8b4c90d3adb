//! Reading zone files into [`Zones`]: NLnet Labs' scanner (`domain::zonefile`) reads the text,
//! this module checks what an authoritative server needs and compiles the records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use domain::base::iana::Class;
use domain::base::name::{Name, ToName};
use domain::base::rdata::ComposeRecordData;
use domain::rdata::ZoneRecordData;
use domain::zonefile::inplace::{Entry, Zonefile};

use super::{is_below, name_text, rr, Node, RrSet, Target, Zone, Zones, TAIL_FIXED};

/// Deepest `$INCLUDE` nesting.
const MAX_INCLUDE_DEPTH: usize = 16;

/// A zone file that cannot be served: where, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    /// The file cannot be read.
    #[error("cannot read zone file {}: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Something wrong at a line of a file.
    #[error("{}:{line}: {what}", file.display())]
    At { file: PathBuf, line: usize, what: String },
    /// Something wrong with a zone as a whole.
    #[error("{}: {what}", file.display())]
    Zone { file: PathBuf, what: String },
}

/// Loads each zone file; the zones must have different apexes.
pub fn load(paths: &[PathBuf]) -> Result<Zones, ZoneError> {
    let mut zones = Zones::new();
    let mut from: Vec<&Path> = Vec::new();
    for path in paths {
        let zone = load_zone(path)?;
        if let Err(zone) = zones.add(zone) {
            let other = from[zones.by_apex[&zone.apex]];
            return Err(ZoneError::Zone {
                file: path.clone(),
                what: format!("zone {} is loaded already, from {}", zone.apex_text(), other.display()),
            });
        }
        from.push(path);
    }
    Ok(zones)
}

/// A record as read, before the zone is compiled.
struct Rec {
    owner: Box<[u8]>,
    rtype: u16,
    /// RRSIG: the type covered.
    covered: u16,
    ttl: u32,
    rdata: Box<[u8]>,
    /// Index in the list of files read, and line.
    file: u16,
    line: u32,
}

/// The files of one zone (the zone file and those it includes), and their records.
struct Reader {
    files: Vec<PathBuf>,
    recs: Vec<Rec>,
}

impl Reader {
    fn at(&self, rec: &Rec, what: String) -> ZoneError {
        ZoneError::At { file: self.files[rec.file as usize].clone(), line: rec.line as usize, what }
    }

    /// Reads one file (recursively its `$INCLUDE`s) with this initial origin and `$TTL`.
    fn read(
        &mut self,
        path: &Path,
        origin: Option<Name<Bytes>>,
        dollar_ttl: Option<u32>,
        depth: usize,
    ) -> Result<(), ZoneError> {
        let text = std::fs::read(path).map_err(|source| ZoneError::Read { file: path.to_path_buf(), source })?;
        let file = u16::try_from(self.files.len())
            .map_err(|_| ZoneError::Zone { file: path.to_path_buf(), what: "too many included files".into() })?;
        self.files.push(path.to_path_buf());
        // An included file starts with the `$TTL` in force where it is included, as in BIND:
        // the scanner reads it from a line put in front (its line numbers are one more).
        let mut zf = match dollar_ttl {
            None => Zonefile::from(&text[..]),
            Some(ttl) => {
                let mut zf = Zonefile::from(format!("$TTL {ttl}\n").as_bytes());
                zf.extend_from_slice(&text);
                zf
            }
        };
        let shift = usize::from(dollar_ttl.is_some());
        zf.set_default_class(Class::IN);
        if let Some(origin) = origin {
            zf.set_origin(origin);
        }
        let (lines, ttls) = entry_lines(&text);
        let mut k = 0;
        loop {
            let entry = match zf.next_entry() {
                Ok(Some(entry)) => entry,
                Ok(None) => return Ok(()),
                // The scanner's error reads "LINE:COLUMN: what".
                Err(e) => return Err(scan_error(path, &e.to_string(), shift)),
            };
            let line = lines.get(k).or(lines.last()).map_or(1, |&l| l as usize);
            k += 1;
            let at = |what: String| ZoneError::At { file: path.to_path_buf(), line, what };
            match entry {
                Entry::Record(r) => {
                    if r.class() != Class::IN {
                        return Err(at(format!("class {}: only class IN is served", r.class())));
                    }
                    let mut owner = Vec::with_capacity(64);
                    let _ = r.owner().compose_canonical(&mut owner);
                    let mut rdata = Vec::new();
                    let _ = r.data().compose_rdata(&mut rdata);
                    if rdata.len() > u16::MAX as usize {
                        return Err(at("record data longer than 65535 octets".into()));
                    }
                    let covered = match r.data() {
                        ZoneRecordData::Rrsig(sig) => sig.type_covered().to_int(),
                        _ if r.rtype().to_int() == rr::RRSIG => {
                            rdata.get(..2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
                        }
                        _ => 0,
                    };
                    let rtype = r.rtype().to_int();
                    if matches!(rtype, 41 | 249 | 250 | 251 | 252 | 253 | 254 | 255) {
                        return Err(at(format!("type {} cannot be a zone's record", r.rtype())));
                    }
                    self.recs.push(Rec {
                        owner: owner.into_boxed_slice(),
                        rtype,
                        covered,
                        ttl: r.ttl().as_secs(),
                        rdata: rdata.into_boxed_slice(),
                        file,
                        line: line as u32,
                    });
                }
                Entry::Include { path: inc, origin } => {
                    if depth >= MAX_INCLUDE_DEPTH {
                        return Err(at(format!("$INCLUDE nested more than {MAX_INCLUDE_DEPTH} deep")));
                    }
                    let inc = Path::new(inc.as_ref() as &str);
                    // Relative to the including file's folder.
                    let inc = match path.parent() {
                        Some(dir) if inc.is_relative() => dir.join(inc),
                        _ => inc.to_path_buf(),
                    };
                    let origin = origin.or_else(|| zf.origin().ok());
                    let ttl = ttls.iter().rev().find(|(l, _)| *l as usize <= line).map(|&(_, t)| t).or(dollar_ttl);
                    self.read(&inc, origin, ttl, depth + 1).map_err(|e| match e {
                        ZoneError::Read { file, source } => {
                            at(format!("$INCLUDE {}: cannot read it: {source}", file.display()))
                        }
                        e => e,
                    })?;
                }
            }
        }
    }
}

/// The scanner's error ("LINE:COLUMN: what") as ours, with clearer words for the usual ones.
fn scan_error(path: &Path, text: &str, shift: usize) -> ZoneError {
    let mut parts = text.splitn(3, ':');
    let (line, col, what) = (parts.next(), parts.next(), parts.next());
    match (line.and_then(|l| l.trim().parse::<usize>().ok()), col.and_then(|c| c.trim().parse::<usize>().ok())) {
        (Some(line), Some(col)) => {
            // The scanner stands after the token it could not take; at column 1 that was the
            // line end of the line before.
            let line = if col == 1 { line.saturating_sub(1) } else { line };
            let line = line.saturating_sub(shift).max(1);
            let what = what.unwrap_or_default().trim();
            let what = match what {
                "expected rtype" => {
                    "expected [TTL] [CLASS] TYPE: a TTL in seconds (0..4294967295), a class (IN) or a known \
                     record type (or TYPEnnn)"
                        .to_string()
                }
                "missing origin" => "relative name but no origin: set one with $ORIGIN".to_string(),
                "missing last owner" => "record without an owner name, and none before it".to_string(),
                w => w.to_string(),
            };
            ZoneError::At { file: path.to_path_buf(), line, what }
        }
        _ => ZoneError::Zone { file: path.to_path_buf(), what: text.to_string() },
    }
}

/// The first line of each entry the scanner returns (a record or an `$INCLUDE`), in order:
/// the scanner does not say where an entry came from, so the text's entries are counted
/// here. An entry is a line that is not blank, a comment or an `$ORIGIN` or `$TTL`
/// directive, continued over the line ends inside parentheses or a quoted string. Also the
/// `$TTL` directives: (line, seconds).
fn entry_lines(text: &[u8]) -> (Vec<u32>, Vec<(u32, u32)>) {
    let mut lines = Vec::new();
    let mut ttls = Vec::new();
    let mut line: u32 = 1;
    let mut i = 0;
    while i < text.len() {
        // The start of a logical line.
        let first = text[i..].iter().position(|c| !matches!(c, b' ' | b'\t' | b'\r')).map_or(text.len(), |k| i + k);
        match text.get(first) {
            None => break,
            Some(b'\n') => {
                line += 1;
                i = first + 1;
                continue;
            }
            Some(b';') => {}
            Some(b'$') => {
                let word = &text[first..text.len().min(first + 8)];
                if word.eq_ignore_ascii_case(b"$INCLUDE") {
                    lines.push(line);
                } else if word.len() > 4 && word[..4].eq_ignore_ascii_case(b"$TTL") {
                    let digits = text[first + 4..].iter().skip_while(|c| matches!(c, b' ' | b'\t'));
                    let value = digits
                        .take_while(|c| c.is_ascii_digit())
                        .try_fold(0u32, |n, &c| n.checked_mul(10).and_then(|n| n.checked_add(u32::from(c - b'0'))));
                    if let Some(ttl) = value {
                        ttls.push((line, ttl));
                    }
                }
            }
            Some(_) => lines.push(line),
        }
        // To the end of the logical line.
        let (mut depth, mut quoted, mut j) = (0u32, false, first);
        while j < text.len() {
            match text[j] {
                b'\\' => j += 1,
                b'"' => quoted = !quoted,
                b'(' if !quoted => depth += 1,
                b')' if !quoted => depth = depth.saturating_sub(1),
                b';' if !quoted => {
                    while j + 1 < text.len() && text[j + 1] != b'\n' {
                        j += 1;
                    }
                }
                b'\n' => {
                    line += 1;
                    if depth == 0 && !quoted {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        i = j + 1;
    }
    (lines, ttls)
}

/// A node's RRsets while the zone is compiled.
#[derive(Default)]
struct NodeBuilder {
    sets: Vec<SetBuilder>,
}

struct SetBuilder {
    rtype: u16,
    covered: u16,
    ttl: u32,
    wire: Vec<u8>,
    starts: Vec<u32>,
    targets: Vec<Target>,
    /// The record that made the set (for messages).
    first: usize,
}

impl SetBuilder {
    fn push(&mut self, rec: &Rec) {
        let at = self.wire.len();
        // RRsets are sets: a record given twice is one (RFC 2181 section 5).
        let n = self.starts.len();
        for k in 0..n {
            let to = if k + 1 < n { self.starts[k + 1] as usize } else { at };
            if self.wire[self.starts[k] as usize + TAIL_FIXED..to] == *rec.rdata {
                return;
            }
        }
        self.starts.push(at as u32);
        self.wire.extend_from_slice(&rec.rtype.to_be_bytes());
        self.wire.extend_from_slice(&Class::IN.to_int().to_be_bytes());
        // One TTL per RRset (RFC 2181 section 5.2): the first record's, as BIND does.
        self.wire.extend_from_slice(&self.ttl.to_be_bytes());
        self.wire.extend_from_slice(&(rec.rdata.len() as u16).to_be_bytes());
        self.wire.extend_from_slice(&rec.rdata);
        let name_at = match rec.rtype {
            rr::NS | rr::CNAME => Some(0),
            rr::MX => Some(2),
            rr::SRV => Some(6),
            _ => None,
        };
        if let Some(name) = name_at.and_then(|off| wire_name(&rec.rdata, off).map(|n| (off, n))) {
            self.targets.push(Target { at: (at + TAIL_FIXED + name.0) as u32, name: name.1 });
        }
    }

    fn build(mut self) -> RrSet {
        self.starts.push(self.wire.len() as u32);
        RrSet {
            rtype: self.rtype,
            covered: self.covered,
            wire: self.wire.into_boxed_slice(),
            starts: self.starts.into_boxed_slice(),
            targets: self.targets.into_boxed_slice(),
        }
    }
}

/// The uncompressed name at `off` in RDATA, lowercased; None if there is none.
fn wire_name(rdata: &[u8], off: usize) -> Option<Box<[u8]>> {
    let mut at = off;
    loop {
        let l = *rdata.get(at)? as usize;
        if l == 0 {
            break;
        }
        if l > 63 {
            return None;
        }
        at += 1 + l;
    }
    let name = rdata.get(off..=at)?;
    (name.len() <= 255).then(|| name.to_ascii_lowercase().into_boxed_slice())
}

/// Reads a zone file and compiles it.
fn load_zone(path: &Path) -> Result<Zone, ZoneError> {
    let mut reader = Reader { files: Vec::new(), recs: Vec::new() };
    reader.read(path, None, None, 0)?;
    compile(reader, path)
}

fn compile(reader: Reader, path: &Path) -> Result<Zone, ZoneError> {
    let recs = &reader.recs;
    // The apex: the owner of the (one) SOA record.
    let mut soas = recs.iter().enumerate().filter(|(_, r)| r.rtype == rr::SOA);
    let Some((soa_i, soa)) = soas.next() else {
        return Err(match recs.first() {
            Some(first) => reader.at(first, "no SOA record: a zone's apex needs one, and names the zone".into()),
            None => ZoneError::Zone { file: path.to_path_buf(), what: "no records (and no SOA record)".into() },
        });
    };
    if let Some((_, second)) = soas.next() {
        let first = reader.files[soa.file as usize].display();
        return Err(reader.at(
            second,
            format!("a second SOA record ({}); the zone's SOA is at {first}:{}", name_text(&second.owner), soa.line),
        ));
    }
    let apex: Box<[u8]> = soa.owner.clone();
    let apex_text = name_text(&apex);
    let mut nodes: HashMap<Box<[u8]>, NodeBuilder> = HashMap::with_capacity(recs.len());
    for (i, rec) in recs.iter().enumerate() {
        if is_below(&rec.owner, &apex).is_none() {
            return Err(reader.at(
                rec,
                format!(
                    "{} is outside the zone {apex_text} (whose SOA is at {}:{})",
                    name_text(&rec.owner),
                    reader.files[soa.file as usize].display(),
                    soa.line
                ),
            ));
        }
        let node = nodes.entry(rec.owner.clone()).or_default();
        match node.sets.iter_mut().find(|s| s.rtype == rec.rtype && s.covered == rec.covered) {
            Some(set) => set.push(rec),
            None => {
                let mut set = SetBuilder {
                    rtype: rec.rtype,
                    covered: rec.covered,
                    ttl: rec.ttl,
                    wire: Vec::new(),
                    starts: Vec::new(),
                    targets: Vec::new(),
                    first: i,
                };
                set.push(rec);
                node.sets.push(set);
            }
        }
    }
    // CNAME and other data (RFC 1034 section 3.6.2; RRSIG and NSEC may sit beside it, RFC 4035).
    for node in nodes.values() {
        if let Some(cname) = node.sets.iter().find(|s| s.rtype == rr::CNAME) {
            if cname.starts.len() > 1 {
                let second = &recs[cname.first..]
                    .iter()
                    .filter(|r| r.owner == recs[cname.first].owner && r.rtype == rr::CNAME)
                    .nth(1)
                    .unwrap_or(&recs[cname.first]);
                return Err(reader.at(second, format!("{} has more than one CNAME", name_text(&second.owner))));
            }
            if let Some(other) = node.sets.iter().find(|s| !matches!(s.rtype, rr::CNAME | rr::RRSIG | rr::NSEC)) {
                let later = &recs[cname.first.max(other.first)];
                return Err(reader.at(
                    later,
                    format!("{} has a CNAME and other records (RFC 1034 section 3.6.2)", name_text(&later.owner)),
                ));
            }
        }
    }
    // Empty non-terminals: every name between an owner and the apex exists.
    let owners: Vec<Box<[u8]>> = nodes.keys().cloned().collect();
    for owner in owners {
        if owner.len() == apex.len() {
            continue;
        }
        let mut at = 1 + owner[0] as usize;
        while owner.len() - at > apex.len() {
            let parent = &owner[at..];
            if nodes.contains_key(parent) {
                break;
            }
            nodes.insert(parent.into(), NodeBuilder::default());
            at += 1 + owner[at] as usize;
        }
    }
    let mut records = 0;
    let mut has_cuts = false;
    let mut compiled: HashMap<Box<[u8]>, Node> = HashMap::with_capacity(nodes.len());
    for (name, node) in nodes {
        let sets: Vec<RrSet> = node.sets.into_iter().map(SetBuilder::build).collect();
        records += sets.iter().map(RrSet::len).sum::<usize>();
        let cut = *name != *apex && sets.iter().any(|s| s.rtype == rr::NS);
        has_cuts |= cut;
        compiled.insert(name, Node { sets, cut });
    }
    let soa_set = compiled[&apex].get(rr::SOA).cloned().unwrap_or_else(|| unreachable!("the apex has the SOA"));
    let mut negative_soa = soa_set;
    let rd = &negative_soa.wire[TAIL_FIXED..];
    if rd.len() < 4 {
        return Err(reader.at(&recs[soa_i], "SOA record too short".into()));
    }
    let minimum = u32::from_be_bytes(rd[rd.len() - 4..].try_into().unwrap_or_default());
    let ttl = u32::from_be_bytes(negative_soa.wire[4..8].try_into().unwrap_or_default()).min(minimum);
    let mut wire = negative_soa.wire.to_vec();
    wire[4..8].copy_from_slice(&ttl.to_be_bytes());
    negative_soa.wire = wire.into_boxed_slice();
    let (mut labels, mut at) = (0u8, 0);
    while apex[at] != 0 {
        labels += 1;
        at += 1 + apex[at] as usize;
    }
    Ok(Zone { apex, labels, nodes: compiled, negative_soa, records, has_cuts })
}

#[cfg(test)]
pub(crate) fn entry_lines_for_tests(text: &[u8]) -> Vec<u32> {
    entry_lines(text).0
}
