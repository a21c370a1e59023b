//! A real Sentinel setup for the failover tests: one primary, one replica
//! and three sentinels, each a process on 127.0.0.1 stopped by PID.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use super::data_args;
use crate::support::*;

/// One primary, one replica and three sentinels monitoring `mymaster`.
pub(super) struct SentinelSetup {
    pub(super) sentinels: Vec<(u16, Proc)>,
    pub(super) primary: Proc,
    pub(super) replica: Proc,
    pub(super) primary_port: u16,
    pub(super) replica_port: u16,
    pub(super) dir: tempfile::TempDir,
}

impl SentinelSetup {
    pub(super) fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(5);
        let (primary_port, replica_port) = (ports[0], ports[1]);
        let primary = spawn_redis(
            "primary",
            primary_port,
            &data_args(dir.path(), primary_port),
        );
        let mut args = data_args(dir.path(), replica_port);
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary_port.to_string(),
        ]);
        let replica = spawn_redis("replica", replica_port, &args);
        wait_until(Duration::from_secs(15), "replica in sync", || {
            has_online_replica(primary_port)
        });
        let sentinels = ports[2..]
            .iter()
            .map(|&port| {
                let path = dir.path().join(format!("sentinel-{port}.conf"));
                let conf = format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir \"{dir}\"\nlogfile \"{dir}/sentinel-{port}.log\"\n\
                     sentinel monitor mymaster 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds mymaster 1000\n\
                     sentinel failover-timeout mymaster 3000\n",
                    dir = dir.path().display()
                );
                std::fs::write(&path, conf).expect("sentinel config");
                let mut command = Command::new("redis-server");
                command.arg(&path).arg("--sentinel");
                let proc = Proc::spawn(&format!("sentinel {port}"), &mut command);
                wait_until(Duration::from_secs(10), "sentinel answers PING", || {
                    cli(port, &["PING"]).trim() == "PONG"
                });
                (port, proc)
            })
            .collect();
        let setup = Self {
            sentinels,
            primary,
            replica,
            primary_port,
            replica_port,
            dir,
        };
        // Hello messages every 2 s: wait until each sentinel knows the two
        // others (or no majority could authorise a failover) and the replica.
        wait_until(Duration::from_secs(20), "sentinels ready", || {
            setup.sentinels.iter().all(|(port, _)| {
                let info = sentinel_master(*port);
                info.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && info.get("num-slaves").map(String::as_str) == Some("1")
                    && info.get("flags").map(String::as_str) == Some("master")
            })
        });
        setup
    }

    pub(super) fn url(&self) -> String {
        let ports: Vec<u16> = self.sentinels.iter().map(|(p, _)| *p).collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName=mymaster&node=127.0.0.1:{}&node=127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    }

    /// The primary's port as the first sentinel reports it.
    pub(super) fn reported_primary(&self) -> Option<u16> {
        cli(
            self.sentinels[0].0,
            &["SENTINEL", "get-master-addr-by-name", "mymaster"],
        )
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
    }
}

/// `SENTINEL master mymaster` as field → value.
fn sentinel_master(port: u16) -> HashMap<String, String> {
    let out = cli(port, &["SENTINEL", "master", "mymaster"]);
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}
