//! `[listen]`: where senders deliver and where the admin listener serves,
//! read, defaulted and printed by serde.
//!
//! Both default to loopback: the proxy sits beside the handler it protects,
//! and metrics and the record API stay private unless the file says
//! otherwise. An address that does not parse is refused as the file is read,
//! with an example of one that does.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Default proxy address: loopback, beside the handler it protects.
pub const DEFAULT_PROXY_ADDR: &str = "127.0.0.1:8080";
/// Default admin address: loopback, so metrics and the record API stay
/// private.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8790";

/// `[listen]`, as written and as used.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Listen {
    /// Where senders deliver.
    #[serde(with = "address")]
    pub proxy: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`, `/admin/*`.
    #[serde(with = "address")]
    pub admin: SocketAddr,
}

impl Default for Listen {
    fn default() -> Self {
        let loopback = |text: &str| {
            text.parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
        };
        Self {
            proxy: loopback(DEFAULT_PROXY_ADDR),
            admin: loopback(DEFAULT_ADMIN_ADDR),
        }
    }
}

/// A listener address, written `"127.0.0.1:8080"`.
mod address {
    use super::{Deserializer, Serializer, SocketAddr};
    use crate::config::text::parse_text;

    /// Prints the address as the file writes it.
    pub(super) fn serialize<S: Serializer>(
        address: &SocketAddr,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(address)
    }

    /// Reads an `ip:port`; anything else is refused with an example.
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SocketAddr, D::Error> {
        parse_text(deserializer, |text| {
            text.parse()
                .map_err(|_| format!("{text:?} is not an address such as \"127.0.0.1:8080\""))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::{MINIMAL, problems_of};

    #[test]
    fn both_listeners_default_to_loopback_and_a_bad_address_names_its_key() {
        let config = Config::parse(MINIMAL).unwrap();
        assert_eq!(config.listen.proxy.to_string(), super::DEFAULT_PROXY_ADDR);
        assert_eq!(config.listen.admin.to_string(), super::DEFAULT_ADMIN_ADDR);
        let text = format!("[listen]\nproxy = \"0.0.0.0:9000\"\nadmin = \"localhost\"\n{MINIMAL}");
        assert_eq!(
            problems_of(&text),
            "listen.admin: \"localhost\" is not an address such as \"127.0.0.1:8080\""
        );
    }
}
