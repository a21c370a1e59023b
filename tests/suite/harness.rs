//! The harness's own promise behind every spawned server: a port counts as
//! ready only for the process that listens on it, not for whoever answers
//! there (another test's server may have taken a port between choosing it
//! and the child binding it).

use std::process::Command;

use crate::support::*;

#[test]
fn a_port_is_ready_only_for_the_process_that_listens_on_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    assert!(listens(std::process::id(), port), "this process listens");
    let sleeper = Proc::spawn("sleep", Command::new("sleep").arg("30"));
    assert!(
        !listens(sleeper.pid(), port),
        "a child that does not listen"
    );
    drop(listener);
    assert!(!listens(std::process::id(), port), "closed");
}

#[test]
fn free_ports_are_never_handed_out_twice() {
    let ports: std::collections::BTreeSet<u16> = (0..200).map(|_| free_port()).collect();
    assert_eq!(ports.len(), 200);
}
