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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_once_listening_and_stopping_on_sigterm() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    // Fixed ports, so the listener can be checked the moment READY arrives.
    let (proxy, admin) = (free_port(), free_port());
    let text = config_text(
        &embedded_store(&dir.path().join("store.redb")),
        &upstream.url(),
        "",
    )
    .replace(
        "127.0.0.1:0\"\nadmin",
        &format!("127.0.0.1:{proxy}\"\nadmin"),
    )
    .replace(
        "admin = \"127.0.0.1:0\"",
        &format!("admin = \"127.0.0.1:{admin}\""),
    );
    assert!(text.contains(&format!(":{proxy}\"")), "{text}");

    let ready = std::thread::spawn(move || {
        let message = next_message(&socket);
        let accepts = std::net::TcpStream::connect(("127.0.0.1", proxy)).is_ok();
        (message, accepts, socket)
    });
    let notify_socket = socket_path.display().to_string();
    let mut gate = GateProcess::launch(&text, &[("NOTIFY_SOCKET", notify_socket.as_str())], None);
    let (message, accepts, socket) = ready.join().unwrap();
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
