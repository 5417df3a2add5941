//! The exit codes of docs/operations.md are the command's own: the
//! `Exit codes:` section of `steadfast inspect --help` and the guide's
//! table list the same codes, with 0 only for a complete report and 2
//! for usage errors, as clap has it.

use std::collections::BTreeMap;
use std::process::Command;

/// `code -> meaning` of the help's `Exit codes:` section (`  N  text`).
fn from_help(help: &str) -> BTreeMap<u8, String> {
    help.split("Exit codes:")
        .nth(1)
        .expect("an Exit codes section in --help")
        .lines()
        .skip(1)
        .map_while(|l| {
            let l = l.strip_prefix("  ")?;
            let (code, meaning) = l.split_once("  ")?;
            Some((code.trim().parse().ok()?, meaning.trim().to_string()))
        })
        .collect()
}

/// `code -> meaning` of the guide's `| `N` | text |` rows between
/// "Exit codes:" and "This list is checked".
fn from_guide(doc: &str) -> BTreeMap<u8, String> {
    doc.split("### `steadfast inspect`")
        .nth(1)
        .and_then(|s| s.split("Exit codes:").nth(1))
        .and_then(|s| s.split("This list is checked").next())
        .expect("the exit code table")
        .lines()
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let code = cells.next()?.trim_matches('`').parse().ok()?;
            Some((code, cells.next()?.to_string()))
        })
        .collect()
}

#[test]
fn the_operations_guide_lists_every_exit_code_of_help_and_no_other() {
    let out = Command::new(env!("CARGO_BIN_EXE_steadfast"))
        .args(["inspect", "--help"])
        .output()
        .expect("the command runs");
    assert!(out.status.success());
    let help = from_help(&String::from_utf8(out.stdout).expect("utf-8 help"));
    assert_eq!(
        help.get(&0).map(String::as_str),
        Some("the report is complete")
    );
    assert!(
        help.contains_key(&2),
        "clap's usage code is listed: {help:?}"
    );
    for code in [3, 4, 5] {
        assert!(help.contains_key(&code), "{code} missing: {help:?}");
    }
    let doc = from_guide(include_str!("../../../docs/operations.md"));
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        help.keys().collect::<Vec<_>>(),
        "docs/operations.md's exit codes differ from --help: {doc:?} vs {help:?}"
    );
}
