//! The import graph of each crate's top-level modules has no cycle: the layers a newcomer
//! reads in `docs/architecture.md` are the layers the code has.
//!
//! Read from the source, as a reviewer reads it: every `crate::<module>` path outside
//! comments (in `use` lines and in code) is an edge from the file's top-level module to
//! `<module>`. Test code is left out (files named `tests.rs`, and the `#[cfg(test)] mod tests`
//! at the end of a file): a test may build what sits above the module it tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// An edge of the graph: the file and line that make it.
type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// The `.rs` files under `dir`, recursively, without test files.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                sources(&path, found);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            found.push(path);
        }
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

/// The edges between the top-level modules of the crate whose sources are in `src`.
fn graph(src: &Path) -> Edges {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges = Edges::new();
    let mut modules = BTreeSet::new();
    for file in &files {
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
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        // Comments out (docs link to modules without importing them), lines kept.
        let code: String = code
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for (at, target) in reached(&code) {
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
    // Only the crate's own modules (not `crate::SomeType` re-exported at the root).
    for targets in edges.values_mut() {
        targets.retain(|target, _| modules.contains(target));
    }
    edges
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

/// Fails with every cycle of `crate_dir`'s modules and the lines that close it.
fn assert_acyclic(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let edges = graph(&src);
    assert!(
        edges.len() > 5,
        "{} has too few modules with imports: is the reader broken? {edges:?}",
        src.display()
    );
    let found = cycles(&edges);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("cycle between {component:?}:\n"));
        for from in component {
            for (to, lines) in &edges[from] {
                if component.contains(to) {
                    report.push_str(&format!("  {from} -> {to}: {}\n", lines.join(", ")));
                }
            }
        }
    }
    assert!(found.is_empty(), "{crate_dir}:\n{report}");
}

#[test]
fn the_shells_modules_import_each_other_without_a_cycle() {
    assert_acyclic("shell");
}

#[test]
fn the_cores_modules_import_each_other_without_a_cycle() {
    assert_acyclic("core");
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
