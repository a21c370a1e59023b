use super::*;
use http_body_util::BodyExt;

fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// contract §3, row by row: a rejection of each reason, its status and word.
fn spec_table() -> Vec<(Rejection, u16, &'static str)> {
    vec![
        (Rejection::BodyTooLarge, 413, "body_too_large"),
        (Rejection::BodyTimeout, 408, "body_timeout"),
        (Rejection::SignatureMissing, 401, "signature_missing"),
        (Rejection::SignatureInvalid, 401, "signature_invalid"),
        (Rejection::TimestampMissing, 401, "timestamp_missing"),
        (
            Rejection::TimestampOutOfWindow,
            401,
            "timestamp_out_of_window",
        ),
        (Rejection::KeyMissing("k".into()), 400, "key_missing"),
        (Rejection::KeyInvalid("k".into()), 400, "key_invalid"),
        (Rejection::BadRequestBody("json"), 400, "bad_request_body"),
        (
            Rejection::FieldInvalid("json:/status".into()),
            400,
            "field_invalid",
        ),
        (Rejection::FingerprintMismatch, 422, "fingerprint_mismatch"),
        (
            Rejection::TransitionRefused {
                from: "success".into(),
                to: "pending".into(),
            },
            409,
            "transition_refused",
        ),
        (
            Rejection::InFlight {
                retry_after: one_second(),
            },
            409,
            "in_flight",
        ),
        (
            Rejection::OutcomeUnknown {
                retry_after: one_second(),
            },
            409,
            "outcome_unknown",
        ),
        (
            Rejection::StoreUnavailable {
                retry_after: one_second(),
            },
            503,
            "store_unavailable",
        ),
        (Rejection::UpstreamError, 502, "upstream_error"),
        (Rejection::UpstreamTimeout, 504, "upstream_timeout"),
        (Rejection::RouteNotFound, 404, "route_not_found"),
        (Rejection::PathAmbiguous, 400, "path_ambiguous"),
        (Rejection::UnsignedParameters, 400, "unsigned_parameters"),
        (Rejection::OverCapacity, 503, "over_capacity"),
        (
            Rejection::FieldAmbiguous("json:/status".into()),
            400,
            "field_ambiguous",
        ),
    ]
}

/// A connection beyond its peer's share is refused with the same row as a
/// spent body budget: the sender retries both the same way.
#[test]
fn a_peer_over_its_share_is_over_capacity() {
    let response = Rejection::PeerOverShare.into_response(&ProblemTypes::default());
    assert_eq!(response.status(), 503);
    assert_eq!(Rejection::PeerOverShare.reason(), Reason::OverCapacity);
    assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
}

/// contract §3, row by row: status and reason word.
#[test]
fn every_row_of_the_spec_table() {
    let mut reasons = Vec::new();
    for (rejection, status, reason) in spec_table() {
        assert_eq!(rejection.status().as_u16(), status, "{rejection:?}");
        assert_eq!(rejection.reason().as_str(), reason, "{rejection:?}");
        reasons.push(rejection.reason());
    }
    assert_eq!(
        reasons,
        Reason::ALL,
        "Reason::ALL lists every reason once, in table order"
    );
}

/// Metrics index their counters by discriminant: `ALL` holds each
/// variant once, in declaration order, and no two share a word.
#[test]
fn reason_all_is_complete_and_words_are_unique() {
    for (i, reason) in Reason::ALL.iter().enumerate() {
        assert_eq!(*reason as usize, i, "{reason:?}");
    }
    let words: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(words.len(), Reason::ALL.len(), "as_str words are unique");
    assert!(!words.contains(ANSWER_NOT_STORED), "not a rejection reason");
}

#[tokio::test]
async fn problem_json_has_every_member_and_retry_after() {
    let response = Rejection::StoreUnavailable {
        retry_after: Duration::from_millis(1500),
    }
    .into_response(&ProblemTypes::default());
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["type"], "urn:idemgate:problem:store_unavailable");
    for member in ["type", "title", "status", "detail", "reason"] {
        assert!(doc.get(member).is_some(), "missing {member}");
    }
    assert_eq!(doc["status"], 503);
    assert_eq!(doc["reason"], "store_unavailable");
}

#[test]
fn only_waiting_rejections_carry_retry_after() {
    let response = Rejection::SignatureInvalid.into_response(&ProblemTypes::default());
    assert!(response.headers().get(header::RETRY_AFTER).is_none());
    let response = Rejection::OverCapacity.into_response(&ProblemTypes::default());
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
}

#[tokio::test]
async fn a_configured_base_types_every_document() {
    let types = ProblemTypes::new("https://docs.example.com/problems/").unwrap();
    let response = Rejection::SignatureInvalid.into_response(&types);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        doc["type"],
        "https://docs.example.com/problems/signature_invalid"
    );
    let body = answer_not_stored(StatusCode::OK, &types);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        doc["type"],
        "https://docs.example.com/problems/answer_not_stored"
    );
    let response = AdminReason::Unauthorized.response(&types, "d");
    assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        doc["type"],
        "https://docs.example.com/problems/unauthorized"
    );
    assert_eq!(doc["status"], 401);
}

/// The document operators read, kept complete by this test.
const PROBLEMS_DOC: &str = include_str!("../../docs/problems.md");
/// The contract, whose §3 and §6 tables list the same problems.
const CONTRACT_DOC: &str = include_str!("../../docs/contract.md");

/// The row of `docs/problems.md` for one problem: word, status, title.
fn doc_row(word: &str, status: StatusCode, title: &str) -> String {
    format!("| `{word}` | {} | {title} |", status.as_u16())
}

/// Every proxy reason, `answer_not_stored` and every admin reason has
/// its row in docs/problems.md, with the status and title it is sent
/// with.
#[test]
fn every_problem_is_documented() {
    let mut rows: Vec<String> = spec_table()
        .into_iter()
        .map(|(rejection, _, _)| {
            let row = rejection.row();
            doc_row(row.reason.as_str(), row.status, row.title)
        })
        .collect();
    // Sent with the status the first answer had.
    rows.push(format!(
        "| `{ANSWER_NOT_STORED}` | stored | {ANSWER_NOT_STORED_TITLE} |"
    ));
    rows.extend(
        AdminReason::ALL
            .iter()
            .map(|r| doc_row(r.as_str(), r.status(), r.title())),
    );
    for row in rows {
        assert!(PROBLEMS_DOC.contains(&row), "docs/problems.md lacks {row}");
        assert!(CONTRACT_DOC.contains(&row), "docs/contract.md lacks {row}");
    }
}

/// Admin words are unique, and one shared with a proxy reason names
/// the same problem: same status, same title.
#[test]
fn admin_words_are_unique_and_agree_with_proxy_words() {
    let words: std::collections::BTreeSet<&str> =
        AdminReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(words.len(), AdminReason::ALL.len());
    for (i, reason) in AdminReason::ALL.iter().enumerate() {
        assert_eq!(*reason as usize, i, "{reason:?}");
    }
    for (rejection, _, _) in spec_table() {
        let row = rejection.row();
        if let Some(admin) = AdminReason::ALL
            .iter()
            .find(|a| a.as_str() == row.reason.as_str())
        {
            assert_eq!((admin.status(), admin.title()), (row.status, row.title));
        }
    }
    assert!(!words.contains(ANSWER_NOT_STORED));
}
