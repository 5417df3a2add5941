//! The file name of an app's snapshot: readable, safe on every file
//! system, and distinct per app even when two names sanitize alike.

use sha2::{Digest, Sha256};

/// Extension of snapshot files.
pub const SNAPSHOT_EXTENSION: &str = "snap";

/// `<app, sanitized, at most 64 characters>-<16 hex of SHA-256(app)>.snap`:
/// characters other than ASCII letters, digits, `-` and `_` become `_`.
pub fn file_name(app: &str) -> String {
    let safe: String = app
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let digest = Sha256::digest(app.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{safe}-{hex}.{SNAPSHOT_EXTENSION}")
}
