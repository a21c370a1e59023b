//! The hot-key series, written as Prometheus text at scrape time.
//!
//! Not registered with the metrics recorder on purpose: a recorder keeps
//! every series it ever saw, so keys that left the top `k` would pile up
//! as stale labels. Written fresh on every scrape instead, the series set
//! is exactly the current state.
//!
//! By default no series names a key: with one delivery per key the top
//! `k` are simply the newest keys, so per-key series would be new series
//! on every scrape. Every tracked route exports the key-less
//! [`HOT_KEY_MAX_DELIVERIES`] (what the retry-loop alert reads). With
//! `[hot_keys] export_keys = true` the keys of the top `k` that had
//! duplicates are exported too, labelled by `route` and `key` only (no
//! rank, which would churn with every reordering).

use std::fmt::Write;

use super::{HotKey, HotKeys};

/// `idemgate_hot_key_max_deliveries{route}`: the deliveries of the
/// route's busiest key in the current window (0 when idle).
pub const HOT_KEY_MAX_DELIVERIES: &str = "idemgate_hot_key_max_deliveries";
/// `idemgate_hot_key_deliveries{route, key}`: deliveries of a top-k key
/// that had duplicates (`export_keys` only).
pub const HOT_KEY_DELIVERIES: &str = "idemgate_hot_key_deliveries";
/// `idemgate_hot_key_duplicates{route, key}`: of those, duplicates
/// (`export_keys` only).
pub const HOT_KEY_DUPLICATES: &str = "idemgate_hot_key_duplicates";
/// `idemgate_hot_key_window_seconds`: the window length.
pub const HOT_KEY_WINDOW_SECONDS: &str = "idemgate_hot_key_window_seconds";

/// One per-key family: name, help and which count it reads.
type KeyFamily = (&'static str, &'static str, fn(&HotKey) -> u64);

/// The per-key families `export_keys` adds.
const KEY_FAMILIES: [KeyFamily; 2] = [
    (
        HOT_KEY_DELIVERIES,
        "Deliveries of each of the route's top-k keys that had duplicates, in the hot-key window",
        |key| key.deliveries,
    ),
    (
        HOT_KEY_DUPLICATES,
        "Of those deliveries, duplicates (replays, 409 in_flight/outcome_unknown, 422 fingerprint_mismatch)",
        |key| key.duplicates,
    ),
];

impl HotKeys {
    /// Appends the hot-key families to `out` (Prometheus text format
    /// 0.0.4); nothing when hot keys are disabled.
    pub fn render_prometheus(&self, out: &mut String) {
        if !self.enabled() {
            return;
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let tops: Vec<_> = self
            .routes()
            .iter()
            .map(|route| (escape(route.name()), self.top(route)))
            .collect();
        family_header(
            out,
            HOT_KEY_MAX_DELIVERIES,
            "Deliveries of the route's busiest key in the hot-key window",
        );
        for (route, top) in &tops {
            let max = top.iter().map(|key| key.deliveries).max().unwrap_or(0);
            line(
                out,
                format_args!("{HOT_KEY_MAX_DELIVERIES}{{route=\"{route}\"}} {max}"),
            );
        }
        if self.export_keys() {
            for (name, help, count) in KEY_FAMILIES {
                family_header(out, name, help);
                for (route, top) in &tops {
                    for key in top.iter().filter(|key| key.duplicates > 0) {
                        line(
                            out,
                            format_args!(
                                "{name}{{route=\"{route}\",key=\"{}\"}} {}",
                                key.digest,
                                count(key)
                            ),
                        );
                    }
                }
            }
        }
        family_header(out, HOT_KEY_WINDOW_SECONDS, "Length of the hot-key window");
        line(
            out,
            format_args!("{HOT_KEY_WINDOW_SECONDS} {}", self.window().as_secs_f64()),
        );
    }
}

/// The `# HELP` and `# TYPE … gauge` lines of one family.
fn family_header(out: &mut String, name: &str, help: &str) {
    line(out, format_args!("# HELP {name} {help}"));
    line(out, format_args!("# TYPE {name} gauge"));
}

/// Appends one line of the text format. `fmt::Write` for `String` only
/// fails if a `Display` impl does, and none of the values written here can.
fn line(out: &mut String, args: std::fmt::Arguments<'_>) {
    out.write_fmt(args)
        .expect("formatting numbers and strings into a String cannot fail");
    out.push('\n');
}

/// A label value escaped as the text format requires.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{HotKeysConfig, TopK};

    use crate::hot_keys::sightings::{FIRST, REPLAY};

    fn hot(enabled: bool, export_keys: bool) -> HotKeys {
        let settings = HotKeysConfig {
            enabled,
            k: TopK::new(2).expect("valid"),
            window: Duration::from_secs(60),
            export_keys,
        };
        HotKeys::new(&settings, ["pay", "we\"ird"])
    }

    /// Key `[n; 32]` delivered `n` times: once first, then replayed.
    fn deliver_counts(hot: &HotKeys, counts: std::ops::RangeInclusive<u8>) {
        let pay = hot.named("pay").expect("tracked");
        for n in counts {
            pay.observe(&[n; 32], FIRST);
            for _ in 1..n {
                pay.observe(&[n; 32], REPLAY);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn exported_keys_are_the_top_k_with_duplicates_without_a_rank() {
        let hot = hot(true, true);
        deliver_counts(&hot, 1..=3);
        let mut text = String::from("idemgate_build_info{version=\"x\"} 1");
        hot.render_prometheus(&mut text);
        let three = hex::encode([3u8; 32]);
        let two = hex::encode([2u8; 32]);
        for line in [
            "idemgate_build_info{version=\"x\"} 1\n# HELP idemgate_hot_key_max_deliveries "
                .to_owned(),
            "idemgate_hot_key_max_deliveries{route=\"pay\"} 3\n".to_owned(),
            "idemgate_hot_key_max_deliveries{route=\"we\\\"ird\"} 0\n".to_owned(),
            "# TYPE idemgate_hot_key_deliveries gauge\n".to_owned(),
            format!("idemgate_hot_key_deliveries{{route=\"pay\",key=\"{three}\"}} 3\n"),
            format!("idemgate_hot_key_deliveries{{route=\"pay\",key=\"{two}\"}} 2\n"),
            format!("idemgate_hot_key_duplicates{{route=\"pay\",key=\"{three}\"}} 2\n"),
            format!("idemgate_hot_key_duplicates{{route=\"pay\",key=\"{two}\"}} 1\n"),
            "# TYPE idemgate_hot_key_window_seconds gauge\nidemgate_hot_key_window_seconds 60\n"
                .to_owned(),
        ] {
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
        // Key 1 fell out of the top 2; no series has a rank.
        assert!(!text.contains(&hex::encode([1u8; 32])), "{text}");
        assert!(!text.contains("rank="), "{text}");
        assert_eq!(text.matches("idemgate_hot_key_deliveries{").count(), 2);
    }

    /// What a scrape of `hot` shows now.
    fn rendered(hot: &HotKeys) -> String {
        let mut text = String::new();
        hot.render_prometheus(&mut text);
        text
    }

    /// No series names a key when export is off, nor for a key without
    /// duplicates when it is on; the key-less maximum is there either way.
    #[tokio::test(start_paused = true)]
    async fn only_exported_keys_with_duplicates_have_series() {
        for (export_keys, counts, max) in [(true, 1..=1, 1), (false, 1..=3, 3)] {
            let hot = hot(true, export_keys);
            deliver_counts(&hot, counts);
            let text = rendered(&hot);
            assert!(!text.contains("key="), "{text}");
            let max_line = format!("idemgate_hot_key_max_deliveries{{route=\"pay\"}} {max}\n");
            assert!(text.contains(&max_line), "{text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn route_names_are_escaped_and_idle_windows_report_zero() {
        let hot = hot(true, true);
        let weird = hot.named("we\"ird").expect("tracked");
        weird.observe(&[9; 32], FIRST);
        weird.observe(&[9; 32], REPLAY);
        let text = rendered(&hot);
        assert!(text.contains("route=\"we\\\"ird\",key="), "{text}");
        tokio::time::advance(Duration::from_secs(120)).await;
        let text = rendered(&hot);
        assert!(!text.contains("key="), "{text}");
        assert!(text.contains("idemgate_hot_key_max_deliveries{route=\"we\\\"ird\"} 0\n"));
        assert!(text.contains("idemgate_hot_key_window_seconds 60"));
    }

    #[test]
    fn disabled_renders_nothing() {
        let mut text = String::from("x 1\n");
        hot(false, true).render_prometheus(&mut text);
        assert_eq!(text, "x 1\n");
    }
}
