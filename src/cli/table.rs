//! The aligned tables of the command line's human output (`--json` is the other form).

use crate::format::{self, printable};
use crate::operator::attempts::TimelineRow;

/// A table whose columns are as wide as their widest cell, two spaces apart.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.headers.len());
        self.rows.push(row);
    }

    /// The table as text. Every cell is shown [`printable`](crate::format::printable): its text comes from producers
    /// and gateways, and must not move the cursor or retitle the operator's terminal.
    pub fn render(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(|cell| printable(cell)).collect())
            .collect();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&headers).chain(&rows) {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(width - cell.chars().count()));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Facts (name, value) as aligned lines: a table without its header, as `attempts show`
/// and `refunds show` begin.
pub fn facts(rows: Vec<(&'static str, String)>) -> String {
    let mut table = Table::new(&["", ""]);
    for (name, value) in rows {
        table.push(vec![name.to_owned(), value]);
    }
    table
        .render()
        .lines()
        .skip(1)
        .fold(String::new(), |mut out, line| {
            out.push_str(line);
            out.push('\n');
            out
        })
}

/// A history as one table, oldest first: what `attempts show` and `refunds show` end with.
pub fn timeline(rows: Vec<TimelineRow>) -> String {
    let mut table = Table::new(&["TIME (UTC)", "KIND", "WHAT", "DETAIL"]);
    for row in rows {
        table.push(vec![format::at_ms(row.at), row.kind, row.what, row.detail]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_their_widest_cell() {
        let mut table = Table::new(&["ID", "STATUS"]);
        table.push(vec!["a-long-id".into(), "pending".into()]);
        table.push(vec!["b".into(), "needs_review".into()]);
        assert_eq!(
            table.render(),
            "ID         STATUS\na-long-id  pending\nb          needs_review\n"
        );
    }
}
