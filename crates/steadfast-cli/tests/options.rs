//! The options table of docs/operations.md is the command's own: every
//! `--option` (and its env variable) of `steadfast inspect --help` is in it,
//! and it names no other.

use std::collections::BTreeSet;
use std::process::Command;

/// `--name` words of `text` (a word ends at a space, `=`, `` ` `` or `\|`).
fn long_options(text: &str) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || c == '`' || c == '|' || c == '(' || c == ',')
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            w.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphanumeric()))
        .collect()
}

/// `STEADFAST_*` names in `text`.
fn env_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("STEADFAST_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_operations_guide_documents_every_inspect_option_and_no_other() {
    let out = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(["inspect", "--help"])
        .output()
        .expect("the command runs");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("utf-8 help");
    let mut from_help = long_options(&help);
    from_help.remove("help");

    let doc = include_str!("../../../docs/operations.md");
    let table: String = doc
        .split("### `steadfast inspect`")
        .nth(1)
        .and_then(|s| s.split("Options:").nth(1))
        .and_then(|s| s.split("This table is checked").next())
        .expect("the options table")
        .to_string();
    let documented = long_options(&table);
    assert_eq!(
        documented, from_help,
        "docs/operations.md's inspect options differ from --help"
    );
    // The env variables the command reads are the ones the table names
    // (the password is read from the environment only).
    let mut help_env = env_names(&help);
    help_env.insert("STEADFAST_ETCD_PASSWORD".into());
    assert_eq!(env_names(&table), help_env);
}
