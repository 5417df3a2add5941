//! [`TcpProxy`]: a loopback TCP forwarder for fault injection over real
//! sockets. A test can cut it (live connections closed mid-stream, new ones
//! accepted and closed at once), freeze it (live and new connections held
//! open but silent, like a black-holed network, so clients hit their
//! timeouts) and restore it, without touching the server behind it.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const FORWARD: u8 = 0;
const CUT: u8 = 1;
const FREEZE: u8 = 2;

/// A cuttable, freezable TCP forwarder to one target.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    mode: AtomicU8,
    live: AtomicUsize,
    accepted: AtomicUsize,
    /// Bumped on every mode change; connection tasks re-check the mode.
    epoch: watch::Sender<u64>,
}

impl Shared {
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
    }
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            mode: AtomicU8::new(FORWARD),
            live: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            epoch: watch::channel(0u64).0,
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Self { addr, shared, task })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far, whatever the mode.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// `http://<proxy address>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes every connection and refuses service to new ones (accepted
    /// and closed at once) until [`TcpProxy::restore`]. Returns once no
    /// connection is left (bounded: 5 s), so nothing written to the target
    /// afterwards reaches a client.
    pub async fn cut(&self) {
        self.shared.set(CUT);
        let start = Instant::now();
        while self.live_connections() > 0 && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops forwarding without closing anything: live connections and new
    /// ones stay open and silent until [`TcpProxy::restore`] or
    /// [`TcpProxy::cut`] closes them.
    pub fn freeze(&self) {
        self.shared.set(FREEZE);
    }

    /// Forwards new connections again (frozen ones are closed).
    pub fn restore(&self) {
        self.shared.set(FORWARD);
    }

    /// Connections open through the proxy now (forwarding or frozen).
    pub fn live_connections(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.set(CUT);
    }
}

/// Decrements the live count when a connection task ends (even aborted).
struct LiveGuard(Arc<Shared>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        if shared.mode.load(Ordering::SeqCst) == CUT {
            drop(inbound);
            continue;
        }
        shared.live.fetch_add(1, Ordering::SeqCst);
        let guard = LiveGuard(shared.clone());
        let epoch = shared.epoch.subscribe();
        tokio::spawn(serve(inbound, guard, epoch));
    }
}

async fn serve(mut inbound: TcpStream, guard: LiveGuard, mut epoch: watch::Receiver<u64>) {
    let shared = guard.0.clone();
    let mode = || shared.mode.load(Ordering::SeqCst);
    if mode() == FORWARD {
        let Ok(mut outbound) = TcpStream::connect(shared.target).await else {
            return;
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
            _ = epoch.changed() => {}
        }
        // Hold both sockets while frozen.
        while mode() == FREEZE {
            if epoch.changed().await.is_err() {
                return;
            }
        }
        return;
    }
    // Accepted while frozen: hold it silent until the mode changes.
    while mode() == FREEZE {
        if epoch.changed().await.is_err() {
            return;
        }
    }
    drop(guard);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = c.read(&mut buf).await {
                        if n == 0 || c.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(addr: SocketAddr) -> Option<Vec<u8>> {
        let mut c = TcpStream::connect(addr).await.ok()?;
        c.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut buf));
        match read.await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwards_freezes_restores_and_cuts() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        proxy.freeze();
        assert_eq!(roundtrip(proxy.addr()).await, None, "frozen: silent");
        proxy.restore();
        assert_eq!(roundtrip(proxy.addr()).await, Some(b"ping".to_vec()));
        proxy.cut().await;
        assert_eq!(roundtrip(proxy.addr()).await, None);
        assert_eq!(proxy.accepted(), 3);
    }
}
