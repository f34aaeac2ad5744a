//! The import graph of each crate's top-level modules has no cycle: the layers a newcomer
//! reads in `docs/architecture.md` are the layers the code has.
//!
//! Read from the source, as a reviewer reads it: every `crate::<module>` path outside
//! comments and literals (in `use` lines and in code) is an edge from the file's top-level
//! module to `<module>`. Test code is read apart: every `#[cfg(test)]` item, cut out by its
//! braces wherever it sits in a file, and the files a `#[cfg(test)] mod name;` declares. A
//! cycle in production code fails; a cycle only test code makes is printed (a test may build
//! what sits above the module it tests).
//!
//! And the files the modules live in follow one convention (`name/mod.rs` for a module with
//! submodules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// An edge of the graph: the file and line that make it.
type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// What a byte of a source file is part of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lexeme {
    Code,
    /// A comment, or a string or character literal: never an import.
    Text,
}

/// The [`Lexeme`] of each byte of `code`: comments (line, block, nested), string literals
/// (with escapes), raw strings (`r#"..."#`) and character literals are `Text`; a lifetime
/// (`'a`) is code.
fn lex(code: &str) -> Vec<Lexeme> {
    let bytes = code.as_bytes();
    let mut kinds = vec![Lexeme::Code; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |n| i + n)
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            loop {
                if j >= bytes.len() {
                    break j;
                } else if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + rest.iter().position(|&b| b == b'"').unwrap_or(0) + 1;
            bytes[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(bytes.len(), |n| body + n + close.len())
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime: code.
            match rest.get(1) {
                Some(b'\\') => {
                    let close = rest[2..].iter().position(|&b| b == b'\'');
                    close.map_or(i + 1, |n| i + 2 + n + 1)
                }
                Some(_) => {
                    let width = code[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if rest.get(1 + width) == Some(&b'\'') {
                        i + 2 + width
                    } else {
                        i + 1
                    }
                }
                None => i + 1,
            }
        } else {
            i += 1;
            continue;
        };
        if rest[0] != b'\'' || end > i + 1 {
            let end = end.min(bytes.len());
            kinds[i..end].fill(Lexeme::Text);
        }
        i = end.max(i + 1);
    }
    kinds
}

/// How many `#` a raw string starting at `rest[0]` has (`r"`, `r#"`, `br#"`), if one does.
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let after = rest
        .strip_prefix(b"br")
        .or_else(|| rest.strip_prefix(b"r"))?;
    let hashes = after.iter().take_while(|&&b| b == b'#').count();
    (after.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// A source file, read as a reviewer reads it.
struct Source {
    /// The production code: comments, literals and every `#[cfg(test)]` item blanked (lines
    /// kept, so offsets still give line numbers).
    production: String,
    /// The test code: only the `#[cfg(test)]` items, the rest blanked the same way.
    test: String,
    /// The modules the file declares under `#[cfg(test)]` without a body (`mod tests;`):
    /// their files are test code.
    test_modules: Vec<String>,
}

/// Splits `code` into its production and test code: each `#[cfg(test)]` item, wherever it
/// sits, is cut out by its braces (or up to its `;`), not by where a file's test module
/// usually starts.
fn split(code: &str) -> Source {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    let kinds = lex(code);
    let bytes = code.as_bytes();
    let is_code = |i: usize| kinds.get(i) == Some(&Lexeme::Code);
    let mut test_spans = Vec::new();
    let mut test_modules = Vec::new();
    for (at, _) in code.match_indices(ATTRIBUTE) {
        if !is_code(at)
            || test_spans
                .iter()
                .any(|&(from, to)| (from..to).contains(&at))
        {
            continue;
        }
        // The item: past other attributes, up to its `;` or the brace that closes its body.
        let mut i = at + ATTRIBUTE.len();
        let mut depth = 0i32;
        let end = loop {
            let Some(&b) = bytes.get(i) else {
                break bytes.len();
            };
            if is_code(i) {
                match b {
                    b'{' | b'[' | b'(' => depth += 1,
                    b'}' | b']' | b')' => {
                        depth -= 1;
                        if depth == 0 && b == b'}' {
                            break i + 1;
                        }
                    }
                    b';' if depth == 0 => break i + 1,
                    _ => {}
                }
            }
            i += 1;
        };
        let item = &code[at + ATTRIBUTE.len()..end];
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        if item.trim_end().ends_with(';')
            && let Some(at) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(at + 1)
        {
            test_modules.push((*name).to_owned());
        }
        test_spans.push((at, end));
    }
    let blank = |keep: &dyn Fn(usize) -> bool| -> String {
        code.char_indices()
            .map(|(i, c)| {
                if c == '\n' || (is_code(i) && keep(i)) {
                    c
                } else {
                    ' '
                }
            })
            .collect()
    };
    let in_test = |i: usize| test_spans.iter().any(|&(from, to)| (from..to).contains(&i));
    Source {
        production: blank(&|i| !in_test(i)),
        test: blank(&in_test),
        test_modules,
    }
}
/// The module names `code` reaches through `crate::`, each with the byte offset where it
/// is named: `crate::a::b`, and each item of a group `crate::{a, b::{c, d}}` (over lines).
fn reached(code: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        let Some(group) = after.strip_prefix('{') else {
            names.push((at, ident(after)));
            continue;
        };
        // The items at the group's top level: split on commas outside inner braces.
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    names.push((at, ident(&group[item_start..i])));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    names.push((at, ident(&group[item_start..i])));
                    item_start = i + 1;
                }
                _ => {}
            }
        }
    }
    names.retain(|(_, n)| !n.is_empty() && n != "self");
    names
}

/// The import graphs of a crate's top-level modules.
struct Graphs {
    /// Edges made by production code.
    production: Edges,
    /// Edges made by test code only (`#[cfg(test)]` items and the files they declare).
    test: Edges,
}

/// The edges between the top-level modules of the crate whose sources are in `src`.
fn graph(src: &Path) -> Graphs {
    let mut files = Vec::new();
    sources(src, &mut files);
    let sources: BTreeMap<&PathBuf, Source> = files
        .iter()
        .map(|file| {
            (
                file,
                split(&std::fs::read_to_string(file).expect("a source file")),
            )
        })
        .collect();
    // The files a `#[cfg(test)] mod name;` declares: `name.rs` or `name/mod.rs` beside the
    // declaring file (in its own directory for `lib.rs`, `main.rs` and `mod.rs`), and every
    // file under `name/`.
    let mut test_dirs = Vec::new();
    for (file, source) in &sources {
        let dir = match file.file_stem().and_then(|s| s.to_str()) {
            Some("lib" | "main" | "mod") => file.parent().expect("a directory").to_path_buf(),
            _ => file.with_extension(""),
        };
        for name in &source.test_modules {
            test_dirs.push(dir.join(name));
        }
    }
    let test_file = |file: &Path| {
        test_dirs
            .iter()
            .any(|dir| file.starts_with(dir) || file == dir.with_extension("rs"))
    };
    let mut graphs = Graphs {
        production: Edges::new(),
        test: Edges::new(),
    };
    let mut modules = BTreeSet::new();
    for (file, source) in &sources {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative
            .components()
            .next()
            .expect("a file")
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        modules.insert(module.clone());
        let (production, test) = if test_file(file) {
            ("", format!("{}\n{}", source.production, source.test))
        } else {
            (source.production.as_str(), source.test.clone())
        };
        for (code, edges) in [
            (production, &mut graphs.production),
            (test.as_str(), &mut graphs.test),
        ] {
            for (at, target) in reached(code) {
                if target != module {
                    let line = code[..at].matches('\n').count() + 1;
                    edges
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_default()
                        .push(format!("{}:{line}", relative.display()));
                }
            }
        }
    }
    // Only the crate's own modules (not `crate::SomeType` re-exported at the root).
    for edges in [&mut graphs.production, &mut graphs.test] {
        for targets in edges.values_mut() {
            targets.retain(|target, _| modules.contains(target));
        }
    }
    graphs
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flat_map(|t| t.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Every cycle of `edges` and the lines that close it, one block per cycle.
fn report(edges: &Edges, found: &[Vec<String>]) -> String {
    let mut report = String::new();
    for component in found {
        report.push_str(&format!("cycle between {component:?}:\n"));
        for from in component {
            for (to, lines) in edges.get(from).into_iter().flatten() {
                if component.contains(to) {
                    report.push_str(&format!("  {from} -> {to}: {}\n", lines.join(", ")));
                }
            }
        }
    }
    report
}

/// `a` and `b` together.
fn union(a: &Edges, b: &Edges) -> Edges {
    let mut all = a.clone();
    for (from, targets) in b {
        for (to, lines) in targets {
            all.entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_default()
                .extend(lines.iter().cloned());
        }
    }
    all
}

/// Fails with every cycle of `crate_dir`'s modules in production code and the lines that
/// close it; prints the cycles that test code adds (a test may build what sits above the
/// module it tests, so those are reported, not refused).
fn assert_acyclic(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let graphs = graph(&src);
    if std::env::var_os("MODULE_GRAPH_PRINT").is_some() {
        // The drawing docs/architecture.md's layers are checked against: each module and
        // what it imports in production code.
        for (from, targets) in &graphs.production {
            let to: Vec<&str> = targets.keys().map(String::as_str).collect();
            println!("{crate_dir}: {from} -> {}", to.join(" "));
        }
    }
    assert!(
        graphs.production.len() > 5,
        "{} has too few modules with imports: is the reader broken? {:?}",
        src.display(),
        graphs.production
    );
    let found = cycles(&graphs.production);
    assert!(
        found.is_empty(),
        "{crate_dir}:\n{}",
        report(&graphs.production, &found)
    );
    let all = union(&graphs.production, &graphs.test);
    let with_tests = cycles(&all);
    if !with_tests.is_empty() {
        println!(
            "{crate_dir}: cycles that only test code makes (reported, not refused):\n{}",
            report(&all, &with_tests)
        );
    }
}

#[test]
fn the_shells_modules_import_each_other_without_a_cycle() {
    assert_acyclic("shell");
}

/// The lease book's readers hold a `lease_book::Reader`, not the HTTP service: in production
/// code only the wiring (`operator`) reaches `discovery`, the book's HTTP face, and nothing
/// but the wiring and `discovery` reaches the book's mutable side (`lease_book` is read
/// through its `Reader` by the controller, the pools and `tracked`).
#[test]
fn only_the_wiring_reaches_the_lease_books_http_face() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shell/src");
    let graphs = graph(&src);
    let reaching: BTreeMap<&str, &Vec<String>> = graphs
        .production
        .iter()
        .filter_map(|(from, targets)| Some((from.as_str(), targets.get("discovery")?)))
        .collect();
    let others: Vec<String> = reaching
        .iter()
        .filter(|(from, _)| **from != "operator")
        .map(|(from, lines)| format!("{from} ({})", lines.join(", ")))
        .collect();
    assert!(
        reaching.contains_key("operator"),
        "the reader lost the wiring's import of discovery: {reaching:?}"
    );
    assert!(
        others.is_empty(),
        "modules that take the discovery API instead of a lease_book::Reader: {}",
        others.join("; ")
    );
}

/// One module-file convention in every crate: a module with submodules is a directory with
/// its `mod.rs` (`gc/mod.rs`, `gc/plan.rs`), never `gc.rs` beside a `gc/` directory, so a
/// reader finds a module's code at one kind of path. `mod.rs` was the more common form.
#[test]
fn every_module_with_submodules_is_a_directory_with_its_mod_rs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut both = Vec::new();
    for crate_src in ["core/src", "shell/src", "crd/src", "tests/src"] {
        let mut found = Vec::new();
        sources(&root.join(crate_src), &mut found);
        assert!(!found.is_empty(), "no sources under {crate_src}");
        both.extend(
            found
                .iter()
                .filter(|file| file.with_extension("").is_dir())
                .filter_map(|file| file.strip_prefix(&root).ok())
                .map(|file| file.display().to_string()),
        );
    }
    assert!(
        both.is_empty(),
        "files beside a directory of the same name (move each to <name>/mod.rs): {}",
        both.join(", ")
    );
}

#[test]
fn the_cores_modules_import_each_other_without_a_cycle() {
    assert_acyclic("core");
}

#[test]
fn test_items_are_cut_out_by_their_braces_wherever_they_sit() {
    let code = "use crate::a::X;\n\
        #[cfg(test)]\nmod tests {\n    use crate::b;\n    fn f() { let s = \"}\"; }\n}\n\
        pub fn g() -> crate::c::Y { todo!() } // crate::d in a comment\n\
        #[cfg(test)]\nfn helper() { crate::e::f(); }\n\
        #[cfg(test)]\nmod more;\n\
        const S: &str = \"crate::f\"; const R: &str = r#\"crate::g \"quoted\"\"#; fn h<'a>(_: &'a str) -> char { '{' }\n\
        fn after() { crate::h::i(); }\n";
    let source = split(code);
    let names = |code: &str| -> Vec<String> { reached(code).into_iter().map(|(_, n)| n).collect() };
    assert_eq!(names(&source.production), ["a", "c", "h"]);
    assert_eq!(names(&source.test), ["b", "e"]);
    assert_eq!(source.test_modules, ["more"]);
    assert_eq!(
        source.production.lines().count(),
        code.lines().count(),
        "lines are kept, so line numbers stay true"
    );
}

#[test]
fn the_reader_finds_a_cycle_and_the_lines_that_make_it() {
    let mut edges = Edges::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges
            .entry(from.into())
            .or_default()
            .insert(to.into(), vec![format!("{from}.rs:1")]);
    }
    assert_eq!(cycles(&edges), vec![vec!["a", "b", "c"]]);
    let names = |code: &str| -> Vec<String> { reached(code).into_iter().map(|(_, n)| n).collect() };
    assert_eq!(
        names("use crate::{\n    gate::{Gate, Write},\n    metrics,\n    self,\n};"),
        ["gate", "metrics"]
    );
    assert_eq!(
        names("let x = crate::locks::lock(&m); crate::time::now()"),
        ["locks", "time"]
    );
}
