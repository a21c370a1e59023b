//! What a failover test does to its deployment: a Redis Cluster's or a
//! Sentinel setup's primary killed, its replica frozen and thawed, the old
//! primary started again as a replica.

use super::*;

/// What a failover test does to its Redis deployment.
pub(super) trait Failover {
    /// SIGKILL the primary (of the slots under test).
    fn kill_primary(&mut self);
    /// Freeze (`true`, SIGSTOP) or thaw (SIGCONT) the replica that will be
    /// promoted: while frozen it receives nothing, so the primary's
    /// writes since pile up as replication lag.
    fn freeze_replica(&mut self, frozen: bool);
    /// The replica has been promoted and the deployment routes to it.
    fn promoted(&self) -> bool;
    /// Port of the replica that is promoted.
    fn promoted_port(&self) -> u16;
    /// Start the dead primary again, as a replica of the promoted one, as
    /// a supervisor would.
    fn restart_old_primary(&mut self);
    /// The promoted primary has an in-sync replica again.
    fn replica_back(&self) -> bool;
}

pub(super) struct ClusterFailover<'a> {
    pub(super) cluster: &'a mut Cluster,
    pub(super) victim: NodeInfo,
    pub(super) replica: u16,
    pub(super) survivor: u16,
}

impl<'a> ClusterFailover<'a> {
    /// The failover of `cluster`'s second primary (by first slot) to its
    /// replica, the first primary surviving.
    pub(super) fn of_second_primary(cluster: &'a mut Cluster) -> Self {
        let primaries = cluster.primaries();
        let victim = primaries[1].clone();
        Self {
            replica: Cluster::replica_of(&victim),
            survivor: primaries[0].port,
            victim,
            cluster,
        }
    }
}

impl Failover for ClusterFailover<'_> {
    fn kill_primary(&mut self) {
        self.cluster.kill(self.victim.port);
    }

    fn freeze_replica(&mut self, frozen: bool) {
        let signal = if frozen { "-STOP" } else { "-CONT" };
        self.cluster.signal(self.replica, signal);
    }

    fn promoted(&self) -> bool {
        role(self.replica) == "master"
            && cli(self.survivor, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    }

    fn promoted_port(&self) -> u16 {
        self.replica
    }

    fn restart_old_primary(&mut self) {
        // With its nodes.conf the node rejoins, learns that its slots have
        // a newer owner and turns itself into that owner's replica.
        self.cluster.restart(self.victim.port);
    }

    fn replica_back(&self) -> bool {
        has_online_replica(self.replica)
    }
}

pub(super) struct SentinelFailover<'a> {
    pub(super) setup: &'a mut SentinelSetup,
}

impl Failover for SentinelFailover<'_> {
    fn kill_primary(&mut self) {
        self.setup.primary.kill();
    }

    fn freeze_replica(&mut self, frozen: bool) {
        let signal = if frozen { "-STOP" } else { "-CONT" };
        send_signal(self.setup.replica.pid(), signal);
    }

    fn promoted(&self) -> bool {
        self.setup.reported_primary() == Some(self.setup.replica_port)
            && role(self.setup.replica_port) == "master"
    }

    fn promoted_port(&self) -> u16 {
        self.setup.replica_port
    }

    fn restart_old_primary(&mut self) {
        let dir = self.setup.dir.path().to_owned();
        let mut args = data_args(&dir, self.setup.primary_port);
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            self.setup.replica_port.to_string(),
        ]);
        self.setup.primary = spawn_redis("old primary", self.setup.primary_port, &args);
    }

    fn replica_back(&self) -> bool {
        has_online_replica(self.setup.replica_port)
    }
}
