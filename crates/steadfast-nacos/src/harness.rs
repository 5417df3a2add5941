//! Real rnacos processes for tests: each on free loopback ports with its
//! own data dir, started, SIGKILLed, frozen (SIGSTOP) and restarted on the
//! same ports. The binary is `$RNACOS_BIN`, else `rnacos` from `PATH`
//! (`scripts/test.sh` installs it: `cargo install rnacos --version 0.8.8
//! --locked`).

use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept gRPC connections.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// The rnacos binary.
pub fn rnacos_bin() -> String {
    std::env::var("RNACOS_BIN").unwrap_or_else(|_| "rnacos".to_string())
}

/// A free loopback HTTP port `p` whose Nacos siblings `p + 1000` (gRPC)
/// and `p + 2000` (console) are free too (bound together, then released),
/// so a `nacos://127.0.0.1:p` address reaches the server as it would a
/// stock one.
fn free_port_triple() -> io::Result<[u16; 3]> {
    for _ in 0..200 {
        let first = TcpListener::bind("127.0.0.1:0")?;
        let p = first.local_addr()?.port();
        let (Some(grpc), Some(console)) = (p.checked_add(1000), p.checked_add(2000)) else {
            continue;
        };
        let others = [grpc, console].map(|q| TcpListener::bind(("127.0.0.1", q)));
        if others.iter().all(Result::is_ok) {
            return Ok([p, grpc, console]);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free port p with p + 1000 and p + 2000 free",
    ))
}

/// One throwaway rnacos server.
#[derive(Debug)]
pub struct RnacosServer {
    http_port: u16,
    grpc_port: u16,
    console_port: u16,
    data: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl RnacosServer {
    /// Starts a server and waits until it accepts gRPC connections.
    pub async fn start() -> io::Result<Self> {
        Self::start_with_env(&[]).await
    }

    /// As [`RnacosServer::start`], with extra `RNACOS_*` variables.
    pub async fn start_with_env(env: &[(&str, &str)]) -> io::Result<Self> {
        let ports = free_port_triple()?;
        let data = std::env::temp_dir().join(format!(
            "steadfast-rnacos-{}-{}",
            std::process::id(),
            ports[0]
        ));
        std::fs::create_dir_all(&data)?;
        let mut server = Self {
            http_port: ports[0],
            grpc_port: ports[1],
            console_port: ports[2],
            data,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    async fn spawn(&mut self) -> io::Result<()> {
        let mut command = Command::new(rnacos_bin());
        command
            .env("RNACOS_HTTP_PORT", self.http_port.to_string())
            .env("RNACOS_GRPC_PORT", self.grpc_port.to_string())
            .env("RNACOS_HTTP_CONSOLE_PORT", self.console_port.to_string())
            .env("RNACOS_SDK_HOST", "127.0.0.1")
            .env("RNACOS_CONSOLE_HOST", "127.0.0.1")
            .env(
                "RNACOS_RAFT_NODE_ADDR",
                format!("127.0.0.1:{}", self.grpc_port),
            )
            .env("RNACOS_DATA_DIR", &self.data)
            // rnacos 0.8.8 otherwise pins the metadata an ip:port first
            // registered with, over later registrations, until 60 s after
            // the instance left (its "priority metadata" for console
            // edits): a provider restarting on its address with a new
            // revision would keep advertising the old one. Operators must
            // set the same (docs/registries.md).
            .env(
                "RNACOS_NAMING_INSTANCE_METADATA_PERSISTENCE_ENABLE",
                "false",
            )
            .env("RUST_LOG", "warn")
            .current_dir(&self.data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in &self.env {
            command.env(k, v);
        }
        self.child = Some(command.spawn()?);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> io::Result<()> {
        let end = Instant::now() + READY_DEADLINE;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.grpc_port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(io::Error::other(format!("rnacos exited: {status}")));
                }
            }
            if Instant::now() > end {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "rnacos did not open its gRPC port",
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `127.0.0.1:<grpc port>`, what a client connects to.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc_port)
    }

    /// `127.0.0.1:<http port>`, the address users name (`nacos://...`);
    /// gRPC is at its port + 1000, as on a stock server.
    pub fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// SIGKILLs the server (its data dir stays).
    pub async fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts the server again on the same ports and data dir.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill().await?;
        self.spawn().await
    }

    /// SIGKILLs the server, empties its data dir, starts it again.
    pub async fn wipe_and_restart(&mut self) -> io::Result<()> {
        self.kill().await?;
        let _ = std::fs::remove_dir_all(&self.data);
        std::fs::create_dir_all(&self.data)?;
        self.spawn().await
    }

    /// SIGSTOPs the server (it holds its sockets but answers nothing).
    pub fn freeze(&mut self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// SIGCONTs a frozen server.
    pub fn thaw(&mut self) -> io::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> io::Result<()> {
        let pid = self
            .child
            .as_ref()
            .map(Child::id)
            .ok_or_else(|| io::Error::other("not running"))?;
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill {sig} failed")))
        }
    }
}

impl Drop for RnacosServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
