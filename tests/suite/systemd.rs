//! systemd `Type=notify`: the real binary sends `READY=1` to
//! `NOTIFY_SOCKET` once the proxy accepts connections, and `STOPPING=1`
//! when SIGTERM starts the shutdown.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::support::*;

/// The next datagram on `socket` as text; panics after 20 s.
fn next_message(socket: &UnixDatagram) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buffer = [0u8; 4096];
    let n = socket.recv(&mut buffer).expect("a notification in time");
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

/// Started by hand rather than through `GateProcess`, whose start-up wait
/// picks its own ports: here the ports are fixed up front, so the proxy can
/// be checked the very moment `READY=1` arrives (and not after the harness
/// already saw it listening).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_once_listening_and_stopping_on_sigterm() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let (proxy, admin) = (free_port(), free_port());
    let text = config_text(
        &embedded_store(&dir.path().join("store.redb")),
        &upstream.url(),
        "",
    )
    .replace(
        "proxy = \"127.0.0.1:0\"",
        &format!("proxy = \"127.0.0.1:{proxy}\""),
    )
    .replace(
        "admin = \"127.0.0.1:0\"",
        &format!("admin = \"127.0.0.1:{admin}\""),
    );
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, text).unwrap();
    let mut gate = Proc::spawn(
        "idemgate",
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .env("NOTIFY_SOCKET", &socket_path),
    );

    let (message, accepts, socket) = tokio::task::spawn_blocking(move || {
        let message = next_message(&socket);
        let accepts = std::net::TcpStream::connect(("127.0.0.1", proxy)).is_ok();
        (message, accepts, socket)
    })
    .await
    .unwrap();
    assert!(message.lines().any(|l| l == "READY=1"), "{message:?}");
    assert!(
        accepts,
        "the proxy accepts connections when READY=1 arrives"
    );

    let status = gate.terminate();
    assert!(status.success(), "{status:?}");
    let message = next_message(&socket);
    assert!(message.lines().any(|l| l == "STOPPING=1"), "{message:?}");
}
