//! The one proptest configuration of the core's property tests: each file's failing cases
//! saved in `core/proptest-regressions/<file>.txt` (commit them), the case count
//! `PROPTEST_CASES` (proptest reads it), or the file's own default.

use proptest::test_runner::{Config, FileFailurePersistence};

/// The configuration of the property tests in `core/tests/<file>.rs`, with
/// `PROPTEST_CASES` or `default_cases` cases (proptest's 256 when `None`).
pub fn config(file: &str, default_cases: Option<u32>) -> Config {
    let path = format!(
        "{}/proptest-regressions/{file}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let base = Config::default();
    let cases = match (std::env::var_os("PROPTEST_CASES"), default_cases) {
        (None, Some(cases)) => cases,
        _ => base.cases,
    };
    Config {
        cases,
        // proptest keeps a `&'static str`: one small leak per test binary.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            path.into_boxed_str(),
        )))),
        ..base
    }
}
