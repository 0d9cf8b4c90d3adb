//! A small column model for aligned plain-text tables: columns with a header and an
//! alignment, rows of cells, widths measured in characters (so `µ`, `✓` count as one).

use std::io::{self, Write};

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left, so digits line up.
    Right,
}

/// An aligned table. Columns are separated by `gap` spaces (2 by default); trailing spaces are
/// trimmed from every line. A column whose header is empty still takes part in alignment.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
    gap: usize,
    header: bool,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table with no columns, a gap of 2 and a header line.
    pub fn new() -> Table {
        Table { columns: Vec::new(), rows: Vec::new(), gap: 2, header: true }
    }

    /// Adds a column (builder style).
    pub fn column(mut self, header: impl Into<String>, align: Align) -> Table {
        self.columns.push((header.into(), align));
        self
    }

    /// Sets the number of spaces between columns.
    pub fn gap(mut self, gap: usize) -> Table {
        self.gap = gap;
        self
    }

    /// Leaves the header line out (for tables that are only aligned values).
    pub fn without_header(mut self) -> Table {
        self.header = false;
        self
    }

    /// Appends a row; missing cells are blank, cells beyond the last column are ignored.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).take(self.columns.len()).collect();
        r.resize(self.columns.len(), String::new());
        self.rows.push(r);
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are no data rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rendered lines (header first unless left out), without newlines.
    pub fn lines(&self) -> Vec<String> {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.columns.iter().map(|(h, _)| if self.header { width(h) } else { 0 }).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(width(c));
            }
        }
        let render = |cells: &mut dyn Iterator<Item = &str>| {
            let mut line = String::new();
            for (i, (c, ((_, align), w))) in cells.zip(self.columns.iter().zip(&widths)).enumerate() {
                if i > 0 {
                    line.extend(std::iter::repeat_n(' ', self.gap));
                }
                let pad = w.saturating_sub(width(c));
                match align {
                    Align::Left => {
                        line.push_str(c);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(c);
                    }
                }
            }
            line.truncate(line.trim_end().len());
            line
        };
        let mut out = Vec::with_capacity(self.rows.len() + 1);
        if self.header {
            out.push(render(&mut self.columns.iter().map(|(h, _)| h.as_str())));
        }
        for r in &self.rows {
            out.push(render(&mut r.iter().map(String::as_str)));
        }
        out
    }

    /// Writes the rendered lines, each followed by a newline.
    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        for l in self.lines() {
            writeln!(w, "{l}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_by_characters_and_trims() {
        let mut t = Table::new().column("name", Align::Left).column("p99", Align::Right).column("", Align::Left);
        t.row(["udp", "412µs", ""]);
        t.row(["tcp-long", "1.20ms", "note"]);
        assert_eq!(t.lines(), vec!["name         p99", "udp        412µs", "tcp-long  1.20ms  note"]);
    }
}
