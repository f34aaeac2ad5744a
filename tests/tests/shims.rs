//! The client shims' own unit tests, run with the real libraries from the test bed's cache
//! (`tests/bed/clients.sh`), so they are part of `cargo test --workspace`: pytest for the
//! Scrapy middleware (`clients/python/tests`), `node --test` for the Crawlee helper
//! (`clients/js/test`), `tsc` for its types. And the packages claim no more than was
//! tested: the versions they declare are the ones the bed installs. A missing library fails
//! the test with the command that installs it.

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

#[test]
fn the_javascript_types_check_against_their_use() {
    let tsc = bins::crawlee_modules().join("node_modules/typescript/bin/tsc");
    let project = repo_root().join("clients/js/test/tsconfig.json");
    let out = passes(
        &bins::node(),
        &[
            tsc.to_str().unwrap(),
            "--noEmit",
            "-p",
            project.to_str().unwrap(),
        ],
        &repo_root().join("clients/js"),
        &[],
    );
    assert!(!out.contains("error"), "{out}");
}

/// The version of `name` a `KEY=version` line of `text` sets (clients.sh's `SCRAPY=2.19.0`,
/// constraints.txt's `Scrapy==2.19.0`).
fn pinned<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|line| {
            let (key, version) = line.split_once('=')?;
            key.eq_ignore_ascii_case(name)
                .then(|| version.trim_start_matches('='))
        })
        .unwrap_or_else(|| panic!("no {name}= line"))
}

/// Each package declares the versions of Crawlee, Playwright and Scrapy it was tested with,
/// and nothing wider: the JavaScript package's peers are what its lock file installs (no
/// Crawlee 4, which no test installed), the Python package's extras what its constraints
/// pin; both are what `tests/bed/clients.sh` says it installs.
#[test]
fn the_packages_declare_exactly_the_versions_the_tests_install() {
    let root = repo_root();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let json = |path: &str| serde_json::from_str::<serde_json::Value>(&read(path)).unwrap();
    let bed = read("tests/bed/clients.sh");
    let (crawlee, playwright, scrapy) = (
        pinned(&bed, "CRAWLEE"),
        pinned(&bed, "PLAYWRIGHT"),
        pinned(&bed, "SCRAPY"),
    );
    let package = json("clients/js/package.json");
    let lock = json("clients/js/package-lock.json");
    let locked = |name: &str| lock["packages"][format!("node_modules/{name}")]["version"].clone();
    assert_eq!(package["peerDependencies"]["@crawlee/core"], crawlee);
    assert_eq!(package["peerDependencies"]["playwright"], playwright);
    assert_eq!(locked("@crawlee/core"), crawlee);
    assert_eq!(locked("playwright"), playwright);
    for crawler in ["@crawlee/http", "@crawlee/cheerio", "@crawlee/playwright"] {
        assert_eq!(package["devDependencies"][crawler], crawlee, "{crawler}");
        assert_eq!(locked(crawler), crawlee, "{crawler}");
    }
    assert_eq!(package["types"], "src/index.d.ts");
    assert!(root.join("clients/js/src/index.d.ts").is_file());

    let pyproject = read("clients/python/pyproject.toml");
    let constraints = read("clients/python/constraints.txt");
    assert!(
        pyproject.contains(&format!(r#"scrapy = ["scrapy=={scrapy}"]"#)),
        "{pyproject}"
    );
    assert!(
        pyproject.contains(&format!(r#"playwright = ["playwright=={playwright}"]"#)),
        "{pyproject}"
    );
    assert_eq!(pinned(&constraints, "Scrapy"), scrapy);
    assert_eq!(pinned(&constraints, "playwright"), playwright);
    assert!(
        pyproject.contains(r#"proxy_operator_client = ["py.typed"]"#)
            && root
                .join("clients/python/src/proxy_operator_client/py.typed")
                .is_file(),
        "the Python package ships py.typed"
    );
}
