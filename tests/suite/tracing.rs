//! OpenTelemetry traces (`[tracing]`, docs/operations.md "Tracing"), checked on the
//! real binary against a real OTLP/HTTP receiver ([`OtlpReceiver`]): a
//! delivery's span joins the sender's trace with its child spans and
//! attributes, the upstream gets the `forward` span as its parent, every
//! copy of a delivery links to the first attempt, a dead collector costs
//! requests nothing, and with tracing off the trace headers pass through
//! untouched.

use std::time::Duration;

use crate::support::*;

/// The OTLP span kinds (`opentelemetry.proto.trace.v1.Span.SpanKind`).
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
/// How long spans may take to arrive (the export batches for 200 ms).
const ARRIVAL: Duration = Duration::from_secs(15);

fn traced_config(redis: &RedisServer, upstream: &Upstream, tracing: &str) -> String {
    let text = config_text(&redis_store(redis), &upstream.url(), "");
    format!("{text}\n[tracing]\n{tracing}\n")
}

fn with_traceparent(body: &str, traceparent: &str, tracestate: &str) -> Headers {
    let mut headers = signed(body);
    headers.push(("traceparent".into(), traceparent.into()));
    headers.push(("tracestate".into(), tracestate.into()));
    headers
}

fn delivery_with_outcome<'a>(spans: &'a [Received], outcome: &str) -> Option<&'a Received> {
    spans.iter().find(|s| {
        s.name() == "delivery" && s.attribute("idemgate.outcome").as_deref() == Some(outcome)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_delivery_joins_the_senders_trace_and_parents_the_handler() {
    let receiver = OtlpReceiver::start().await;
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let text = traced_config(
        &redis,
        &upstream,
        &format!(
            "otlp_endpoint = \"{}\"\nservice_name = \"gate-under-test\"",
            receiver.url()
        ),
    );
    let mut gate = GateProcess::launch(&text, &[("IDEMGATE_LOG_FORMAT", "json")], Some(&log));

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let sender_span = "00f067aa0ba902b7";
    let body = payment("p-trace-1");
    let headers = with_traceparent(
        &body,
        &format!("00-{trace_id}-{sender_span}-01"),
        "vendor=kept",
    );
    let answer = send("POST", &gate.url("/notify"), &headers, body).await;
    assert_eq!(answer.status, 200);

    let spans = receiver
        .wait_for(ARRIVAL, "delivery span with its four children", |spans| {
            ["delivery", "verify", "claim", "forward", "settle"]
                .iter()
                .all(|name| spans.iter().any(|s| s.name() == *name))
        })
        .await;
    let delivery = spans.iter().find(|s| s.name() == "delivery").unwrap();
    assert_eq!(delivery.trace_id(), trace_id, "the sender's trace");
    assert_eq!(
        delivery.parent_span_id(),
        sender_span,
        "the sender's span is its parent"
    );
    assert_eq!(delivery.span.kind, SERVER);
    assert_eq!(delivery.service, "gate-under-test");
    for (key, value) in [
        ("idemgate.route", "pay"),
        ("idemgate.outcome", "forwarded"),
        ("http.response.status_code", "200"),
        ("idemgate.upstream_status", "200"),
        ("idemgate.secret_index", "0"),
        ("idemgate.delivery_count", "1"),
    ] {
        assert_eq!(delivery.attribute(key).as_deref(), Some(value), "{key}");
    }
    assert!(
        delivery
            .attribute("idemgate.key_hash")
            .is_some_and(|k| !k.is_empty())
    );
    assert!(delivery.attribute("idemgate.reason").is_none());
    assert!(
        delivery.span.links.is_empty(),
        "a first delivery links to nothing"
    );
    for name in ["verify", "claim", "forward", "settle"] {
        let child = spans.iter().find(|s| s.name() == name).unwrap();
        assert_eq!(child.trace_id(), trace_id, "{name} is in the trace");
        assert_eq!(
            child.parent_span_id(),
            delivery.span_id(),
            "{name} is a child of delivery"
        );
    }
    let forward = spans.iter().find(|s| s.name() == "forward").unwrap();
    assert_eq!(forward.span.kind, CLIENT);

    let seen = upstream.headers();
    assert_eq!(seen.len(), 1);
    let traceparent = seen[0]["traceparent"].to_str().unwrap();
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{}-01", forward.span_id()),
        "the handler's parent is the forward span"
    );
    assert_eq!(seen[0]["tracestate"], "vendor=kept");

    assert!(gate.terminate().success());
    let output = std::fs::read_to_string(&log).unwrap();
    let line = output
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["message"] == "request")
        .expect("a request line");
    assert_eq!(line["trace_id"], trace_id, "the log line names the trace");
    assert!(
        !output.contains("delivery{") && !output.contains("\"spans\""),
        "spans stay out of the log lines:\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_of_a_delivery_links_to_the_first_attempt() {
    let receiver = OtlpReceiver::start().await;
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = traced_config(
        &redis,
        &upstream,
        &format!("otlp_endpoint = \"{}\"", receiver.url()),
    );
    let mut gate = GateProcess::start(&text);
    let url = gate.url("/notify");

    // The first delivery comes without a traceparent: a new trace.
    let body = payment("p-trace-2");
    assert_eq!(deliver(&url, &body).await.status, 200);
    let spans = receiver
        .wait_for(ARRIVAL, "the first delivery", |s| {
            delivery_with_outcome(s, "forwarded").is_some()
        })
        .await;
    let first = delivery_with_outcome(&spans, "forwarded").unwrap().clone();

    // The retry comes in a trace of its own.
    let retry_trace = "0af7651916cd43dd8448eb211c80319c";
    let headers = with_traceparent(&body, &format!("00-{retry_trace}-b7ad6b7169203331-01"), "");
    let replay = send("POST", &url, &headers, body.clone()).await;
    assert_eq!(replay.replayed(), Some("true"));
    let other = body.replace("10.00", "11.00");
    assert_ne!(other, body);
    assert_eq!(deliver(&url, &other).await.status, 422);

    let spans = receiver
        .wait_for(ARRIVAL, "the replay and the 422", |s| {
            delivery_with_outcome(s, "replayed").is_some()
                && delivery_with_outcome(s, "rejected").is_some()
        })
        .await;
    let replayed = delivery_with_outcome(&spans, "replayed").unwrap();
    let refused = delivery_with_outcome(&spans, "rejected").unwrap();
    assert_eq!(
        replayed.trace_id(),
        retry_trace,
        "the replay stays in its own trace"
    );
    assert_eq!(
        refused.attribute("idemgate.reason").as_deref(),
        Some("fingerprint_mismatch")
    );
    assert_eq!(
        refused.attribute("http.response.status_code").as_deref(),
        Some("422")
    );
    for (copy, count) in [(replayed, "2"), (refused, "3")] {
        let links: Vec<(String, String)> = copy
            .span
            .links
            .iter()
            .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
            .collect();
        assert_eq!(
            links,
            [(first.trace_id(), first.span_id())],
            "{} links to the first attempt",
            copy.attribute("idemgate.outcome").unwrap()
        );
        assert_eq!(
            copy.attribute("idemgate.first_trace_id"),
            Some(first.trace_id())
        );
        assert_eq!(
            copy.attribute("idemgate.delivery_count").as_deref(),
            Some(count)
        );
        assert_eq!(
            copy.attribute("idemgate.key_hash"),
            first.attribute("idemgate.key_hash")
        );
    }
    assert_eq!(upstream.calls(), 1);
    assert!(gate.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_neither_fails_nor_slows_requests() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    // Nothing listens there: every export is refused.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let text = traced_config(
        &redis,
        &upstream,
        &format!("otlp_endpoint = \"{dead}\"\nqueue_size = 2"),
    );
    let mut gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let sender = Sender::new();
    let started = tokio::time::Instant::now();
    for n in 0..30 {
        let one = tokio::time::Instant::now();
        let answer = sender
            .deliver(&url, &payment(&format!("p-dead-{n}")))
            .await
            .expect("answered");
        assert_eq!(answer.status, 200, "delivery {n}");
        assert!(
            one.elapsed() < Duration::from_secs(3),
            "delivery {n} took {:?}",
            one.elapsed()
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "30 deliveries took {:?}",
        started.elapsed()
    );
    assert_eq!(upstream.calls(), 30);
    let admin = gate.admin;
    let dropped = poll(
        "idemgate_trace_spans_dropped_total above 0",
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            let total: f64 = scrape(admin)
                .await
                .series("idemgate_trace_spans_dropped_total")
                .iter()
                .map(|s| s.value)
                .sum();
            (total >= 1.0).then_some(total)
        },
    )
    .await;
    assert!(dropped >= 1.0, "dropped spans are counted");
    assert!(
        gate.terminate().success(),
        "shutdown is not held up by the dead collector"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tracing_off_trace_headers_pass_through_untouched() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let mut gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = payment("p-untraced-1");
    let headers = with_traceparent(&body, traceparent, "vendor=kept");
    assert_eq!(send("POST", &url, &headers, body).await.status, 200);
    assert_eq!(deliver(&url, &payment("p-untraced-2")).await.status, 200);
    let seen = upstream.headers();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["traceparent"], traceparent, "not replaced");
    assert_eq!(seen[0]["tracestate"], "vendor=kept");
    assert!(
        seen[1].get("traceparent").is_none() && seen[1].get("tracestate").is_none(),
        "none added"
    );
    assert!(gate.terminate().success());
}
