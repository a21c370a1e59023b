//! OpenTelemetry traces (`[tracing]`, docs/tracing.md), checked on the
//! real binary against a real OTLP/HTTP receiver ([`OtlpReceiver`]): a
//! delivery's server span joins the sender's trace with its child spans
//! and the semantic conventions' attributes (HTTP server, HTTP client,
//! Redis), the upstream gets the client span as its parent, the resource
//! and the export headers follow the `OTEL_*` environment, every copy of a
//! delivery links to the first attempt, failures are marked as the
//! conventions say, a dead collector costs requests nothing, and with
//! tracing off the trace headers pass through untouched.

use std::time::Duration;

use crate::support::*;

/// The OTLP span kinds (`opentelemetry.proto.trace.v1.Span.SpanKind`).
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
/// `opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_ERROR`.
const ERROR: i32 = 2;
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
        s.span.kind == SERVER && s.attribute("idemgate.outcome").as_deref() == Some(outcome)
    })
}

/// The span named `name`; panics naming what arrived otherwise.
fn named<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    spans.iter().find(|s| s.name() == name).unwrap_or_else(|| {
        let names: Vec<&str> = spans.iter().map(Received::name).collect();
        panic!("no span {name:?} in {names:?}")
    })
}

/// Whether `span` ended with the error status.
fn is_error(span: &Received) -> bool {
    span.span.status.as_ref().is_some_and(|s| s.code == ERROR)
}

fn assert_attributes(span: &Received, expected: &[(&str, &str)]) {
    for (key, value) in expected {
        assert_eq!(
            span.attribute(key).as_deref(),
            Some(*value),
            "{key} of {}",
            span.name()
        );
    }
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
    let mut gate = GateProcess::launch(
        &text,
        &[
            ("IDEMGATE_LOG_FORMAT", "json"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-env,service.instance.id=pod-7,deployment.environment.name=staging",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-collector-token=otlp-token-1",
            ),
        ],
        Some(&log),
    );

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let sender_span = "00f067aa0ba902b7";
    let body = payment("p-trace-1");
    let headers = with_traceparent(
        &body,
        &format!("00-{trace_id}-{sender_span}-01"),
        "vendor=kept",
    );
    // The query is the sender's (here a token): never in a span.
    let url = gate.url("/notify?token=sender-secret");
    let answer = send("POST", &url, &headers, body).await;
    assert_eq!(answer.status, 200);

    let spans = receiver
        .wait_for(ARRIVAL, "server span with its children", |spans| {
            [
                "POST /notify",
                "verify",
                "claim",
                "POST",
                "settle",
                "EVALSHA claim",
                "EVALSHA complete",
            ]
            .iter()
            .all(|name| spans.iter().any(|s| s.name() == *name))
        })
        .await;
    let delivery = named(&spans, "POST /notify");
    assert_eq!(delivery.trace_id(), trace_id, "the sender's trace");
    assert_eq!(
        delivery.parent_span_id(),
        sender_span,
        "the sender's span is its parent"
    );
    assert_eq!(delivery.span.kind, SERVER);
    assert_eq!(
        delivery.service, "gate-under-test",
        "the file beats the env"
    );
    let gate_port = gate.addr.port().to_string();
    assert_attributes(
        delivery,
        &[
            ("http.route", "/notify"),
            ("http.request.method", "POST"),
            ("url.path", "/notify"),
            ("url.scheme", "http"),
            ("server.address", "127.0.0.1"),
            ("server.port", &gate_port),
            ("client.address", "127.0.0.1"),
            ("idemgate.route", "pay"),
            ("idemgate.outcome", "forwarded"),
            ("http.response.status_code", "200"),
            ("idemgate.upstream_status", "200"),
            ("idemgate.secret_index", "0"),
            ("idemgate.delivery_count", "1"),
        ],
    );
    let client_port: u16 = delivery.attribute("client.port").unwrap().parse().unwrap();
    assert_ne!(client_port, 0);
    assert!(delivery.attribute("error.type").is_none() && !is_error(delivery));
    for (key, value) in [
        ("service.name", "gate-under-test"),
        ("service.instance.id", "pod-7"),
        ("deployment.environment.name", "staging"),
        ("service.version", env!("CARGO_PKG_VERSION")),
    ] {
        assert_eq!(
            delivery.resource_attribute(key).as_deref(),
            Some(value),
            "resource {key}"
        );
    }
    let exports = receiver.export_headers();
    assert!(!exports.is_empty());
    for headers in &exports {
        assert_eq!(
            headers.get("x-collector-token").map(|v| v.as_bytes()),
            Some(&b"otlp-token-1"[..]),
            "OTEL_EXPORTER_OTLP_HEADERS go with every export"
        );
    }
    assert!(
        spans
            .iter()
            .all(|s| !format!("{:?}", s.span.attributes).contains("sender-secret")),
        "no span carries the sender's query"
    );
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
    for name in ["verify", "claim", "POST", "settle"] {
        let child = named(&spans, name);
        assert_eq!(child.trace_id(), trace_id, "{name} is in the trace");
        assert_eq!(
            child.parent_span_id(),
            delivery.span_id(),
            "{name} is a child of the server span"
        );
    }
    let forward = named(&spans, "POST");
    assert_eq!(forward.span.kind, CLIENT);
    let upstream_port = upstream.addr.port().to_string();
    let full = format!("http://127.0.0.1:{upstream_port}/notify");
    assert_attributes(
        forward,
        &[
            ("http.request.method", "POST"),
            ("server.address", "127.0.0.1"),
            ("server.port", &upstream_port),
            ("url.full", &full),
            ("http.response.status_code", "200"),
            ("idemgate.upstream_status", "200"),
        ],
    );
    assert!(forward.attribute("error.type").is_none() && !is_error(forward));

    let redis_port = redis.port.to_string();
    for (script, parent) in [("claim", "claim"), ("complete", "settle")] {
        let call = named(&spans, &format!("EVALSHA {script}"));
        assert_eq!(call.span.kind, CLIENT, "{script}");
        assert_eq!(call.trace_id(), trace_id);
        assert_eq!(
            call.parent_span_id(),
            named(&spans, parent).span_id(),
            "EVALSHA {script} is a child of {parent}"
        );
        assert_attributes(
            call,
            &[
                ("db.system.name", "redis"),
                ("db.operation.name", "EVALSHA"),
                ("db.stored_procedure.name", script),
                ("server.address", "127.0.0.1"),
                ("server.port", &redis_port),
            ],
        );
    }

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
    // No `service_name` in the file: the environment names the service.
    let envs = [
        ("OTEL_SERVICE_NAME", "svc-from-env"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=loses-to-otel-service-name",
        ),
    ];
    let mut gate = GateProcess::launch(&text, &envs, None);
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
    assert_eq!(first.service, "svc-from-env");
    let instance = first.resource_attribute("service.instance.id").unwrap();
    assert_eq!(instance.len(), 36, "a UUID: {instance}");
    assert_eq!(&instance[14..15], "4", "version 4: {instance}");

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
    assert!(
        !is_error(refused) && refused.attribute("error.type").is_none(),
        "a 4xx is the sender's, not a server error"
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
async fn failed_upstream_calls_are_errors_by_the_conventions() {
    let receiver = OtlpReceiver::start().await;
    let redis = RedisServer::start();
    let tracing = format!("otlp_endpoint = \"{}\"", receiver.url());

    // The handler answers 503: the client span has `error.type = "503"`,
    // and so has the server span, since the sender is answered 503 too.
    let failing = Upstream::scripted(|_, _| Reply::status(503)).await;
    let mut gate = GateProcess::start(&traced_config(&redis, &failing, &tracing));
    let answer = deliver(&gate.url("/notify"), &payment("p-trace-503")).await;
    assert_eq!(answer.status, 503);
    let spans = receiver
        .wait_for(ARRIVAL, "the 503's spans", |s| {
            s.iter().any(|s| s.name() == "POST") && s.iter().any(|s| s.span.kind == SERVER)
        })
        .await;
    let forward = named(&spans, "POST");
    assert_eq!(
        forward.attribute("http.response.status_code").as_deref(),
        Some("503")
    );
    assert_eq!(forward.attribute("error.type").as_deref(), Some("503"));
    assert!(is_error(forward), "a 5xx marks a client span an error");
    let server = named(&spans, "POST /notify");
    assert_eq!(
        server.attribute("http.response.status_code").as_deref(),
        Some("503")
    );
    assert_eq!(server.attribute("error.type").as_deref(), Some("503"));
    assert!(is_error(server), "a 5xx marks a server span an error");
    assert!(gate.terminate().success());

    // Nothing listens where the handler should be: no answer, so the
    // client span's `error.type` is the class of failure.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let text = format!(
        "{}\n[tracing]\n{tracing}\n",
        config_text(&redis_store(&redis), &dead, "")
    );
    let mut gate = GateProcess::start(&text);
    let answer = deliver(&gate.url("/notify"), &payment("p-trace-dead")).await;
    assert_eq!(answer.status, 502);
    let spans = receiver
        .wait_for(ARRIVAL, "the refused call's span", |s| {
            s.iter()
                .any(|s| s.attribute("error.type").as_deref() == Some("connect"))
        })
        .await;
    let refused = spans
        .iter()
        .find(|s| s.attribute("error.type").as_deref() == Some("connect"))
        .unwrap();
    assert_eq!((refused.name(), refused.span.kind), ("POST", CLIENT));
    assert!(refused.attribute("http.response.status_code").is_none());
    assert!(is_error(refused));
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
