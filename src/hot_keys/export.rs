//! The hot-key series, written as Prometheus text at scrape time.
//!
//! Not registered with the metrics recorder on purpose: a recorder keeps
//! every series it ever saw, so keys that left the top `k` would pile up
//! as stale labels. Written fresh on every scrape instead, the series set
//! is exactly the current top `k` per route.

use std::fmt::Write;

use super::HotKeys;

/// `idemgate_hot_key_deliveries{route, rank, key}`: deliveries of the key
/// in the current window.
pub const HOT_KEY_DELIVERIES: &str = "idemgate_hot_key_deliveries";
/// `idemgate_hot_key_duplicates{route, rank, key}`: of those, duplicates.
pub const HOT_KEY_DUPLICATES: &str = "idemgate_hot_key_duplicates";
/// `idemgate_hot_key_window_seconds`: the window length.
pub const HOT_KEY_WINDOW_SECONDS: &str = "idemgate_hot_key_window_seconds";

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
        let families = [
            (
                HOT_KEY_DELIVERIES,
                "Deliveries of each of the route's top-k keys in the hot-key window",
                false,
            ),
            (
                HOT_KEY_DUPLICATES,
                "Of those deliveries, duplicates (replays, 409 in_flight/outcome_unknown, 422 fingerprint_mismatch)",
                true,
            ),
        ];
        for (name, help, duplicates) in families {
            line(out, format_args!("# HELP {name} {help}"));
            line(out, format_args!("# TYPE {name} gauge"));
            for (route, top) in &tops {
                for key in top {
                    let value = if duplicates {
                        key.duplicates
                    } else {
                        key.deliveries
                    };
                    line(
                        out,
                        format_args!(
                            "{name}{{route=\"{route}\",rank=\"{}\",key=\"{}\"}} {value}",
                            key.rank,
                            hex::encode(key.digest)
                        ),
                    );
                }
            }
        }
        line(
            out,
            format_args!("# HELP {HOT_KEY_WINDOW_SECONDS} Length of the hot-key window"),
        );
        line(out, format_args!("# TYPE {HOT_KEY_WINDOW_SECONDS} gauge"));
        line(
            out,
            format_args!("{HOT_KEY_WINDOW_SECONDS} {}", self.window().as_secs_f64()),
        );
    }
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

    use crate::hot_keys::sightings::REPLAY;

    fn hot(enabled: bool) -> HotKeys {
        let settings = HotKeysConfig {
            enabled,
            k: TopK::new(2).expect("valid"),
            window: Duration::from_secs(60),
        };
        HotKeys::new(&settings, ["pay", "we\"ird"])
    }

    #[tokio::test(start_paused = true)]
    async fn renders_exactly_the_current_top_k() {
        let hot = hot(true);
        let pay = hot.named("pay").expect("tracked");
        for n in 1..=3u8 {
            for _ in 0..n {
                pay.observe(&[n; 32], REPLAY);
            }
        }
        let mut text = String::from("idemgate_build_info{version=\"x\"} 1");
        hot.render_prometheus(&mut text);
        let three = hex::encode([3u8; 32]);
        let two = hex::encode([2u8; 32]);
        for line in [
            "idemgate_build_info{version=\"x\"} 1\n# HELP idemgate_hot_key_deliveries ".to_owned(),
            "# TYPE idemgate_hot_key_deliveries gauge\n".to_owned(),
            format!("idemgate_hot_key_deliveries{{route=\"pay\",rank=\"1\",key=\"{three}\"}} 3\n"),
            format!("idemgate_hot_key_deliveries{{route=\"pay\",rank=\"2\",key=\"{two}\"}} 2\n"),
            format!("idemgate_hot_key_duplicates{{route=\"pay\",rank=\"1\",key=\"{three}\"}} 3\n"),
            "# TYPE idemgate_hot_key_window_seconds gauge\nidemgate_hot_key_window_seconds 60\n"
                .to_owned(),
        ] {
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
        // Rank 3 fell out of the top 2; the idle route has no series.
        assert!(!text.contains(&hex::encode([1u8; 32])), "{text}");
        assert!(!text.contains("route=\"we"), "{text}");
        assert_eq!(text.matches("idemgate_hot_key_deliveries{").count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn route_names_are_escaped_and_idle_windows_empty() {
        let hot = hot(true);
        hot.named("we\"ird")
            .expect("tracked")
            .observe(&[9; 32], REPLAY);
        let mut text = String::new();
        hot.render_prometheus(&mut text);
        assert!(text.contains("route=\"we\\\"ird\""), "{text}");
        tokio::time::advance(Duration::from_secs(120)).await;
        let mut text = String::new();
        hot.render_prometheus(&mut text);
        assert!(!text.contains("route="), "{text}");
        assert!(text.contains("idemgate_hot_key_window_seconds 60"));
    }

    #[test]
    fn disabled_renders_nothing() {
        let mut text = String::from("x 1\n");
        hot(false).render_prometheus(&mut text);
        assert_eq!(text, "x 1\n");
    }
}
