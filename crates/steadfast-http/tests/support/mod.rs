//! Shared fixtures of the loopback tests: metadata and instances to serve,
//! and a raw TCP "bad server" that answers with scripted bytes (or never).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use steadfast_core::METADATA_PORT_KEY;
use steadfast_core::{MetadataInfo, ServiceInfo, ServiceInstance};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Provider app of the tests.
pub const APP: &str = "greeter";
/// Interface the provider exports.
pub const IFACE: &str = "demo.Greeter";
/// One MiB, the fetcher's default body cap.
pub const MIB: usize = 1024 * 1024;

/// Metadata of `app` exporting `IFACE` over `tri` on `port`; `tag` makes the
/// revision distinct.
pub fn metadata(app: &str, port: u16, tag: &str) -> MetadataInfo {
    let service = ServiceInfo {
        name: IFACE.into(),
        group: None,
        version: None,
        protocol: "tri".into(),
        port,
        path: IFACE.into(),
        params: [("timestamp".to_string(), tag.to_string())].into(),
    };
    MetadataInfo::new(app, [service])
}

/// An instance of `info`'s app on `host`:`port` advertising `info`'s
/// revision, with its MetadataService on `metadata_port`.
pub fn instance(info: &MetadataInfo, host: &str, port: u16, metadata_port: u16) -> ServiceInstance {
    let mut i = ServiceInstance::new(info.app.clone(), host, port);
    i.set_revision(info.revision.clone());
    i.metadata
        .insert(METADATA_PORT_KEY.into(), metadata_port.to_string());
    i
}

/// A port nothing listens on: bound once, then released.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// What the bad server does after reading a request's head.
#[derive(Clone)]
pub enum Reply {
    /// Writes these bytes, then closes.
    Raw(Arc<Vec<u8>>),
    /// Writes a chunked 200 response of `total` bytes in `chunk`-byte chunks.
    Chunked { total: usize, chunk: usize },
    /// Never answers; holds the connection until the client leaves.
    Silent,
    /// Closes the connection without answering.
    Close,
}

impl Reply {
    /// A complete response with the given status line tail, headers and body.
    pub fn response(status: &str, extra_headers: &str, body: &[u8]) -> Self {
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        Reply::Raw(Arc::new(out))
    }

    /// A 200 response with `body`.
    pub fn ok(body: &[u8]) -> Self {
        Self::response("200 OK", "", body)
    }
}

/// A raw TCP server on 127.0.0.1 answering every connection with `Reply`.
pub struct BadServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl BadServer {
    /// Starts listening on a free port.
    pub async fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, reply.clone()));
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, reply: Reply) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    // Write errors are expected: the client may give up mid-body.
    match reply {
        Reply::Raw(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Reply::Chunked { total, chunk } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let data = vec![b'a'; chunk];
            let mut sent = 0;
            while sent < total {
                let n = chunk.min(total - sent);
                let frame = [format!("{n:x}\r\n").as_bytes(), &data[..n], b"\r\n"].concat();
                if stream.write_all(&frame).await.is_err() {
                    return;
                }
                sent += n;
            }
            let _ = stream.write_all(b"0\r\n\r\n").await;
            let _ = stream.shutdown().await;
        }
        Reply::Silent => {
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        }
        Reply::Close => {}
    }
}
