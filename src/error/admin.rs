//! The admin API's rows of the error table: why the admin listener refused
//! an `/admin/*` request, with the status, reason word and title of its
//! problem document.
//!
//! Beside [`super::Reason`] so one module still decides every problem
//! idemgate writes. `/healthz`, `/readyz` and `/metrics` are not here:
//! probes and scrapers read plain text.

use http::{Response, StatusCode};

use super::ProblemTypes;
use crate::body::ProxyBody;

/// Why the admin API refused a request. Each variant fixes its status,
/// reason word and title; the `detail` says what to do instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminReason {
    /// The bearer token is missing or wrong (401, with `WWW-Authenticate`).
    Unauthorized,
    /// A read-only token (`[[admin.tokens]] scope = "read"`) asked for an
    /// action.
    ReadOnlyToken,
    /// `[admin] token` is not set, so the record and inbox APIs do not exist.
    AdminApiDisabled,
    /// No admin endpoint at this path.
    NotFound,
    /// The endpoint exists but not for this method.
    MethodNotAllowed,
    /// The request does not name its target correctly (record forms,
    /// listing parameters).
    BadRequest,
    /// No route has this name.
    UnknownRoute,
    /// The route has no `[route.inbox]`.
    InboxNotConfigured,
    /// The route has no `[route.entity]`.
    EntityNotConfigured,
    /// `GET /admin/hot-keys` while `[hot_keys] enabled = false`.
    HotKeysDisabled,
    /// No record under this key.
    RecordNotFound,
    /// No inbox delivery under this key.
    DeliveryNotFound,
    /// The store holds nothing for this entity (never seen, or expired).
    EntityNotFound,
    /// The inbox delivery is in a stage the action does not take.
    WrongStage,
    /// An inbox worker changed the delivery while the action ran.
    DeliveryChanged,
    /// The entity is no longer in the state, or has another pending
    /// change than, the operator saw: the correction was not applied.
    EntityChanged,
    /// The record is no longer in the state the operator saw (a purge's
    /// `expect_state=`): nothing was done.
    RecordChanged,
    /// A purge the entity route can not honour: the record's change is
    /// applied to its entity, so its next copy would be a repeat, not a
    /// first delivery.
    EntityApplied,
    /// The store did not answer.
    StoreUnavailable,
    /// The request's `Host` is not a name the admin listener answers to
    /// (`[admin] allowed_hosts`): a page of another site reaching it
    /// through DNS rebinding gets nothing.
    UnknownHost,
}

impl AdminReason {
    /// Every admin reason, in declaration order.
    pub const ALL: [Self; 20] = [
        Self::Unauthorized,
        Self::ReadOnlyToken,
        Self::AdminApiDisabled,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::BadRequest,
        Self::UnknownRoute,
        Self::InboxNotConfigured,
        Self::EntityNotConfigured,
        Self::HotKeysDisabled,
        Self::RecordNotFound,
        Self::DeliveryNotFound,
        Self::EntityNotFound,
        Self::WrongStage,
        Self::DeliveryChanged,
        Self::EntityChanged,
        Self::RecordChanged,
        Self::EntityApplied,
        Self::StoreUnavailable,
        Self::UnknownHost,
    ];

    /// Status, reason word and title: the one row of each variant.
    fn row(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Bearer token required",
            ),
            Self::ReadOnlyToken => (
                StatusCode::FORBIDDEN,
                "read_only_token",
                "Token may only read",
            ),
            Self::AdminApiDisabled => (
                StatusCode::NOT_FOUND,
                "admin_api_disabled",
                "Admin API disabled",
            ),
            Self::NotFound => (StatusCode::NOT_FOUND, "not_found", "No such endpoint"),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            Self::BadRequest => (StatusCode::BAD_REQUEST, "bad_request", "Bad request"),
            Self::UnknownRoute => (
                StatusCode::NOT_FOUND,
                "unknown_route",
                "No route of that name",
            ),
            Self::InboxNotConfigured => (
                StatusCode::NOT_FOUND,
                "inbox_not_configured",
                "Route has no inbox",
            ),
            Self::EntityNotConfigured => (
                StatusCode::NOT_FOUND,
                "entity_not_configured",
                "Route keeps no entity state",
            ),
            Self::HotKeysDisabled => (
                StatusCode::NOT_FOUND,
                "hot_keys_disabled",
                "Hot keys are turned off",
            ),
            Self::RecordNotFound => (StatusCode::NOT_FOUND, "record_not_found", "No record"),
            Self::DeliveryNotFound => (
                StatusCode::NOT_FOUND,
                "delivery_not_found",
                "No inbox delivery",
            ),
            Self::EntityNotFound => (StatusCode::NOT_FOUND, "entity_not_found", "No entity"),
            Self::WrongStage => (
                StatusCode::CONFLICT,
                "wrong_stage",
                "Delivery in another stage",
            ),
            Self::DeliveryChanged => (
                StatusCode::CONFLICT,
                "delivery_changed",
                "Delivery changed meanwhile",
            ),
            Self::EntityChanged => (
                StatusCode::CONFLICT,
                "entity_changed",
                "Entity changed meanwhile",
            ),
            Self::RecordChanged => (
                StatusCode::CONFLICT,
                "record_changed",
                "Record changed meanwhile",
            ),
            Self::EntityApplied => (
                StatusCode::CONFLICT,
                "entity_applied",
                "Change applied to its entity",
            ),
            Self::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "Idempotency store unavailable",
            ),
            Self::UnknownHost => (
                StatusCode::MISDIRECTED_REQUEST,
                "unknown_host",
                "Host not served here",
            ),
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        self.row().0
    }

    /// The reason word: the `reason` member and the end of the `type` URI.
    pub fn as_str(self) -> &'static str {
        self.row().1
    }

    /// The problem's short, fixed summary.
    pub fn title(self) -> &'static str {
        self.row().2
    }

    /// The problem document answering an admin request, `detail` saying
    /// what went wrong in this case. The reason travels in the answer's
    /// extensions too, so the audit trail (`admin::audit`) records the
    /// outcome without reading the body.
    pub fn response(self, types: &ProblemTypes, detail: &str) -> Response<ProxyBody> {
        let mut answer = types.response(self.status(), self.as_str(), self.title(), detail);
        answer.extensions_mut().insert(self);
        answer
    }
}
