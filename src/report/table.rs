//! A listing as the commands receive it: rows of cells in one buffer.

/// Rows as plain columns: each cell padded to its column's widest, two
/// spaces apart, no trailing blanks (`ysinfo -N`, `ystoken --list`,
/// `ysqueue -s`).
pub fn plain<S: AsRef<str>>(rows: &[Vec<S>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |v| v.as_ref().chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{:<w$}", v.as_ref()))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The rows of a listing, all their cells in one string: a few growing
/// buffers for the whole listing instead of allocations per row or per
/// cell, which were most of what `ysqueue` spent on a long queue (and
/// rows read from one buffer are read from the cache).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowTable {
    text: String,
    /// Where each cell ends in `text`.
    cell_ends: Vec<usize>,
    /// Where each row's cells end in `cell_ends`.
    row_ends: Vec<usize>,
}

/// One row of a [`RowTable`].
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    table: &'a RowTable,
    /// The row's cells: a range of `table.cell_ends`.
    first: usize,
    end: usize,
}

impl RowTable {
    pub fn len(&self) -> usize {
        self.row_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.row_ends.is_empty()
    }

    pub fn push_cells<S: AsRef<str>>(&mut self, cells: &[S]) {
        for cell in cells {
            self.text.push_str(cell.as_ref());
            self.cell_ends.push(self.text.len());
        }
        self.row_ends.push(self.cell_ends.len());
    }

    /// Appends a row as the daemon streams it: a JSON array of strings. A
    /// line that is not one leaves the table as it was.
    pub fn push_json(&mut self, line: &[u8]) -> serde_json::Result<()> {
        use serde::de::{DeserializeSeed, Deserializer, Error, SeqAccess, Visitor};
        struct Cells<'t>(&'t mut RowTable);
        struct Cell<'t>(&'t mut String);
        impl<'de> Visitor<'de> for Cells<'_> {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while seq.next_element_seed(Cell(&mut self.0.text))?.is_some() {
                    self.0.cell_ends.push(self.0.text.len());
                }
                Ok(())
            }
        }
        impl<'de> DeserializeSeed<'de> for Cell<'_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_str(self)
            }
        }
        impl<'de> Visitor<'de> for Cell<'_> {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<(), E> {
                self.0.push_str(v);
                Ok(())
            }
        }
        // The line is checked as UTF-8 once, rather than cell by cell.
        let line = std::str::from_utf8(line).map_err(serde_json::Error::custom)?;
        let (text, cells) = (self.text.len(), self.cell_ends.len());
        let mut de = serde_json::Deserializer::from_str(line);
        let parsed = de.deserialize_seq(Cells(self)).and_then(|()| de.end());
        match parsed {
            Ok(()) => {
                self.row_ends.push(self.cell_ends.len());
                Ok(())
            }
            Err(e) => {
                self.text.truncate(text);
                self.cell_ends.truncate(cells);
                Err(e)
            }
        }
    }

    pub fn row(&self, i: usize) -> RowRef<'_> {
        let first = if i == 0 { 0 } else { self.row_ends[i - 1] };
        RowRef {
            table: self,
            first,
            end: self.row_ends[i],
        }
    }

    pub fn rows(&self) -> impl ExactSizeIterator<Item = RowRef<'_>> {
        (0..self.len()).map(|i| self.row(i))
    }
}

impl<'a> RowRef<'a> {
    /// Cell `i` (empty past the last).
    pub fn cell(&self, i: usize) -> &'a str {
        let k = self.first + i;
        if k >= self.end {
            return "";
        }
        let start = if k == 0 {
            0
        } else {
            self.table.cell_ends[k - 1]
        };
        &self.table.text[start..self.table.cell_ends[k]]
    }

    pub fn cells(&self) -> impl Iterator<Item = &'a str> + '_ {
        (0..self.end - self.first).map(|i| self.cell(i))
    }
}
