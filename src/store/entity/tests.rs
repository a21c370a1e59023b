use std::time::Duration;

use super::*;
use crate::config::{CacheStatus, Sources};
use crate::record::{InboxEntry, StoredBody, StoredRequest, StoredResponse};

fn step(to: &str, from: &[&str], initial: bool) -> EntityStep {
    EntityStep {
        key: EntityKey::new("t", "pay", &"e".repeat(32)),
        to: to.to_owned(),
        sources: Sources {
            from: from.iter().map(|s| (*s).to_owned()).collect(),
            initial,
        },
        retention: Duration::from_secs(60),
        advance: CacheStatus::successes(),
        event: None,
    }
}

fn record(n: u8) -> String {
    format!(
        "t:pay:{}{{{}}}",
        format!("{n:02x}").repeat(32),
        "e".repeat(32)
    )
}

#[test]
fn a_change_is_pending_until_its_answer_applies_it() {
    let mut entity = EntityState::default();
    let pending = step("pending", &[], true);
    assert_eq!(
        entity.claim(&pending, &record(1), PendingRecord::Absent, 10),
        Ok(())
    );
    assert_eq!(entity.state, None, "not before the handler answered");
    // A second delivery for the entity meanwhile waits.
    let success = step("success", &["pending", "failed"], true);
    let blocker = Blocker::InFlight {
        remaining: Duration::from_secs(5),
        hold: ClaimHold::default(),
    };
    assert_eq!(
        entity.claim(&success, &record(2), PendingRecord::Open(blocker), 11),
        Err(EntityVerdict::Busy { blocker })
    );
    // The handler's success applies it, in the completion's step.
    entity.settle(&record(1), EntityEffect::Apply, 12);
    assert_eq!(entity.state.as_deref(), Some("pending"));
    assert_eq!(entity.since_ms, 12);
    assert_eq!(entity.pending, None);
    assert_eq!(
        entity.claim(&success, &record(2), PendingRecord::Absent, 13),
        Ok(())
    );
    entity.settle(&record(2), EntityEffect::Apply, 14);
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert_eq!(entity.applied, 2);
    assert_eq!(entity.history[0].kind, TransitionKind::Applied);
    assert_eq!(entity.history[0].from.as_deref(), Some("pending"));
}

#[test]
fn a_failed_or_released_change_leaves_the_state() {
    let mut entity = EntityState {
        state: Some("pending".into()),
        ..EntityState::default()
    };
    let success = step("success", &["pending"], false);
    assert_eq!(
        entity.claim(&success, &record(1), PendingRecord::Absent, 1),
        Ok(())
    );
    entity.settle(&record(1), EntityEffect::Keep, 2);
    assert!(
        entity.pending.is_some(),
        "an unknown outcome keeps it pending"
    );
    entity.settle(&record(9), EntityEffect::Apply, 2);
    assert!(
        entity.pending.is_some(),
        "another record's write is not this change"
    );
    // Released: the release drops the change in the step that deletes
    // its record.
    entity.settle(&record(1), EntityEffect::Drop, 3);
    assert_eq!(entity.pending, None);
    assert_eq!(
        entity.claim(&success, &record(2), PendingRecord::Absent, 3),
        Ok(())
    );
    assert_eq!(entity.state.as_deref(), Some("pending"));
    entity.settle(&record(2), EntityEffect::Drop, 4);
    assert_eq!(entity.state.as_deref(), Some("pending"));
    assert_eq!(entity.pending, None);
}

#[test]
fn a_change_whose_record_vanished_unsettled_holds_the_entity() {
    // An unknown outcome whose hold ran out (or a lost owner's claim, or
    // an evicted record): nothing said the change was not made, so the
    // entity is never judged as if it were not.
    let mut entity = EntityState {
        state: Some("pending".into()),
        ..EntityState::default()
    };
    let success = step("success", &["pending"], false);
    entity
        .claim(&success, &record(1), PendingRecord::Absent, 1)
        .unwrap();
    entity.settle(&record(1), EntityEffect::Keep, 2);
    for n in 2..5 {
        assert_eq!(
            entity.claim(&success, &record(n), PendingRecord::Absent, 3),
            Err(EntityVerdict::Busy {
                blocker: Blocker::Unresolved
            })
        );
    }
    assert_eq!(entity.state.as_deref(), Some("pending"));
    assert_eq!(
        entity.pending.as_ref().map(Pending::delivery),
        Some(record(1).rsplit_once(':').unwrap().1)
    );
    // The operator purges the pending delivery: the change never happened.
    entity.settle(&record(1), EntityEffect::Drop, 4);
    assert_eq!(
        entity.claim(&success, &record(2), PendingRecord::Absent, 5),
        Ok(())
    );
}

fn answered(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        headers: Vec::new(),
        body: StoredBody::Kept(bytes::Bytes::from_static(b"x")),
    }
}

fn in_inbox(stage: Stage, last: Option<u16>) -> Record {
    crate::record::sample(RecordState::Inbox(Box::new(InboxEntry {
        ack: answered(200),
        stage,
        attempts: 1,
        limit: 3,
        due_ms: 0,
        route: "pay".into(),
        last_error: String::new(),
        last_answer: last.map(answered),
        request: StoredRequest {
            method: bytes::Bytes::from_static(b"POST"),
            target: bytes::Bytes::from_static(b"/"),
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        },
        probes: 0,
    })))
}

#[test]
fn only_an_answer_advance_status_lists_applies_the_change() {
    let successes = CacheStatus::successes();
    let of = |state| EntityEffect::of(&crate::record::sample(state), &successes);
    assert_eq!(
        of(RecordState::Completed(answered(200))),
        EntityEffect::Apply
    );
    assert_eq!(
        of(RecordState::Completed(answered(204))),
        EntityEffect::Apply
    );
    // A 404 that cache_status stores and replays is still a refusal.
    assert_eq!(
        of(RecordState::Completed(answered(404))),
        EntityEffect::Drop
    );
    assert_eq!(
        of(RecordState::Completed(answered(409))),
        EntityEffect::Drop
    );
    assert_eq!(of(RecordState::Unknown), EntityEffect::Keep);
    assert_eq!(
        of(RecordState::InFlight(Default::default())),
        EntityEffect::Keep
    );
    let accepts_409 = CacheStatus::parse(&["2xx".into(), "409".into()]).unwrap();
    let record = crate::record::sample(RecordState::Completed(answered(409)));
    assert_eq!(EntityEffect::of(&record, &accepts_409), EntityEffect::Apply);
    assert_eq!(EntityEffect::of_route(&record, None), EntityEffect::Keep);

    let inbox = |stage, last| EntityEffect::of(&in_inbox(stage, last), &successes);
    assert_eq!(inbox(Stage::Delivered, Some(200)), EntityEffect::Apply);
    assert_eq!(inbox(Stage::Delivered, Some(404)), EntityEffect::Drop);
    assert_eq!(inbox(Stage::Delivered, None), EntityEffect::Apply);
    // A dead delivery may still be retried: its change stays pending.
    assert_eq!(inbox(Stage::Dead, Some(503)), EntityEffect::Keep);
    assert_eq!(inbox(Stage::Unknown, None), EntityEffect::Keep);
    assert_eq!(inbox(Stage::Queued, None), EntityEffect::Keep);
    assert_eq!(inbox(Stage::Delivering, None), EntityEffect::Keep);
    assert_eq!(inbox(Stage::Dropped, None), EntityEffect::Drop);
}

#[test]
fn a_completed_pending_record_is_applied_by_the_next_claim() {
    let mut entity = EntityState::default();
    entity
        .claim(
            &step("success", &[], true),
            &record(1),
            PendingRecord::Absent,
            1,
        )
        .unwrap();
    let failed = step("failed", &["pending"], true);
    assert_eq!(
        entity.claim(&failed, &record(2), PendingRecord::Completed, 2),
        Err(EntityVerdict::Judged(Judgement::Refused {
            from: Some("success".into())
        }))
    );
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert_eq!((entity.applied, entity.refused), (1, 1));
}

#[test]
fn repeats_and_refusals_are_remembered_and_bounded() {
    let mut entity = EntityState {
        state: Some("success".into()),
        ..EntityState::default()
    };
    let again = step("success", &["pending"], true);
    for n in 0..20 {
        assert_eq!(
            entity.claim(&again, &record(n), PendingRecord::Absent, u64::from(n)),
            Err(EntityVerdict::Judged(Judgement::Repeat))
        );
    }
    assert_eq!(entity.repeats, 20);
    assert_eq!(entity.history.len(), HISTORY);
    assert_eq!(entity.history[0].at_ms, 19, "newest first");
    let fresh = step("pending", &[], false);
    assert_eq!(
        EntityState::default().claim(&fresh, &record(1), PendingRecord::Absent, 1),
        Err(EntityVerdict::Judged(Judgement::Refused { from: None })),
        "not an initial state"
    );
}

#[test]
fn the_redis_fields_read_back_as_the_same_state() {
    let mut entity = EntityState::default();
    entity
        .claim(&step("a", &[], true), &record(1), PendingRecord::Absent, 5)
        .unwrap();
    entity.settle(&record(1), EntityEffect::Apply, 6);
    entity
        .claim(
            &step("b", &["a"], false),
            &record(2),
            PendingRecord::Absent,
            7,
        )
        .unwrap();
    let history: Vec<String> = entity.history.iter().map(Transition::line).collect();
    let pending = entity.pending.clone().unwrap();
    let fields = [
        ("s", "a".to_owned()),
        ("at", "6".to_owned()),
        ("pk", pending.record),
        ("pf", "a".to_owned()),
        ("pt", "b".to_owned()),
        ("h", history.join("\n")),
        ("n", "1".to_owned()),
    ];
    let read = EntityState::from_fields(fields.iter().map(|(f, v)| (*f, v.as_str())));
    assert_eq!(read, entity);
}

#[test]
fn notices_behind_a_busy_entity_are_held_and_judged_in_turn() {
    let mut entity = EntityState::default();
    let success = step("success", &["pending"], true);
    entity
        .claim(&success, &record(1), PendingRecord::Absent, 1)
        .unwrap();
    let in_flight = PendingRecord::Open(Blocker::InFlight {
        remaining: Duration::from_secs(9),
        hold: ClaimHold::default(),
    });
    let refund = step("refunded", &["success"], false);
    let failed = step("failed", &["pending"], true);
    assert_eq!(
        entity.hold(&refund, &record(2), in_flight, 2, 2),
        HoldVerdict::Held
    );
    assert_eq!(
        entity.hold(&failed, &record(3), in_flight, 2, 3),
        HoldVerdict::Held
    );
    assert_eq!(
        entity.hold(&refund, &record(4), in_flight, 2, 4),
        HoldVerdict::Full,
        "max_held_per_entity"
    );
    // A new claim meanwhile is busy, behind the change or behind the queue.
    assert_eq!(
        entity.claim(&refund, &record(5), in_flight, 5),
        Err(EntityVerdict::Busy {
            blocker: Blocker::InFlight {
                remaining: Duration::from_secs(9),
                hold: ClaimHold::default(),
            }
        })
    );
    // Nothing held goes while the change is pending; the change's own
    // record always may.
    assert_eq!(entity.take(&record(2), 6), Err(KeptBack::Wait));
    assert_eq!(entity.take(&record(1), 6), Ok(()));
    entity.settle(&record(1), EntityEffect::Apply, 7);
    assert_eq!(
        entity.claim(&refund, &record(5), PendingRecord::Absent, 7),
        Err(EntityVerdict::Busy {
            blocker: Blocker::Queue
        }),
        "a new notice does not jump the queue"
    );
    // Only the head goes, and is judged against "success".
    assert_eq!(entity.take(&record(3), 8), Err(KeptBack::Wait));
    assert_eq!(entity.take(&record(2), 8), Ok(()));
    assert_eq!(
        entity.pending.as_ref().map(|p| p.to.as_str()),
        Some("refunded")
    );
    entity.settle(&record(2), EntityEffect::Apply, 9);
    // The failure's turn: refused from "refunded"; the worker's drop then
    // empties the queue.
    assert_eq!(
        entity.take(&record(3), 10),
        Err(KeptBack::Decided(
            Judgement::Refused {
                from: Some("refunded".into())
            },
            "failed".into()
        ))
    );
    entity.settle(&record(3), EntityEffect::Drop, 10);
    assert!(entity.held.is_empty());
    assert_eq!((entity.applied, entity.refused), (2, 1));
    assert_eq!(
        entity.hold(&refund, &record(6), PendingRecord::Absent, 2, 11),
        HoldVerdict::Free
    );
    // A delivery no entity knows of (its entity expired) goes as it is.
    assert_eq!(entity.take(&record(9), 12), Ok(()));
}

#[test]
fn a_held_notice_dropped_or_purged_leaves_the_queue() {
    let mut entity = EntityState::default();
    entity
        .claim(
            &step("pending", &[], true),
            &record(1),
            PendingRecord::Absent,
            1,
        )
        .unwrap();
    let open = PendingRecord::Open(Blocker::Inbox);
    let success = step("success", &["pending"], true);
    entity.hold(&success, &record(2), open, 8, 2);
    entity.hold(&success, &record(3), open, 8, 3);
    entity.settle(&record(2), EntityEffect::Drop, 4);
    assert_eq!(
        entity.held.iter().map(Held::delivery).collect::<Vec<_>>(),
        [record(3).rsplit_once(':').unwrap().1]
    );
    assert!(
        entity.pending.is_some(),
        "the pending change is not touched"
    );
}

#[test]
fn held_notices_read_back_from_the_redis_field() {
    let held = Held::of(&step("success", &["pending", "failed"], false), &record(4));
    assert_eq!(Held::parse(&held.line()), Some(held.clone()));
    let initial = Held::of(&step("pending", &[], true), &record(5));
    assert_eq!(Held::parse(&initial.line()), Some(initial.clone()));
    let fields = [("q", format!("{}\n{}", held.line(), initial.line()))];
    let read = EntityState::from_fields(fields.iter().map(|(f, v)| (*f, v.as_str())));
    assert_eq!(read.held, [held, initial]);
}

fn with_event(mut step: EntityStep, event: &str) -> EntityStep {
    step.event = Some(event.to_owned());
    step
}

#[test]
fn the_same_state_with_a_new_event_is_a_change_and_with_the_same_a_repeat() {
    let mut entity = EntityState {
        state: Some("success".into()),
        ..EntityState::default()
    };
    // Alipay: each partial refund is another TRADE_SUCCESS with its own
    // out_biz_no.
    let refund_a = with_event(step("success", &["pending"], true), "a");
    assert_eq!(
        entity.claim(&refund_a, &record(1), PendingRecord::Absent, 1),
        Ok(())
    );
    assert_eq!(entity.pending.as_ref().unwrap().event.as_deref(), Some("a"));
    entity.settle(&record(1), EntityEffect::Apply, 2);
    assert_eq!(entity.events.last().map(String::as_str), Some("a"));
    // The same refund notified again: a repeat.
    assert_eq!(
        entity.claim(&refund_a, &record(2), PendingRecord::Absent, 3),
        Err(EntityVerdict::Judged(Judgement::Repeat))
    );
    // Without an event, the same state is a repeat as before.
    assert_eq!(
        entity.claim(
            &step("success", &["pending"], true),
            &record(3),
            PendingRecord::Absent,
            4
        ),
        Err(EntityVerdict::Judged(Judgement::Repeat))
    );
    // A second partial refund: a change the handler must see.
    let refund_b = with_event(step("success", &["pending"], true), "b");
    assert_eq!(
        entity.claim(&refund_b, &record(4), PendingRecord::Absent, 5),
        Ok(())
    );
    entity.settle(&record(4), EntityEffect::Apply, 6);
    assert_eq!((entity.applied, entity.repeats), (2, 2));
    // The first refund notified again after the second: still a repeat.
    assert_eq!(
        entity.claim(&refund_a, &record(7), PendingRecord::Absent, 6),
        Err(EntityVerdict::Judged(Judgement::Repeat))
    );
    assert_eq!(entity.repeats, 3);
    // A state change without an event forgets the last one.
    let closed = step("closed", &["success"], false);
    entity
        .claim(&closed, &record(5), PendingRecord::Absent, 7)
        .unwrap();
    entity.settle(&record(5), EntityEffect::Apply, 8);
    assert_eq!(
        (
            entity.state.as_deref(),
            entity.events.last().map(String::as_str)
        ),
        (Some("closed"), None)
    );
    // An event never opens a way out of a state the machine closes.
    let late = with_event(step("pending", &[], false), "c");
    assert_eq!(
        entity.claim(&late, &record(6), PendingRecord::Absent, 9),
        Err(EntityVerdict::Judged(Judgement::Refused {
            from: Some("closed".into())
        }))
    );
}

#[test]
fn events_read_back_from_the_redis_fields() {
    let fields = [
        ("s", "success"),
        ("e", "ab"),
        ("pk", "t:pay:x"),
        ("pf", "success"),
        ("pt", "success"),
        ("pe", "cd"),
    ];
    let read = EntityState::from_fields(fields.iter().copied());
    assert_eq!(read.events.last().map(String::as_str), Some("ab"));
    assert_eq!(read.pending.unwrap().event.as_deref(), Some("cd"));
    let held = Held::of(
        &with_event(step("success", &["pending"], true), "ef"),
        &record(1),
    );
    assert_eq!(Held::parse(&held.line()), Some(held));
}

#[test]
fn a_correction_needs_what_was_seen_and_keeps_an_applied_changes_event() {
    let mut entity = EntityState {
        state: Some("success".into()),
        ..EntityState::default()
    };
    let refund = with_event(step("success", &["pending"], true), "r1");
    entity
        .claim(&refund, &record(1), PendingRecord::Absent, 1)
        .unwrap();
    let pending = Some(record(1).rsplit_once(':').unwrap().1.to_owned());
    let set = Correction::Set("success".into());
    let stale = Seen {
        state: Some("success".into()),
        pending: None,
    };
    assert!(
        !entity.correct(&stale, &set, "ana", 2),
        "another pending change than shown"
    );
    let seen = Seen {
        state: Some("success".into()),
        pending,
    };
    assert!(entity.correct(&seen, &set, "ana", 3));
    assert_eq!(entity.pending, None);
    // The operator said the refund was made: a copy of it is a repeat.
    assert_eq!(entity.events.last().map(String::as_str), Some("r1"));
    assert_eq!(
        entity.claim(&refund, &record(2), PendingRecord::Absent, 4),
        Err(EntityVerdict::Judged(Judgement::Repeat))
    );
    assert_eq!(entity.history[1].kind, TransitionKind::Set);
    assert_eq!(entity.history[1].delivery, "ana");
    let now = Seen {
        state: Some("success".into()),
        pending: None,
    };
    assert!(entity.correct(&now, &Correction::Clear, "bo", 5));
    assert_eq!(
        (
            entity.state.as_deref(),
            entity.events.last().map(String::as_str)
        ),
        (None, None)
    );
}

#[test]
fn a_held_notice_decided_in_its_turn_stays_queued_until_its_drop_is_written() {
    // The worker's drop is a second write: if it is lost (the worker dies
    // in between), the notice must be judged again, never sent unjudged.
    let mut entity = EntityState {
        state: Some("success".into()),
        ..EntityState::default()
    };
    let busy = PendingRecord::Open(Blocker::Inbox);
    entity
        .claim(
            &step("refunded", &["success"], false),
            &record(1),
            PendingRecord::Absent,
            1,
        )
        .unwrap();
    let failed = step("failed", &["pending"], true);
    assert_eq!(
        entity.hold(&failed, &record(2), busy, 4, 2),
        HoldVerdict::Held
    );
    entity.settle(&record(1), EntityEffect::Apply, 3);
    let refused = Err(KeptBack::Decided(
        Judgement::Refused {
            from: Some("refunded".into()),
        },
        "failed".into(),
    ));
    assert_eq!(entity.take(&record(2), 4), refused);
    // The drop never landed; another worker takes the delivery.
    assert_eq!(
        entity.take(&record(2), 5),
        refused,
        "judged again, not sent"
    );
    // The drop lands: the notice leaves the queue.
    entity.settle(&record(2), EntityEffect::Drop, 6);
    assert!(entity.held.is_empty());
}
