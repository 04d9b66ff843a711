//! The CLI's text tables, laid out by `comfy-table`: no borders, a header row, left-aligned
//! columns as wide as their widest cell (by display width) two spaces apart, each line
//! indented by two spaces and without trailing blanks.
//!
//! Only the style lives here; measuring and padding are comfy-table's.

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement};

/// A table being built.
#[derive(Debug)]
pub struct Table {
    inner: comfy_table::Table,
}

impl Table {
    /// A table with these column headers (each row gives as many cells).
    pub fn new<const N: usize>(headers: [&str; N]) -> Self {
        let mut inner = comfy_table::Table::new();
        inner
            .load_style(comfy_table::presets::NOTHING)
            // Never wrapped: a piped table is read by tools (and people) line by line.
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(headers);
        for (i, column) in inner.column_iter_mut().enumerate() {
            column.set_padding((if i == 0 { 2 } else { 0 }, 2));
            column.set_cell_alignment(CellAlignment::Left);
            column.set_constraint(ColumnConstraint::ContentWidth);
        }
        Table { inner }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.inner.add_row(cells);
    }

    /// The rendered lines, each indented by two spaces and ended by a newline, trailing
    /// blanks trimmed.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.inner.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let mut t = Table::new(["a", "bb"]);
        t.row(vec!["long".into(), "x".into()]);
        assert_eq!(t.render(), "  a     bb\n  long  x\n");
    }

    #[test]
    fn wide_characters_count_by_their_display_width() {
        let mut t = Table::new(["kind", "n"]);
        t.row(vec!["日本".into(), "1".into()]);
        t.row(vec!["ab".into(), "22".into()]);
        assert_eq!(t.render(), "  kind  n\n  日本  1\n  ab    22\n");
    }
}
