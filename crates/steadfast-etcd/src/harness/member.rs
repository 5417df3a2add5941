//! One etcd process: its ports, data dir and lifecycle (spawn, wait healthy,
//! SIGTERM, SIGKILL, restart, wipe). Shared by [`super::EtcdServer`] and
//! [`super::EtcdCluster`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// How long a member may take to report healthy.
const HEALTH_DEADLINE: Duration = Duration::from_secs(15);
/// How long a SIGTERMed member may take to exit before it is SIGKILLed.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// The etcd binary: `$ETCD_BIN`, else `etcd` from `PATH`.
pub(crate) fn etcd_bin() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_string())
}

/// `n` distinct free loopback ports (bound together, then released).
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// Static description of one member.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub initial_cluster: String,
    pub token: String,
    pub extra_args: Vec<String>,
    /// `http` or `https` (then `extra_args` carries the certificate flags).
    pub client_scheme: &'static str,
    /// Where `/health` is polled when not on the client URL (a plain
    /// `--listen-metrics-urls` next to a TLS client URL).
    pub health_url: Option<String>,
}

impl Spec {
    pub fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// A running (or stopped) etcd member.
#[derive(Debug)]
pub(crate) struct Member {
    pub spec: Spec,
    root: PathBuf,
    generation: u32,
    child: Option<Child>,
}

impl Member {
    /// A member rooted in `root` (created; removed on drop). Not started.
    pub fn new(spec: Spec, root: PathBuf) -> io::Result<Self> {
        fs::create_dir_all(&root)?;
        Ok(Self {
            spec,
            root,
            generation: 0,
            child: None,
        })
    }

    pub fn endpoint(&self) -> String {
        format!(
            "{}://127.0.0.1:{}",
            self.spec.client_scheme, self.spec.client_port
        )
    }

    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.spec.client_port))
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join(format!("data-{}", self.generation))
    }

    fn log_path(&self) -> PathBuf {
        self.root.join("etcd.log")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// Spawns etcd (must not be running).
    pub fn spawn(&mut self) -> io::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let s = &self.spec;
        let client = self.endpoint();
        let child = Command::new(etcd_bin())
            .arg("--name")
            .arg(&s.name)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args(["--listen-peer-urls", &s.peer_url()])
            .args(["--initial-advertise-peer-urls", &s.peer_url()])
            .args(["--initial-cluster", &s.initial_cluster])
            .args(["--initial-cluster-token", &s.token])
            .args(["--initial-cluster-state", "new"])
            .args(["--logger=zap", "--log-outputs=stderr", "--log-level=warn"])
            .args(&s.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", etcd_bin())))?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls `/health` (1 s per poll) until it says true, the process exits,
    /// or the deadline passes.
    pub async fn wait_healthy(&mut self) -> io::Result<()> {
        #[derive(Deserialize)]
        struct Health {
            #[serde(default)]
            health: String,
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(1))
            .build()
            .map_err(io::Error::other)?;
        let url = match &self.spec.health_url {
            Some(u) => u.clone(),
            None => format!("{}/health", self.endpoint()),
        };
        let start = Instant::now();
        loop {
            if !self.is_running() {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!(
                        "etcd {} exited before healthy:\n{}",
                        self.spec.name,
                        self.log_tail()
                    ),
                ));
            }
            if let Ok(resp) = http.get(&url).send().await {
                if let Ok(h) = resp.json::<Health>().await {
                    if h.health == "true" {
                        return Ok(());
                    }
                }
            }
            if start.elapsed() > HEALTH_DEADLINE {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "etcd {} not healthy after {HEALTH_DEADLINE:?}:\n{}",
                        self.spec.name,
                        self.log_tail()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (`TERM`, `STOP`, `CONT`) to the running process.
    fn signal(&mut self, signal: &str) -> io::Result<bool> {
        let Some(pid) = self.pid().filter(|_| self.is_running()) else {
            return Ok(false);
        };
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "kill -{signal} {pid} failed: {status}"
            )));
        }
        Ok(true)
    }

    /// SIGSTOP: the process stays, its sockets accept, nothing answers.
    pub fn freeze(&mut self) -> io::Result<()> {
        self.signal("STOP").map(|_| ())
    }

    /// SIGCONT after [`Member::freeze`].
    pub fn thaw(&mut self) -> io::Result<()> {
        self.signal("CONT").map(|_| ())
    }

    /// Sends SIGTERM and waits for the exit (SIGKILL after a deadline).
    pub async fn stop(&mut self) -> io::Result<()> {
        // A frozen process cannot handle SIGTERM: thaw it first.
        if !self.signal("CONT")? {
            return Ok(());
        }
        self.signal("TERM")?;
        let start = Instant::now();
        while self.is_running() {
            if start.elapsed() > STOP_DEADLINE {
                return self.kill().await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Sends SIGKILL and reaps the process.
    pub async fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            if child.try_wait()?.is_none() {
                child.kill()?;
            }
            while child.try_wait()?.is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }

    /// Moves to a new, empty data dir (the old one is deleted). Must not be
    /// running.
    pub fn wipe(&mut self) -> io::Result<()> {
        let old = self.data_dir();
        self.generation += 1;
        remove_if_exists(&old)
    }

    fn log_tail(&self) -> String {
        let mut buf = Vec::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(4000)));
            let _ = f.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

fn remove_if_exists(p: &Path) -> io::Result<()> {
    match fs::remove_dir_all(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = remove_if_exists(&self.root);
    }
}
