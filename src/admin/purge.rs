//! `DELETE /admin/records/{route}…`: an operator's purge, judged against
//! the record the operator saw.
//!
//! A purge is the one operator action that can make a delivery run twice:
//! the next copy of a purged key is forwarded as a first delivery. So a
//! purge says which state it saw, `expect_state=` with the state word the
//! record API, the listing, the console and the CLI show (`in_flight`,
//! `unknown_owner_lost`, `unknown`, `completed`, `inbox`):
//!
//! * without it the answer is 400, naming the state now and what a purge
//!   does to a record in that state (a completed record's handler already
//!   did the work: its next copy runs again);
//! * a record in another state now is not purged: 409 `record_changed`,
//!   with the state now;
//! * a delivery the inbox still owes is never purged: its sender was told
//!   "ok" and will not send it again, so discarding it is a drop, which
//!   the inbox API does on purpose (409 `wrong_stage`, pointing there);
//! * the delete carries what was seen (state byte and owner,
//!   [`SeenRecord`]) down to the store, which refuses it in the same
//!   atomic step if the record moved on between the look and the delete.
//!
//! A key whose record is gone while its entity still holds it as the
//! pending change (unresolved) is purged without `expect_state=`: no
//! record is removed, the operator says the change never happened.

use http::{Response, StatusCode};

use super::audit::Acted;
use super::{Admin, AdminReason, query_pairs, reply, state_word};
use crate::body::ProxyBody;
use crate::config::Route;
use crate::record::{RecordState, Stage};
use crate::store::{Purged, SeenRecord, StoreKey};

/// The query's `expect_state=` value, and the rest of the query (which
/// names the record); an error when it is repeated.
pub(super) fn expected_state(
    query: Option<&str>,
) -> Result<(Option<String>, Option<String>), &'static str> {
    let mut expect = None;
    let mut rest = Vec::new();
    for (name, value) in query_pairs(query) {
        if name != "expect_state" {
            rest.push(format!("{name}={value}"));
            continue;
        }
        if expect.is_some() {
            return Err("expect_state= is given twice");
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(value).collect();
        expect = Some(String::from_utf8_lossy(&decoded).into_owned());
    }
    let rest = (!rest.is_empty()).then(|| rest.join("&"));
    Ok((expect, rest))
}

/// What purging a record in state `word` does, in an operator's words.
pub(crate) fn consequence(word: &str) -> &'static str {
    match word {
        "completed" | "inbox" => {
            "the handler already did this delivery: after a purge its next copy is forwarded and \
             runs again"
        }
        "in_flight" => {
            "a live claim: the delivery is being handled now, and after a purge a copy would run \
             beside it"
        }
        _ => {
            "the handler may or may not have acted: check the backend first; after a purge the \
             next copy is forwarded"
        }
    }
}

impl Admin {
    /// Purges the record under `key` if it is in the state `expect` says
    /// (module docs); the answer carries what it found for the audit trail.
    pub(super) async fn purge(
        &self,
        route: &Route,
        key: &StoreKey,
        key_hash: &str,
        expect: Option<&str>,
    ) -> Response<ProxyBody> {
        let (answer, before, after) = self.purge_judged(route, key, key_hash, expect).await;
        Acted {
            target: Some(key_hash.to_owned()),
            expected: expect.map(str::to_owned),
            before: before.map(str::to_owned),
            after: after.map(str::to_owned),
            done: answer.status() == StatusCode::NO_CONTENT,
        }
        .on(answer)
    }

    /// [`Admin::purge`]'s answer, the state it found and the state it left.
    async fn purge_judged(
        &self,
        route: &Route,
        key: &StoreKey,
        key_hash: &str,
        expect: Option<&str>,
    ) -> (
        Response<ProxyBody>,
        Option<&'static str>,
        Option<&'static str>,
    ) {
        match self.applied_to_entity(route, key).await {
            Ok(false) => {}
            Ok(true) => {
                let refused = self.problem(
                    AdminReason::EntityApplied,
                    "this delivery's change is applied to its entity: its next copy would be a repeat, not a first delivery. To undo or redo the change, set the entity's state (PUT /admin/entities/{route})",
                );
                return (refused, None, None);
            }
            Err(error) => {
                let failed = self.problem(AdminReason::StoreUnavailable, &error.to_string());
                return (failed, None, None);
            }
        }
        let existing = match self.store.lookup(key).await {
            Ok(existing) => existing,
            Err(error) => {
                let failed = self.problem(AdminReason::StoreUnavailable, &error.to_string());
                return (failed, None, None);
            }
        };
        let mut seen = None;
        let mut word = "absent";
        if let Some(existing) = &existing {
            word = state_word(route, existing);
            if let RecordState::Inbox(entry) = &existing.record.state
                && entry.stage != Stage::Delivered
            {
                let refused = self.problem(
                    AdminReason::WrongStage,
                    &format!(
                        "this delivery was acknowledged to its sender, who will not send it again, and the inbox holds it ({}): a purge would discard it. Drop it on purpose (POST /admin/inbox/{}/drop?hash={key_hash}: resolved without being sent) or retry it",
                        entry.stage.as_str(),
                        route.name
                    ),
                );
                return (refused, Some(word), Some(word));
            }
            match expect {
                None => {
                    let refused = self.problem(
                        AdminReason::BadRequest,
                        &format!(
                            "say which state you saw with expect_state=: the record is {word} now, and {}",
                            consequence(word)
                        ),
                    );
                    return (refused, Some(word), Some(word));
                }
                Some(expected) if expected != word => {
                    return (self.record_changed(word, expected), Some(word), Some(word));
                }
                Some(_) => seen = Some(SeenRecord::of(&existing.record)),
            }
        }
        let answer = match self.store.purge(key, seen).await {
            Ok(Purged::Deleted) => {
                tracing::warn!(
                    route = route.name,
                    key = key_hash,
                    state = word,
                    "record purged by operator"
                );
                let done = reply(StatusCode::NO_CONTENT, "text/plain", String::new());
                return (done, Some(word), Some("absent"));
            }
            Ok(Purged::Absent) => {
                let absent = self.problem(AdminReason::RecordNotFound, "no record under this key");
                return (absent, Some(word), Some(word));
            }
            Ok(Purged::Changed) => self.problem(
                AdminReason::RecordChanged,
                &format!(
                    "the record changed from {word} while it was being purged (completed, queued, \
                     or claimed again): nothing was purged; look again"
                ),
            ),
            Err(error) => self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        };
        (answer, Some(word), None)
    }

    fn record_changed(&self, now: &str, expected: &str) -> Response<ProxyBody> {
        self.problem(
            AdminReason::RecordChanged,
            &format!(
                "the record is {now} now, not {expected}: nothing was purged; look again ({})",
                consequence(now)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_state_is_taken_out_of_the_query() {
        assert_eq!(
            expected_state(Some("hash=ab&expect_state=completed")),
            Ok((Some("completed".into()), Some("hash=ab".into())))
        );
        assert_eq!(
            expected_state(Some("key=k")),
            Ok((None, Some("key=k".into())))
        );
        assert_eq!(expected_state(None), Ok((None, None)));
        assert_eq!(
            expected_state(Some("expect_state=unknown")),
            Ok((Some("unknown".into()), None))
        );
        assert!(expected_state(Some("expect_state=a&expect_state=b")).is_err());
    }
}
