//! The client shims' own unit tests, run with the real libraries from the test bed's cache
//! (`tests/bed/clients.sh`), so they are part of `cargo test --workspace`: pytest for the
//! Scrapy middleware (`clients/python/tests`), `node --test` for the Crawlee helper
//! (`clients/js/test`). A missing library fails the test with the command that installs it.

use std::path::Path;
use std::process::Command;

use proxy_tests::bins::{self, repo_root};

/// Runs `program` with `args` in `dir` and fails with its output unless it exits 0.
fn passes(program: &Path, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{text}",
        program.display(),
        output.status
    );
    text
}

#[test]
fn the_scrapy_middleware_passes_its_pytest_suite() {
    let dir = repo_root().join("clients/python");
    let src = dir.join("src");
    let out = passes(
        &bins::scrapy_python(),
        &["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        &dir,
        &[("PYTHONPATH", src.to_str().unwrap())],
    );
    // pytest says "N passed"; a run that collected nothing says "no tests ran".
    assert!(
        out.lines()
            .any(|l| l.contains(" passed") && !l.contains("failed")),
        "{out}"
    );
}

#[test]
fn the_crawlee_helper_passes_its_node_test_suite() {
    let dir = repo_root().join("clients/js");
    // The helper has no dependencies; the cache is checked so a missing install fails here
    // as it does in the e2e.
    bins::crawlee_modules();
    let out = passes(&bins::node(), &["--test", "test/"], &dir, &[]);
    assert!(out.contains("# fail 0"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("# pass ") && l != "# pass 0"),
        "{out}"
    );
}
