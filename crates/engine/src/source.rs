//! Where queries come from: a dnsperf-format file, one name, or random labels under a suffix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;
use volley_wire::{Name, QType, QueryOptions, QueryTemplate, HEADER_LEN};

use crate::part::Stripe;

/// Length of the random label prepended for cache-miss load.
pub const RANDOM_LABEL_LEN: usize = 12;

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("cannot read query file {}: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{}:{line}: {msg}", path.display())]
    Line { path: PathBuf, line: usize, msg: String },
    #[error("query file {} holds no queries", .0.display())]
    Empty(PathBuf),
    #[error("invalid name '{0}': {1}")]
    Name(String, String),
}

/// The queries of a run, prepared once and shared by every worker.
#[derive(Debug, Clone)]
pub struct QuerySet {
    templates: Arc<Vec<QueryTemplate>>,
    random: bool,
    /// For results: `file:PATH`, `name:NAME TYPE`, `random:SUFFIX TYPE`.
    pub description: String,
}

impl QuerySet {
    /// Reads a dnsperf-format file: `NAME [TYPE]` per line (a line without TYPE asks for
    /// `default_type`, as dnspyre's files of names do), `#` or `;` starts a comment, blank lines
    /// are skipped.
    pub fn from_file(path: &Path, default_type: QType, opts: QueryOptions) -> Result<QuerySet, SourceError> {
        let text = std::fs::read(path).map_err(|err| SourceError::Read { path: path.to_path_buf(), err })?;
        let mut templates = Vec::new();
        for (i, raw) in text.split(|b| *b == b'\n').enumerate() {
            let line_err = |msg: String| SourceError::Line { path: path.to_path_buf(), line: i + 1, msg };
            let line = std::str::from_utf8(raw).map_err(|_| line_err("not valid UTF-8".into()))?;
            let line = line.split(['#', ';']).next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let name = fields.next().unwrap_or_default();
            let qtype = fields.next();
            if let Some(extra) = fields.next() {
                return Err(line_err(format!("unexpected '{extra}': expected 'NAME [TYPE]'")));
            }
            let name: Name = name.parse().map_err(|e| line_err(format!("invalid name '{name}': {e}")))?;
            let qtype: QType = match qtype {
                None => default_type,
                Some(t) => t.parse().map_err(|_| line_err(format!("unknown query type '{t}'")))?,
            };
            templates.push(QueryTemplate::new(&name, qtype, opts));
        }
        if templates.is_empty() {
            return Err(SourceError::Empty(path.to_path_buf()));
        }
        Ok(QuerySet { templates: Arc::new(templates), random: false, description: format!("file:{}", path.display()) })
    }

    /// Prepared queries, in order (a replay's distinct questions).
    pub fn from_templates(templates: Vec<QueryTemplate>, description: String) -> QuerySet {
        QuerySet { templates: Arc::new(templates), random: false, description }
    }

    /// The same query every time.
    pub fn single(name: &str, qtype: QType, opts: QueryOptions) -> Result<QuerySet, SourceError> {
        let n: Name = name.parse().map_err(|e| SourceError::Name(name.to_string(), format!("{e}")))?;
        Ok(QuerySet {
            templates: Arc::new(vec![QueryTemplate::new(&n, qtype, opts)]),
            random: false,
            description: format!("name:{n} {qtype}"),
        })
    }

    /// A fresh random label under `suffix` for every query (cache-miss load).
    pub fn random_under(suffix: &str, qtype: QType, opts: QueryOptions) -> Result<QuerySet, SourceError> {
        let n: Name = suffix.parse().map_err(|e| SourceError::Name(suffix.to_string(), format!("{e}")))?;
        let full = n
            .prepend(&[b'x'; RANDOM_LABEL_LEN])
            .map_err(|e| SourceError::Name(suffix.to_string(), format!("{e} with a random label")))?;
        Ok(QuerySet {
            templates: Arc::new(vec![QueryTemplate::new(&full, qtype, opts)]),
            random: true,
            description: format!("random:{n} {qtype}"),
        })
    }

    pub fn len(&self) -> usize {
        self.templates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }

    /// The first query, as sent (for the reachability probe).
    pub fn first_wire(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(0, 1, 0x0bad, &mut out);
        out
    }

    /// Writes query `index` (with random label from `seed` when random) with `id`.
    #[inline]
    pub fn write(&self, index: u32, seed: u64, id: u16, out: &mut Vec<u8>) {
        self.templates[index as usize].write(id, out);
        if self.random {
            fill_label(&mut out[HEADER_LEN + 1..HEADER_LEN + 1 + RANDOM_LABEL_LEN], seed);
        }
    }

    /// The question key of query `index` when fixed (None for random labels: computed on write).
    #[inline]
    pub fn fixed_key(&self, index: u32) -> Option<u64> {
        if self.random {
            None
        } else {
            Some(self.templates[index as usize].key())
        }
    }
}

/// Lower-case letters and digits from a 64-bit seed, mixed with splitmix64.
fn fill_label(out: &mut [u8], seed: u64) {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut z = seed.wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    let mut x = z ^ (z >> 31);
    for (i, c) in out.iter_mut().enumerate() {
        if i == 12 {
            x = x.rotate_left(17) ^ seed;
        }
        *c = ALPHABET[(x % 36) as usize];
        x /= 36;
    }
}

/// A worker's position in the query set: its arrivals' global indices (a [`Stripe`]); arrival
/// `k` of the run sends query `k mod len` with seed `k` (its random label), so the queries of
/// a run are the same whatever its threads and parts.
#[derive(Debug, Clone)]
pub struct Cursor {
    next: u32,
    step: u32,
    len: u32,
    seed: u64,
    stride: u64,
}

impl Cursor {
    pub fn new(set: &QuerySet, stripe: Stripe) -> Cursor {
        let len = set.len().max(1) as u64;
        Cursor {
            next: (stripe.first % len) as u32,
            step: (stripe.stride % len) as u32,
            len: len as u32,
            seed: stripe.first,
            stride: stripe.stride,
        }
    }

    /// Next (query index, seed).
    #[inline]
    pub fn take(&mut self) -> (u32, u64) {
        let out = (self.next, self.seed);
        self.next += self.step;
        if self.next >= self.len {
            self.next -= self.len;
        }
        self.seed += self.stride;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile_lite::File {
        tempfile_lite::File::new(text)
    }

    fn tests_counter() -> usize {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    mod tempfile_lite {
        pub struct File(pub std::path::PathBuf);
        impl File {
            pub fn new(text: &str) -> File {
                let p =
                    std::env::temp_dir().join(format!("volley-src-{}-{}", std::process::id(), super::tests_counter()));
                std::fs::write(&p, text).unwrap();
                File(p)
            }
        }
        impl Drop for File {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn dnsperf_format() {
        let f = file("# comment\nwww.example.test A\n\n; other\nexample.test AAAA  # trailing\nmx.test\n");
        let s = QuerySet::from_file(&f.0, QType::A, QueryOptions::default()).unwrap();
        assert_eq!(s.len(), 3);
        // A line without a type asks for the default one (--qtype; dnspyre's files of names).
        let s = QuerySet::from_file(&f.0, QType::AAAA, QueryOptions::default()).unwrap();
        let qtype = |i: u32| {
            let mut w = Vec::new();
            s.write(i, 1, 7, &mut w);
            volley_wire::parse_query(&w).unwrap().qtype
        };
        assert_eq!((qtype(0), qtype(1), qtype(2)), (QType::A, QType::AAAA, QType::AAAA));
        let f = file("a.test A\nb.test A\nc.test BOGUS\n");
        let e = QuerySet::from_file(&f.0, QType::A, QueryOptions::default()).unwrap_err().to_string();
        assert!(e.ends_with(":3: unknown query type 'BOGUS'"), "{e}");
        assert!(e.contains(&f.0.display().to_string()));
        let f = file("# nothing\n");
        assert!(matches!(QuerySet::from_file(&f.0, QType::A, QueryOptions::default()), Err(SourceError::Empty(_))));
        let e = QuerySet::from_file(Path::new("/nonexistent/q.txt"), QType::A, QueryOptions::default()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/q.txt"));
        let _ = std::io::stdout().flush();
    }

    #[test]
    fn random_labels_differ_and_parse() {
        let s = QuerySet::random_under("example.test", QType::A, QueryOptions::default()).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        s.write(0, 1, 7, &mut a);
        s.write(0, 2, 7, &mut b);
        assert_ne!(a, b);
        let q = volley_wire::parse_query(&a).unwrap();
        assert!(q.qname.to_string().ends_with(".example.test."));
        assert_eq!(q.qname.label_count(), 3);
        assert!(s.fixed_key(0).is_none());
    }

    #[test]
    fn cursor_cycles() {
        let f = file("a.test\nb.test\nc.test\n");
        let s = QuerySet::from_file(&f.0, QType::A, QueryOptions::default()).unwrap();
        // Arrivals 1, 3, 5, 7 of the run (worker 1 of 2): queries 1, 0, 2, 1.
        let mut c = Cursor::new(&s, crate::part::Part::WHOLE.stripe(1, 2));
        let got: Vec<(u32, u64)> = (0..4).map(|_| c.take()).collect();
        assert_eq!(got, vec![(1, 1), (0, 3), (2, 5), (1, 7)]);
        // A stride longer than the set wraps round it.
        let mut c = Cursor::new(&s, crate::part::Part::new(2, 4).unwrap().stripe(1, 2));
        let got: Vec<(u32, u64)> = (0..3).map(|_| c.take()).collect();
        assert_eq!(got, vec![(0, 6), (2, 14), (1, 22)]);
    }
}
