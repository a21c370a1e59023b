//! Lists of upstream statuses as the file writes them: classes (`"2xx"`)
//! and single codes (`"409"`), read by `cache_status`, `inbox.on` and
//! `inbox.delivered_status` alike.

/// Which upstream statuses are stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStatus {
    /// `(low, high)` inclusive ranges.
    pub(super) ranges: Vec<(u16, u16)>,
}

impl CacheStatus {
    /// Reads `cache_status` (and the statuses of `inbox.on`).
    pub(crate) fn parse(items: &[String]) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for item in items {
            let range = match item.as_bytes() {
                [d @ b'1'..=b'5', b'x', b'x'] => {
                    let base = u16::from(d - b'0') * 100;
                    (base, base + 99)
                }
                _ => match item.parse::<u16>() {
                    Ok(code @ 100..=599) => (code, code),
                    _ => {
                        return Err(format!(
                            "{item:?} is not a status class; expected \"2xx\"…\"5xx\" or a code 100-599"
                        ));
                    }
                },
            };
            ranges.push(range);
        }
        Ok(Self { ranges })
    }

    /// `["2xx"]`: the answers of a handler that accepted what it was sent.
    pub fn successes() -> Self {
        Self {
            ranges: vec![(200, 299)],
        }
    }

    /// The classes and codes as they are written in `cache_status`; a
    /// class with codes taken out (by an inbox) is listed code by code.
    pub fn names(&self) -> Vec<String> {
        self.ranges
            .iter()
            .flat_map(|&(low, high)| {
                if low % 100 == 0 && high == low + 99 {
                    vec![format!("{}xx", low / 100)]
                } else {
                    (low..=high).map(|code| code.to_string()).collect()
                }
            })
            .collect()
    }

    /// Whether an answer with this status is kept.
    pub fn contains(&self, status: u16) -> bool {
        self.ranges
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        let classes = CacheStatus::parse(&["2xx".into(), "409".into()]).unwrap();
        assert!(classes.contains(200) && classes.contains(299) && classes.contains(409));
        assert!(!classes.contains(300) && !classes.contains(410));
        assert!(CacheStatus::parse(&["6xx".into()]).is_err());
        assert!(CacheStatus::parse(&["20".into()]).is_err());
    }
}
