//! The test route's `[route.entity]` and its notices, shared by the suite's
//! entity tests and the Cluster run.

/// pending → success | failed, failed → success, success → refunded
/// (terminal), acknowledged with "success"; the entity is `json:/order`.
pub const ENTITY_MACHINE: &str = r#"
[route.entity]
id = ["json:/order"]
state = "json:/status"
transitions = ["pending -> success | failed", "failed -> success", "success -> refunded"]
terminal = ["refunded"]
ack_status = 200
ack_body = "success"
"#;

/// A notice `id` (its idempotency key) saying order `order` is now `status`.
pub fn entity_notice(id: &str, order: &str, status: &str) -> String {
    format!(r#"{{"id":"{id}","order":"{order}","status":"{status}"}}"#)
}

/// Delivers notice `id` (order `order`, now `status`) to `url`: the
/// status it is answered with.
pub async fn notify(url: &str, id: &str, order: &str, status: &str) -> u16 {
    super::deliver(url, &entity_notice(id, order, status))
        .await
        .status
}

/// Which store an entity test runs on: both run every behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Redis,
    Embedded,
}

/// A fresh store of `kind`: its `[store]` body, and the server or the
/// directory that keeps it alive (hold them for the whole test).
pub fn fresh_store(
    kind: StoreKind,
) -> (
    String,
    Option<super::RedisServer>,
    Option<tempfile::TempDir>,
) {
    match kind {
        StoreKind::Redis => {
            let redis = super::RedisServer::start();
            (super::redis_store(&redis), Some(redis), None)
        }
        StoreKind::Embedded => {
            let (dir, store) = super::temp_embedded_store();
            (store, None, Some(dir))
        }
    }
}

/// The states the handler was asked to take, in order: the `status` of
/// every notice that reached it.
pub fn handler_states(upstream: &super::Upstream) -> Vec<String> {
    upstream
        .bodies()
        .iter()
        .map(|body| {
            let value: serde_json::Value = serde_json::from_slice(body).unwrap();
            value["status"].as_str().unwrap().to_owned()
        })
        .collect()
}
