//! Text layout for people: aligned columns, `field  value` blocks, and
//! milliseconds as durations or as times relative to now.

use serde_json::Value;

/// Columns padded to their widest cell, two spaces apart, the last one
/// unpadded (so no line ends in spaces).
pub(crate) fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (index, cell) in row.iter().enumerate() {
            if index == last {
                out.push_str(cell);
            } else {
                let pad = widths[index] - cell.chars().count() + 2;
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// `name  value` lines, names padded to the longest.
pub(crate) fn fields(pairs: &[(String, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (name, value) in pairs {
        let pad = width - name.chars().count() + 2;
        out.push_str(name);
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(value);
        out.push('\n');
    }
    out
}

/// Milliseconds as a short duration: `850ms`, `42s`, `3m05s`, `2h07m`, `4d03h`.
pub(crate) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A Unix-epoch millisecond time relative to `now_ms`: `12s ago`, `in 3s`.
pub(crate) fn relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms <= now_ms {
        format!("{} ago", duration(now_ms - at_ms))
    } else {
        format!("in {}", duration(at_ms - now_ms))
    }
}

/// A JSON value as one cell: strings bare, `null` and absence as `-`,
/// anything else as compact JSON.
pub(crate) fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(text)) => single_line(text),
        Some(other) => other.to_string(),
    }
}

/// Text with its control characters escaped, so a value (an error, a
/// stored body, a key a sender chose) cannot break a table or move the
/// terminal's cursor, and its invisible characters too ([`hidden`]), so
/// it cannot pose as another value: a key shown is the key there is.
pub(crate) fn single_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else if hidden(c) {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Characters a terminal draws as nothing or that reorder the text around
/// them: zero-width spaces and joiners, the byte-order mark, and the
/// bidirectional marks, embeddings, overrides and isolates (the "Trojan
/// Source" set), which can make `evt_1` and `evt_1` plus a hidden
/// character, or a reversed value, look the same.
fn hidden(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_reordering_characters_are_shown_escaped() {
        assert_eq!(single_line("evt_1\u{200B}"), "evt_1\\u{200b}");
        assert_eq!(
            single_line("pay\u{202E}1gpj.exe"),
            "pay\\u{202e}1gpj.exe",
            "a right-to-left override can not reverse what follows"
        );
        assert_eq!(single_line("\u{FEFF}a\u{2066}b"), "\\u{feff}a\\u{2066}b");
        assert_eq!(
            single_line("zoë 支付"),
            "zoë 支付",
            "other text is left alone"
        );
        assert_eq!(single_line("a\nb"), "a\\nb");
    }

    #[test]
    fn columns_align_and_lines_do_not_end_in_spaces() {
        let table = columns(
            &["ROUTE", "KEY", "N"],
            &[
                vec!["pay".into(), "abc".into(), "1".into()],
                vec!["refunds".into(), "d".into(), "20".into()],
            ],
        );
        assert_eq!(
            table,
            "ROUTE    KEY  N\npay      abc  1\nrefunds  d    20\n"
        );
        assert_eq!(
            fields(&[
                ("state".into(), "dead".into()),
                ("attempts".into(), "3".into())
            ]),
            "state     dead\nattempts  3\n"
        );
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(185_000), "3m05s");
        assert_eq!(duration(7_620_000), "2h07m");
        assert_eq!(duration(356_400_000), "4d03h");
        assert_eq!(relative(1_000, 13_000), "12s ago");
        assert_eq!(relative(16_000, 13_000), "in 3s");
    }

    #[test]
    fn cells_never_break_a_line() {
        assert_eq!(cell(None), "-");
        assert_eq!(cell(Some(&Value::Null)), "-");
        assert_eq!(cell(Some(&Value::from("a\nb\u{1b}[2J"))), "a\\nb\\u{1b}[2J");
        assert_eq!(cell(Some(&Value::from(503))), "503");
    }
}
