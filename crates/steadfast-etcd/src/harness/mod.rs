//! Test harness (feature `harness`): real etcd processes on free loopback
//! ports, in temp dirs, that tests can stop (SIGTERM), kill (SIGKILL),
//! freeze (SIGSTOP) and thaw (SIGCONT), restart on the same data and
//! ports, or restart on a wiped data dir; a
//! 3-member cluster whose leader can be found and killed; a TCP proxy whose
//! connections can be cut; and [`unique_prefix`] for per-test key prefixes.
//!
//! Needs the `etcd` binary (Debian: `apt-get install etcd-server`), or
//! `$ETCD_BIN`. Every process is killed and every temp dir removed on drop.

mod member;
pub mod metrics;
pub mod secure;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::wire::StatusResponse;
pub use member::free_ports;
use member::{Member, Spec};
/// The loopback proxy lives in the test kit; re-exported for etcd tests.
pub use steadfast_testkit::TcpProxy;

/// Start attempts when etcd dies before healthy (e.g. a port was taken
/// between picking and binding it).
const START_ATTEMPTS: usize = 3;

/// A string unique to this process and call.
fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{tag}-{}-{n}-{nanos}", std::process::id())
}

/// A key prefix no other test uses, e.g. `/t/1234-5-678`.
pub fn unique_prefix() -> String {
    format!("/t/{}", unique("p"))
}

fn temp_root(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("steadfast-{}", unique(tag)))
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// A single-member etcd on free loopback ports.
#[derive(Debug)]
pub struct EtcdServer {
    member: Member,
}

impl EtcdServer {
    /// Starts etcd and waits until `/health` says true.
    pub async fn start() -> io::Result<Self> {
        Self::start_with_args(&[]).await
    }

    /// Starts etcd with extra flags (e.g.
    /// `--experimental-watch-progress-notify-interval=1s`).
    pub async fn start_with_args(args: &[&str]) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(2)?;
            let name = "s0".to_string();
            let spec = Spec {
                initial_cluster: format!("{name}=http://127.0.0.1:{}", ports[1]),
                name,
                client_port: ports[0],
                peer_port: ports[1],
                token: unique("tok"),
                extra_args: owned(args),
                client_scheme: "http",
                health_url: None,
            };
            let mut m = Member::new(spec, temp_root("etcd"))?;
            m.spawn()?;
            match m.wait_healthy().await {
                Ok(()) => return Ok(Self { member: m }),
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    /// The client URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    /// The client address.
    pub fn client_addr(&self) -> SocketAddr {
        self.member.client_addr()
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.member.pid()
    }

    /// The current data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.member.data_dir()
    }

    /// SIGTERM, then waits for the exit.
    pub async fn stop(&mut self) -> io::Result<()> {
        self.member.stop().await
    }

    /// SIGKILL, then reaps the process.
    pub async fn kill(&mut self) -> io::Result<()> {
        self.member.kill().await
    }

    /// SIGSTOP: etcd stays, connections are accepted, nothing is answered
    /// (and lease clocks stop: leases past their TTL expire on the thaw).
    pub fn freeze(&mut self) -> io::Result<()> {
        self.member.freeze()
    }

    /// SIGCONT after [`EtcdServer::freeze`].
    pub fn thaw(&mut self) -> io::Result<()> {
        self.member.thaw()
    }

    /// Starts again on the same data dir and ports (stopping it first if it
    /// runs) and waits until healthy.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.member.stop().await?;
        self.member.spawn()?;
        self.member.wait_healthy().await
    }

    /// Starts again on a new, empty data dir with the same ports (stopping
    /// it first if it runs) and waits until healthy.
    pub async fn wipe_and_restart(&mut self) -> io::Result<()> {
        self.member.stop().await?;
        self.member.wipe()?;
        self.member.spawn()?;
        self.member.wait_healthy().await
    }
}

/// A multi-member etcd cluster on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    root: PathBuf,
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.members.clear(); // kills each member and removes its dir
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl EtcdCluster {
    /// Starts `n` members that form one cluster and waits until each is
    /// healthy (which needs a leader).
    pub async fn start(n: usize) -> io::Result<Self> {
        Self::start_with_args(n, &[]).await
    }

    /// Like [`EtcdCluster::start`], with extra flags for every member.
    pub async fn start_with_args(n: usize, args: &[&str]) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(2 * n)?;
            let token = unique("tok");
            let initial_cluster = (0..n)
                .map(|i| format!("m{i}=http://127.0.0.1:{}", ports[2 * i + 1]))
                .collect::<Vec<_>>()
                .join(",");
            let root = temp_root("cluster");
            let mut members = Vec::with_capacity(n);
            for i in 0..n {
                let spec = Spec {
                    name: format!("m{i}"),
                    client_port: ports[2 * i],
                    peer_port: ports[2 * i + 1],
                    initial_cluster: initial_cluster.clone(),
                    token: token.clone(),
                    extra_args: owned(args),
                    client_scheme: "http",
                    health_url: None,
                };
                let mut m = Member::new(spec, root.join(format!("m{i}")))?;
                m.spawn()?;
                members.push(m);
            }
            let mut failed = None;
            for m in &mut members {
                if let Err(e) = m.wait_healthy().await {
                    failed = Some(e);
                    break;
                }
            }
            match failed {
                None => return Ok(Self { members, root }),
                Some(e) => {
                    drop(members);
                    let _ = std::fs::remove_dir_all(&root);
                    if e.kind() != io::ErrorKind::BrokenPipe {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("etcd cluster did not start")))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Client URLs of every member, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    /// Index of the current leader, asking each member's
    /// `/v3/maintenance/status` until one says it leads (at most ~15 s).
    pub async fn leader_index(&self) -> io::Result<usize> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .map_err(io::Error::other)?;
        let start = Instant::now();
        loop {
            for (i, m) in self.members.iter().enumerate() {
                let url = format!("{}/v3/maintenance/status", m.endpoint());
                let Ok(resp) = http.post(url).json(&json!({})).send().await else {
                    continue;
                };
                if let Ok(s) = resp.json::<StatusResponse>().await {
                    if s.leader != 0 && s.leader == s.header.member_id {
                        return Ok(i);
                    }
                }
            }
            if start.elapsed() > Duration::from_secs(15) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no etcd leader"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILLs member `i`.
    pub async fn kill(&mut self, i: usize) -> io::Result<()> {
        self.members[i].kill().await
    }

    /// SIGTERMs member `i`.
    pub async fn stop(&mut self, i: usize) -> io::Result<()> {
        self.members[i].stop().await
    }

    /// SIGSTOPs member `i`.
    pub fn freeze(&mut self, i: usize) -> io::Result<()> {
        self.members[i].freeze()
    }

    /// SIGCONTs member `i`.
    pub fn thaw(&mut self, i: usize) -> io::Result<()> {
        self.members[i].thaw()
    }

    /// Restarts member `i` on its data dir and waits until healthy.
    pub async fn restart(&mut self, i: usize) -> io::Result<()> {
        let m = &mut self.members[i];
        m.stop().await?;
        m.spawn()?;
        m.wait_healthy().await
    }
}
