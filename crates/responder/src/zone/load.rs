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

use super::names::{self, Names};
use super::{is_below, name_text, rr, Node, RrSet, Tails, Target, Zone, Zones, TAIL_FIXED};

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
    // Give the memory of the reading (the scanner's buffers, grown vectors) back to the
    // system, so that what stays is what the zones hold.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator; no pointer changes.
    unsafe {
        libc::malloc_trim(0);
    }
    Ok(zones)
}

/// Where a record came from: index in the list of files read, and line.
#[derive(Debug, Clone, Copy)]
struct Place {
    file: u16,
    line: u32,
}

/// One zone's files (the zone file and those it includes) and its names, as they are read:
/// each record goes into its node at once.
struct Reader {
    files: Vec<PathBuf>,
    nodes: NodeMap,
    /// The SOA: its owner (the apex) and place.
    soa: Option<(Box<[u8]>, Place)>,
    /// The first record (for "no SOA").
    first: Option<Place>,
    /// Owners of the records read before the SOA, to check once the apex is known.
    before_soa: Vec<(Box<[u8]>, Place)>,
    records: usize,
    /// Octets the nodes will take laid out ([`Names::build`]), padding included: counted as
    /// they are read, so that laying them out needs no pass of its own.
    room: usize,
    /// Scratch for each record's owner and RDATA.
    owner: Vec<u8>,
    rdata: Vec<u8>,
}

impl Reader {
    fn at(&self, place: Place, what: String) -> ZoneError {
        ZoneError::At { file: self.files[place.file as usize].clone(), line: place.line as usize, what }
    }

    /// Puts the record in `self.owner`, `self.rdata` into its node, with the checks that need
    /// no other record than those before it.
    fn add(&mut self, rtype: u16, covered: u16, ttl: u32, place: Place) -> Result<(), ZoneError> {
        self.first.get_or_insert(place);
        match &self.soa {
            Some((apex, soa)) => {
                if is_below(&self.owner, apex).is_none() {
                    return Err(self.outside(&self.owner.clone(), place, apex.clone(), *soa));
                }
                if rtype == rr::SOA {
                    let first = self.files[soa.file as usize].display();
                    return Err(self.at(
                        place,
                        format!(
                            "a second SOA record ({}); the zone's SOA is at {first}:{}",
                            name_text(&self.owner),
                            soa.line
                        ),
                    ));
                }
            }
            None if rtype == rr::SOA => self.soa = Some((self.owner.as_slice().into(), place)),
            None => self.before_soa.push((self.owner.as_slice().into(), place)),
        }
        let node = match self.nodes.get_mut(self.owner.as_slice()) {
            Some(node) => node,
            None => {
                self.room += names::node_room(self.owner.len());
                self.nodes.entry(self.owner.as_slice().into()).or_default()
            }
        };
        // CNAME and other data (RFC 1034 section 3.6.2; RRSIG and NSEC may sit beside it,
        // RFC 4035), checked on the later record.
        let data = |t: u16| !matches!(t, rr::CNAME | rr::RRSIG | rr::NSEC);
        let conflict = match rtype {
            rr::CNAME => {
                node.sets.iter().any(|s| data(s.rtype))
                    || node.get(rr::CNAME).is_some_and(|c| c.len() == 1 && c.rdata(0) != self.rdata.as_slice())
            }
            t if data(t) => node.get(rr::CNAME).is_some(),
            _ => false,
        };
        if conflict {
            let what = if rtype == rr::CNAME && node.get(rr::CNAME).is_some() {
                "has more than one CNAME"
            } else {
                "has a CNAME and other records (RFC 1034 section 3.6.2)"
            };
            return Err(self.at(place, format!("{} {what}", name_text(&self.owner))));
        }
        let (added, set) = match node.sets.iter_mut().position(|s| s.rtype == rtype && s.covered == covered) {
            Some(i) => (node.sets[i].push(&self.rdata), &node.sets[i]),
            None => {
                let mut set = RrSet::new(rtype, covered, ttl);
                set.push(&self.rdata);
                self.room += names::SET_FIXED;
                node.sets.push(set);
                (true, &node.sets[node.sets.len() - 1])
            }
        };
        if added {
            self.room += TAIL_FIXED + self.rdata.len() + set.targets.last().map_or(0, |t| 5 + t.name.len());
        }
        self.records += usize::from(added);
        Ok(())
    }

    fn outside(&self, owner: &[u8], place: Place, apex: Box<[u8]>, soa: Place) -> ZoneError {
        self.at(
            place,
            format!(
                "{} is outside the zone {} (whose SOA is at {}:{})",
                name_text(owner),
                name_text(&apex),
                self.files[soa.file as usize].display(),
                soa.line
            ),
        )
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
        // The last line ends with a line end, as a file's last line may not: domain 0.12.3's
        // scanner writes past its buffer (a panic) on a character string followed by a comment
        // the end of the file cuts off, and reads a last record without one as "short buffer".
        if !text.ends_with(b"\n") {
            zf.extend_from_slice(b"\n");
        }
        let shift = usize::from(dollar_ttl.is_some());
        zf.set_default_class(Class::IN);
        if let Some(origin) = origin {
            zf.set_origin(origin);
        }
        let (lines, ttls, unclosed) = entry_lines(&text);
        if let Some((line, open)) = unclosed {
            // Refused before the scanner reads it: domain 0.12.3's scanner writes past its
            // buffer (a panic) on a character string in parentheses the end of the file cuts off.
            return Err(ZoneError::At {
                file: path.to_path_buf(),
                line: line as usize,
                what: format!("{open} opened in this entry is not closed before the end of the file"),
            });
        }
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
                    self.owner.clear();
                    let _ = r.owner().compose_canonical(&mut self.owner);
                    self.rdata.clear();
                    let _ = r.data().compose_rdata(&mut self.rdata);
                    if self.rdata.len() > u16::MAX as usize {
                        return Err(at("record data longer than 65535 octets".into()));
                    }
                    let covered = match r.data() {
                        ZoneRecordData::Rrsig(sig) => sig.type_covered().to_int(),
                        _ if r.rtype().to_int() == rr::RRSIG => {
                            self.rdata.get(..2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
                        }
                        _ => 0,
                    };
                    let rtype = r.rtype().to_int();
                    if matches!(rtype, 41 | 249 | 250 | 251 | 252 | 253 | 254 | 255) {
                        return Err(at(format!("type {} cannot be a zone's record", r.rtype())));
                    }
                    self.add(rtype, covered, r.ttl().as_secs(), Place { file, line: line as u32 })?;
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
                w => volley_wire::display::one_line(w, 120),
            };
            ZoneError::At { file: path.to_path_buf(), line, what }
        }
        _ => ZoneError::Zone { file: path.to_path_buf(), what: volley_wire::display::one_line(text, 120) },
    }
}

/// An entry the end of the file cut off: its first line, and what it left open.
type Unclosed = (u32, &'static str);

/// The first line of each entry the scanner returns (a record or an `$INCLUDE`), in order:
/// the scanner does not say where an entry came from, so the text's entries are counted
/// here. An entry is a line that is not blank, a comment or an `$ORIGIN` or `$TTL`
/// directive, continued over the line ends inside parentheses or a quoted string. Also the
/// `$TTL` directives: (line, seconds). And the first line of an entry the end of the file cuts
/// off inside parentheses or a quoted string, with what was left open.
fn entry_lines(text: &[u8]) -> (Vec<u32>, Vec<(u32, u32)>, Option<Unclosed>) {
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
        let start = line;
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
        if j >= text.len() && (depth > 0 || quoted) {
            let open = if quoted { "a quoted string" } else { "'('" };
            return (lines, ttls, Some((start, open)));
        }
        i = j + 1;
    }
    (lines, ttls, None)
}

/// The names of a zone: lowercased wire name → node; foldhash, not SipHash: the keys come
/// from the zone file, and a question only looks up.
pub(crate) type NodeMap = HashMap<Box<[u8]>, Node, foldhash::fast::RandomState>;

impl RrSet {
    fn new(rtype: u16, covered: u16, ttl: u32) -> RrSet {
        RrSet { rtype, covered, ttl, wire: Tails::default(), targets: Vec::new() }
    }

    /// The RDATA of record `i`.
    pub(crate) fn rdata(&self, i: usize) -> &[u8] {
        self.tails().nth(i).map_or(&[], |t| &t[TAIL_FIXED..])
    }

    /// Appends a record with this RDATA; false if the set holds it already (RRsets are sets,
    /// RFC 2181 section 5). Every record takes the set's TTL, its first record's
    /// (RFC 2181 section 5.2; as BIND does).
    fn push(&mut self, rdata: &[u8]) -> bool {
        if self.tails().any(|t| &t[TAIL_FIXED..] == rdata) {
            return false;
        }
        let at = self.wire.len();
        let end = at + TAIL_FIXED + rdata.len();
        let mut fixed = [0u8; TAIL_FIXED];
        fixed[..2].copy_from_slice(&self.rtype.to_be_bytes());
        fixed[2..4].copy_from_slice(&Class::IN.to_int().to_be_bytes());
        fixed[4..8].copy_from_slice(&self.ttl.to_be_bytes());
        fixed[8..].copy_from_slice(&(rdata.len() as u16).to_be_bytes());
        match &mut self.wire {
            Tails::Inline(n, a) if end <= Tails::INLINE => {
                a[at..at + TAIL_FIXED].copy_from_slice(&fixed);
                a[at + TAIL_FIXED..end].copy_from_slice(rdata);
                *n = end as u8;
            }
            _ => {
                let mut wire = Vec::with_capacity(end);
                wire.extend_from_slice(&self.wire);
                wire.extend_from_slice(&fixed);
                wire.extend_from_slice(rdata);
                self.wire = Tails::Boxed(wire.into_boxed_slice());
            }
        }
        let name_at = match self.rtype {
            rr::NS | rr::CNAME => Some(0),
            rr::MX => Some(2),
            rr::SRV => Some(6),
            _ => None,
        };
        if let Some((off, name)) = name_at.and_then(|off| wire_name(rdata, off).map(|n| (off, n))) {
            self.targets.push(Target { at: (at + TAIL_FIXED + off) as u32, name });
        }
        true
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
    let mut reader = Reader {
        files: Vec::new(),
        nodes: NodeMap::default(),
        soa: None,
        first: None,
        before_soa: Vec::new(),
        records: 0,
        room: 0,
        owner: Vec::with_capacity(256),
        rdata: Vec::with_capacity(1024),
    };
    reader.read(path, None, None, 0)?;
    compile(reader, path)
}

fn compile(mut reader: Reader, path: &Path) -> Result<Zone, ZoneError> {
    let Some((apex, soa)) = reader.soa.take() else {
        return Err(match reader.first {
            Some(first) => reader.at(first, "no SOA record: a zone's apex needs one, and names the zone".into()),
            None => ZoneError::Zone { file: path.to_path_buf(), what: "no records (and no SOA record)".into() },
        });
    };
    if let Some((owner, place)) = reader.before_soa.iter().find(|(o, _)| is_below(o, &apex).is_none()) {
        return Err(reader.outside(owner, *place, apex.clone(), soa));
    }
    let mut nodes = std::mem::take(&mut reader.nodes);
    // Empty non-terminals: every name between an owner and the apex exists.
    let mut missing: Vec<Box<[u8]>> = Vec::new();
    for owner in nodes.keys() {
        if owner.len() == apex.len() {
            continue;
        }
        let mut at = 1 + owner[0] as usize;
        while owner.len() - at > apex.len() {
            let parent = &owner[at..];
            if nodes.contains_key(parent) {
                break;
            }
            missing.push(parent.into());
            at += 1 + owner[at] as usize;
        }
    }
    for name in missing {
        reader.room += names::node_room(name.len());
        nodes.entry(name).or_default();
    }
    let mut has_cuts = false;
    for (name, node) in nodes.iter_mut() {
        node.cut = *name != apex && node.get(rr::NS).is_some();
        has_cuts |= node.cut;
    }
    let mut negative_soa = nodes[&apex].get(rr::SOA).cloned().unwrap_or_else(|| unreachable!("the apex has the SOA"));
    let rd = negative_soa.rdata(0);
    if rd.len() < 4 {
        return Err(reader.at(soa, "SOA record too short".into()));
    }
    let minimum = u32::from_be_bytes(rd[rd.len() - 4..].try_into().unwrap_or_default());
    let ttl = negative_soa.ttl.min(minimum);
    negative_soa.wire[4..8].copy_from_slice(&ttl.to_be_bytes());
    negative_soa.ttl = ttl;
    let negative_soa = names::encode_one(&negative_soa);
    let mut nodes = Names::build(nodes, reader.room).map_err(|names::TooLarge| ZoneError::Zone {
        file: path.to_path_buf(),
        what: "too large: its names and records take more than 32 GiB".into(),
    })?;
    nodes.mark_apex(&apex);
    let (mut labels, mut at) = (0u8, 0);
    while apex[at] != 0 {
        labels += 1;
        at += 1 + apex[at] as usize;
    }
    Ok(Zone { apex, labels, nodes, negative_soa, records: reader.records, has_cuts })
}

#[cfg(test)]
pub(crate) fn entry_lines_for_tests(text: &[u8]) -> Vec<u32> {
    entry_lines(text).0
}
