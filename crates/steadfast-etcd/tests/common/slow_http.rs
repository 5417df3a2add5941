//! [`SlowRelay`]: a loopback HTTP/1.1 relay in front of etcd's JSON gateway
//! that holds back every request whose body contains a marker (e.g. the
//! base64 of one key), so one key's calls are slow while every other call
//! goes through at once. Unary calls only (each answer is read whole and
//! sent back with a `content-length`); connections are kept alive.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

type Marker = Arc<Mutex<Option<(Vec<u8>, Duration)>>>;

/// Longest request head or body the relay accepts.
const MAX_REQUEST: usize = 1 << 20;

/// The relay; dropping it stops accepting (open connections end with their
/// tasks when the runtime drops them).
pub struct SlowRelay {
    endpoint: String,
    marker: Marker,
    task: JoinHandle<()>,
}

impl Drop for SlowRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlowRelay {
    /// Relays to `target` (`http://host:port`).
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let marker: Marker = Arc::default();
        let m = marker.clone();
        let http = reqwest::Client::builder()
            .http1_only()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, http.clone(), target.clone(), m.clone()));
            }
        });
        Self {
            endpoint,
            marker,
            task,
        }
    }

    /// `http://<relay address>`.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// Holds back every request whose body contains `marker` for `delay`.
    pub fn slow_down(&self, marker: &[u8], delay: Duration) {
        *self.marker.lock().unwrap() = Some((marker.to_vec(), delay));
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

async fn serve(conn: TcpStream, http: reqwest::Client, target: String, marker: Marker) {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    // One request per round; the connection's end ends the loop.
    loop {
        let mut path = None;
        let mut length = 0usize;
        let mut head = 0usize;
        loop {
            let mut line = String::new();
            match r.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head += n,
            }
            if head > MAX_REQUEST {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if path.is_none() {
                path = line.split(' ').nth(1).map(str::to_string);
            } else if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        if length > MAX_REQUEST {
            return;
        }
        let mut body = vec![0u8; length];
        if r.read_exact(&mut body).await.is_err() {
            return;
        }
        let delay = marker
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(m, _)| contains(&body, m))
            .map(|(_, d)| *d);
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let url = format!("{target}{}", path.unwrap_or_default());
        let (status, answer) = match http
            .post(url)
            .header("Grpc-Metadata-hasleader", "true")
            .body(body)
            .send()
            .await
        {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (status, resp.bytes().await.unwrap_or_default().to_vec())
            }
            Err(_) => (
                503,
                br#"{"error":"relay","message":"relay","code":14}"#.to_vec(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if w.write_all(head.as_bytes()).await.is_err() || w.write_all(&answer).await.is_err() {
            return;
        }
    }
}
