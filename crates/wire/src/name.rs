use std::fmt;
use std::str::FromStr;

use crate::WireError;

/// A domain name held in uncompressed wire form (length-prefixed labels, ending with the root).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Name(Vec<u8>);

impl Name {
    /// The root name `.`.
    pub fn root() -> Name {
        Name(vec![0])
    }

    /// The wire bytes, uncompressed.
    pub fn wire(&self) -> &[u8] {
        &self.0
    }

    /// Builds a name from wire bytes known to be valid and uncompressed.
    pub fn from_wire(wire: &[u8]) -> Result<Name, WireError> {
        let (n, end) = parse_name(wire, 0)?;
        if end != wire.len() {
            return Err(WireError::BadNameText("trailing bytes after name"));
        }
        Ok(n)
    }

    /// The labels, leftmost first (the root's empty label is not included).
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        let w = &self.0;
        std::iter::from_fn(move || {
            let len = *w.get(at)? as usize;
            if len == 0 {
                return None;
            }
            let l = &w[at + 1..at + 1 + len];
            at += 1 + len;
            Some(l)
        })
    }

    /// Number of labels, not counting the root.
    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    /// True when `self` equals `suffix` or lies below it (ASCII case-insensitive).
    pub fn ends_with(&self, suffix: &Name) -> bool {
        let a = &self.0;
        let b = &suffix.0;
        if b.len() > a.len() {
            return false;
        }
        // Walk label boundaries of self until the remaining length equals suffix length.
        let mut at = 0;
        while a.len() - at > b.len() {
            at += 1 + a[at] as usize;
        }
        a.len() - at == b.len() && a[at..].eq_ignore_ascii_case(b)
    }

    /// A new name `label.self`.
    pub fn prepend(&self, label: &[u8]) -> Result<Name, WireError> {
        if label.is_empty() || label.len() > 63 {
            return Err(WireError::LabelTooLong);
        }
        if self.0.len() + 1 + label.len() > 255 {
            return Err(WireError::NameTooLong);
        }
        let mut v = Vec::with_capacity(self.0.len() + 1 + label.len());
        v.push(label.len() as u8);
        v.extend_from_slice(label);
        v.extend_from_slice(&self.0);
        Ok(Name(v))
    }
}

impl FromStr for Name {
    type Err = WireError;
    /// Parses presentation form: `www.example.test`, with or without the final dot;
    /// `\.` and `\DDD` escapes are understood.
    fn from_str(s: &str) -> Result<Self, WireError> {
        if s == "." || s.is_empty() {
            return Ok(Name::root());
        }
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len() + 2);
        let mut label: Vec<u8> = Vec::with_capacity(63);
        let mut i = 0;
        let finish = |label: &mut Vec<u8>, out: &mut Vec<u8>| -> Result<(), WireError> {
            if label.is_empty() {
                return Err(WireError::BadNameText("empty label"));
            }
            if label.len() > 63 {
                return Err(WireError::LabelTooLong);
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label);
            label.clear();
            Ok(())
        };
        while i < b.len() {
            match b[i] {
                b'.' => {
                    finish(&mut label, &mut out)?;
                    i += 1;
                    if i == b.len() {
                        break;
                    }
                }
                b'\\' => {
                    let rest = &b[i + 1..];
                    if rest.len() >= 3 && rest[..3].iter().all(u8::is_ascii_digit) {
                        let v = (rest[0] - b'0') as u16 * 100 + (rest[1] - b'0') as u16 * 10 + (rest[2] - b'0') as u16;
                        if v > 255 {
                            return Err(WireError::BadNameText("\\DDD escape above 255"));
                        }
                        label.push(v as u8);
                        i += 4;
                    } else if let Some(&c) = rest.first() {
                        label.push(c);
                        i += 2;
                    } else {
                        return Err(WireError::BadNameText("dangling backslash"));
                    }
                }
                c if c.is_ascii_whitespace() => return Err(WireError::BadNameText("whitespace in name")),
                c => {
                    label.push(c);
                    i += 1;
                }
            }
        }
        if !label.is_empty() {
            finish(&mut label, &mut out)?;
        }
        out.push(0);
        if out.len() > 255 {
            return Err(WireError::NameTooLong);
        }
        Ok(Name(out))
    }
}

impl fmt::Display for Name {
    /// Presentation form with the final dot, escaping as dig does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= 1 {
            return f.write_str(".");
        }
        for l in self.labels() {
            for &c in l {
                match c {
                    b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => write!(f, "\\{}", c as char)?,
                    0x21..=0x7e => write!(f, "{}", c as char)?,
                    _ => write!(f, "\\{c:03}")?,
                }
            }
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

/// Reads a possibly compressed name starting at `at`; returns it uncompressed and the
/// offset just after it in the message. Rejects loops, forward pointers and over-long names.
pub fn parse_name(msg: &[u8], mut at: usize) -> Result<(Name, usize), WireError> {
    let mut out = Vec::with_capacity(32);
    let mut end = None;
    let mut jumps = 0;
    loop {
        let len = *msg.get(at).ok_or(WireError::Truncated)?;
        match len & 0xC0 {
            0x00 => {
                let len = len as usize;
                if len == 0 {
                    out.push(0);
                    if out.len() > 255 {
                        return Err(WireError::NameTooLong);
                    }
                    return Ok((Name(out), end.unwrap_or(at + 1)));
                }
                let label = msg.get(at + 1..at + 1 + len).ok_or(WireError::Truncated)?;
                out.push(len as u8);
                out.extend_from_slice(label);
                if out.len() > 255 {
                    return Err(WireError::NameTooLong);
                }
                at += 1 + len;
            }
            0xC0 => {
                let lo = *msg.get(at + 1).ok_or(WireError::Truncated)?;
                let target = (((len & 0x3F) as usize) << 8) | lo as usize;
                if end.is_none() {
                    end = Some(at + 2);
                }
                jumps += 1;
                if target >= at || jumps > 64 {
                    return Err(WireError::BadPointer);
                }
                at = target;
            }
            _ => return Err(WireError::BadLabelType),
        }
    }
}

/// Skips a possibly compressed name, returning the offset just after it; no allocation.
pub fn skip_name(msg: &[u8], mut at: usize) -> Result<usize, WireError> {
    loop {
        let len = *msg.get(at).ok_or(WireError::Truncated)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Ok(at + 1),
            0x00 => {
                at += 1 + len as usize;
                if at > msg.len() {
                    return Err(WireError::Truncated);
                }
            }
            0xC0 => {
                return if at + 2 <= msg.len() { Ok(at + 2) } else { Err(WireError::Truncated) };
            }
            _ => return Err(WireError::BadLabelType),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        let n: Name = "www.Example.test".parse().unwrap();
        assert_eq!(n.wire(), b"\x03www\x07Example\x04test\x00");
        assert_eq!(n.to_string(), "www.Example.test.");
        assert_eq!("a\\.b.c.".parse::<Name>().unwrap().label_count(), 2);
        assert_eq!(".".parse::<Name>().unwrap(), Name::root());
        assert!("a..b".parse::<Name>().is_err());
        assert!(format!("{}.x", "a".repeat(64)).parse::<Name>().is_err());
    }

    #[test]
    fn suffix() {
        let n: Name = "a.b.nx.example.".parse().unwrap();
        assert!(n.ends_with(&"NX.example".parse().unwrap()));
        assert!(n.ends_with(&Name::root()));
        assert!(!n.ends_with(&"x.example".parse().unwrap()));
    }

    #[test]
    fn compression_and_loops() {
        // header(12) + "\x03foo\x00" at 12, then pointer to 12 at 17
        let mut m = vec![0u8; 12];
        m.extend_from_slice(b"\x03foo\x00");
        m.extend_from_slice(&[0x01, b'a', 0xC0, 12]);
        let (n, end) = parse_name(&m, 17).unwrap();
        assert_eq!(n.to_string(), "a.foo.");
        assert_eq!(end, m.len());
        assert_eq!(skip_name(&m, 17).unwrap(), m.len());
        // self-pointer
        let mut l = vec![0u8; 12];
        l.extend_from_slice(&[0xC0, 12]);
        assert_eq!(parse_name(&l, 12), Err(WireError::BadPointer));
        assert_eq!(parse_name(&[5, b'a'], 0), Err(WireError::Truncated));
    }
}
