//! The credentials a Redis connection is given apart from its URL, kept
//! in a type whose `Debug` can not print the password.

/// Redis credentials given apart from the URL (`[store] username` and
/// `password`); `Debug` never prints the password.
#[derive(Clone, Default)]
pub struct RedisAuth {
    /// ACL user; `None`: the URL's, or Redis' `default` user.
    pub username: Option<String>,
    /// Password; `None`: the URL's, if any.
    pub password: Option<String>,
    /// A `rediss://` URL's own CAs and client certificate (`[store]
    /// tls_*`); `None`: fred's default connector (system roots).
    pub tls: Option<std::sync::Arc<fred::rustls::ClientConfig>>,
}

impl std::fmt::Debug for RedisAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}
