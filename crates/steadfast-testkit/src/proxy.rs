//! A loopback TCP proxy for fault injection over real sockets. In
//! `Forward` mode it pipes bytes to the target; in `Blackhole` mode it
//! accepts connections and never answers (so a client hits its timeout);
//! in `Refuse` mode it closes them at once. The mode applies to
//! connections accepted after it is set; `heal()` also resets the held ones.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the proxy does with new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Pipe bytes both ways to the target.
    Forward,
    /// Accept and hold the connection without reading or answering.
    Blackhole,
    /// Close the connection at once.
    Refuse,
}

struct Shared {
    mode: Mutex<ProxyMode>,
    accepted: AtomicUsize,
    held: Mutex<Vec<TcpStream>>,
}

/// A running proxy on 127.0.0.1; stops when dropped.
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy on a free loopback port forwarding to `target`.
    pub async fn start(target: SocketAddr, mode: ProxyMode) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            mode: Mutex::new(mode),
            accepted: AtomicUsize::new(0),
            held: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                s.accepted.fetch_add(1, Ordering::SeqCst);
                let mode = *s.mode.lock().unwrap_or_else(|e| e.into_inner());
                match mode {
                    ProxyMode::Forward => {
                        tokio::spawn(pipe(conn, target));
                    }
                    ProxyMode::Blackhole => {
                        s.held.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
                    }
                    ProxyMode::Refuse => drop(conn),
                }
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the mode for connections accepted from now on.
    pub fn set_mode(&self, mode: ProxyMode) {
        *self.shared.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Back to forwarding; connections held by a blackhole are closed.
    pub fn heal(&self) {
        self.set_mode(ProxyMode::Forward);
        self.shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(mut conn: TcpStream, target: SocketAddr) {
    if let Ok(mut upstream) = TcpStream::connect(target).await {
        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
    }
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
        let read = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            c.read_exact(&mut buf),
        );
        match read.await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwards_blackholes_and_heals() {
        let proxy = TcpProxy::start(echo_server().await, ProxyMode::Blackhole)
            .await
            .unwrap();
        assert_eq!(roundtrip(proxy.addr()).await, None, "blackholed");
        proxy.heal();
        assert_eq!(roundtrip(proxy.addr()).await, Some(b"ping".to_vec()));
        proxy.set_mode(ProxyMode::Refuse);
        assert_eq!(roundtrip(proxy.addr()).await, None);
        assert_eq!(proxy.accepted(), 3);
    }
}
