//! Every store backend, for the store contract suites: a case is an async
//! fn generic over the backend's traits, and [`for_every_backend!`] makes
//! one test of it per backend, each on a fresh store of its own. A new
//! backend is one more constructor here and one more arm in the macro.
//!
//! The Redis backend runs on each server idemgate supports that the
//! machine has (`store::server`): Debian's `redis-server` (7.0) as
//! `redis`, and Valkey as `valkey` when [`super::valkey_server`] finds one
//! (`.ci/run` installs Valkey 9.1 and requires it; elsewhere a machine
//! without it skips those tests, saying so).

use idemgate::store::embedded::EmbeddedStore;
use idemgate::store::redis::RedisStore;

use super::RedisServer;

/// A fresh Redis store on a `redis-server` of its own (hold the server
/// for the whole test).
pub async fn fresh_redis_backend() -> (RedisServer, RedisStore) {
    let redis = RedisServer::start();
    let store = redis.store().await;
    (redis, store)
}

/// A fresh Redis store on a `valkey-server` of its own, if the machine has
/// one (hold the server for the whole test).
pub async fn fresh_valkey_backend() -> Option<(RedisServer, RedisStore)> {
    let Some(binary) = super::valkey_server() else {
        eprintln!("valkey-server not found: the Valkey run of this case is skipped");
        return None;
    };
    let valkey = RedisServer::start_binary(&binary, false);
    let store = valkey.store().await;
    Some((valkey, store))
}

/// A fresh embedded store in a directory of its own (hold the directory
/// for the whole test).
pub fn fresh_embedded_backend() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("contract.redb")).expect("embedded store");
    (dir, store)
}

/// `for_every_backend!(case, …)`: for each async fn `case(&store)` of the
/// calling module, a module `case` with one test per backend and server
/// (`redis`, `valkey`, `embedded`), each on a fresh store.
///
/// `for_every_backend!(blocking: case, …)`: the same for a model-based
/// suite, a plain fn `case(&store, &runtime, lane)` that drives its own
/// runtime (a proptest runner blocks on each history). `lane` is the
/// backend's own range of case numbers (`n << 32`), so the two backends'
/// histories are told apart in a failure's message.
macro_rules! for_every_backend {
    (blocking: $($case:ident),* $(,)?) => {$(
        mod $case {
            #[test]
            fn redis() {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                let (_redis, store) = runtime.block_on(crate::support::fresh_redis_backend());
                super::$case(&store, &runtime, 0);
            }

            #[test]
            fn valkey() {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                if let Some((_valkey, store)) = runtime.block_on(crate::support::fresh_valkey_backend()) {
                    super::$case(&store, &runtime, 2 << 32);
                }
            }

            #[test]
            fn embedded() {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                let (_dir, store) = crate::support::fresh_embedded_backend();
                super::$case(&store, &runtime, 1 << 32);
            }
        }
    )*};
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test]
            async fn redis() {
                let (_redis, store) = crate::support::fresh_redis_backend().await;
                super::$case(&store).await;
            }

            #[tokio::test]
            async fn valkey() {
                if let Some((_valkey, store)) = crate::support::fresh_valkey_backend().await {
                    super::$case(&store).await;
                }
            }

            #[tokio::test]
            async fn embedded() {
                let (_dir, store) = crate::support::fresh_embedded_backend();
                super::$case(&store).await;
            }
        }
    )*};
}

pub(crate) use for_every_backend;
