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
