//! What tests and examples read about a real etcd and this process: etcd's
//! own `/metrics` and this process's TCP connections to a port.

use std::collections::HashSet;
use std::time::Duration;

/// The value of the metric `name` (a line `name value`) in etcd's
/// `/metrics` at `endpoint`, if present.
pub async fn etcd_metric(endpoint: &str, name: &str) -> Option<f64> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let text = http
        .get(format!("{endpoint}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// Open watch streams etcd counts (`etcd_debugging_mvcc_watch_stream_total`).
pub async fn watch_streams(endpoint: &str) -> Option<f64> {
    etcd_metric(endpoint, "etcd_debugging_mvcc_watch_stream_total").await
}

/// ESTABLISHED TCP connections of this process whose remote port is
/// `port` (its sockets from `/proc/self/fd`, matched by inode in
/// `/proc/net/tcp` and `/proc/net/tcp6`).
pub fn connections_to(port: u16) -> usize {
    let mine: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    let inode = l.strip_prefix("socket:[")?.strip_suffix(']')?;
                    Some(inode.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 9 && f[2].ends_with(&want) && f[3] == "01" && mine.contains(f[9])
                })
                .count()
        })
        .sum()
}
