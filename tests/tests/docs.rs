//! The docs say what the code does: every default a doc states for a flag of
//! `proxy-operator run` or `proxy-operator gateway` is the one the binary's `--help` prints,
//! and every flag a doc names that way exists.
//!
//! The convention (docs/testing.md, "Docs that state defaults"), in README.md, `docs/` and
//! `deploy/`'s READMEs:
//! - in prose, "`--flag` (default V)", optionally followed by `,` or `;` and more words
//!   ("`--max-retained-leases` (default 10 000, about 600 bytes each)");
//! - in a table whose header has a `default` column: the row's first cell names the flag
//!   (`--flag`), the `default` cell its default (empty: the flag has none).
//!
//! A flag in backticks followed by a parenthesis that starts with a digit ("`--flag` (3)") is
//! refused: it reads as a default but escapes the check. CHANGELOG.md is history, not checked.
//! A doc about the gateway (`docs/gateway.md`) means `gateway`'s flags, every other doc
//! `run`'s; a flag only the other command has is that command's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proxy_tests::bins::repo_root;
use proxy_tests::operator::binary;

/// A flag's default as `--help` prints it (`None`: it has none).
type Defaults = BTreeMap<String, Option<String>>;

/// One statement of a default in a doc.
#[derive(Debug, PartialEq)]
struct Stated {
    flag: String,
    /// The value as the doc writes it, normalized ([`normalize`]); `None`: no default.
    value: Option<String>,
    line: usize,
}

#[test]
fn every_default_a_doc_states_for_a_flag_is_the_one_help_prints() {
    let run = help_defaults("run");
    let gateway = help_defaults("gateway");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).expect("read a doc");
        let name = doc
            .strip_prefix(repo_root())
            .unwrap_or(&doc)
            .display()
            .to_string();
        let (mine, other) = if name == "docs/gateway.md" {
            (&gateway, &run)
        } else {
            (&run, &gateway)
        };
        let (stated, informal) = statements(&text);
        for (flag, line) in informal {
            wrong.push(format!(
                "{name}:{line}: `{flag}` (...) reads as a default: write \"`{flag}` (default V)\""
            ));
        }
        for Stated { flag, value, line } in stated {
            checked += 1;
            let Some(default) = mine.get(&flag).or_else(|| other.get(&flag)) else {
                wrong.push(format!(
                    "{name}:{line}: {flag} is no flag of `run` or `gateway`"
                ));
                continue;
            };
            if *default != value {
                wrong.push(format!(
                    "{name}:{line}: {flag}: the doc says {}, --help says {}",
                    value.as_deref().unwrap_or("no default"),
                    default.as_deref().unwrap_or("no default")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs that disagree with --help:\n{}",
        wrong.join("\n")
    );
    // The docs state dozens; finding few means the convention or the parser broke.
    assert!(checked >= 30, "only {checked} stated defaults found");
}

/// The docs the check reads: README.md, every Markdown file under `docs/` and `deploy/`.
fn docs() -> Vec<PathBuf> {
    let root = repo_root();
    let mut found = vec![root.join("README.md")];
    for dir in ["docs", "deploy"] {
        markdown_under(&root.join(dir), &mut found);
    }
    found.sort();
    found
}

fn markdown_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a docs directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_symlink() {
            continue;
        } else if path.is_dir() {
            markdown_under(&path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// Every flag of `proxy-operator <command>` with the default its `--help` prints.
fn help_defaults(command: &str) -> Defaults {
    let out = Command::new(binary())
        .args([command, "--help"])
        .output()
        .expect("run proxy-operator --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{command} --help failed:\n{help}");
    let defaults = parse_help(&help);
    assert!(
        defaults.len() >= 8,
        "{command} --help: only {} flags read from:\n{help}",
        defaults.len()
    );
    defaults
}

/// The flags of a clap `--help` text and their `[default: V]`. An option starts on a line
/// indented less than its description, with `-x, --flag` or `--flag`; what follows up to the
/// next option is its text (clap may wrap `[default: ...]` over two lines).
fn parse_help(help: &str) -> Defaults {
    let mut defaults = Defaults::new();
    let mut current: Option<(String, String)> = None;
    let finish = |current: Option<(String, String)>, defaults: &mut Defaults| {
        if let Some((flag, text)) = current {
            defaults.insert(flag, help_default(&text));
        }
    };
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let flag = (indent < 10 && trimmed.starts_with('-'))
            .then(|| {
                trimmed
                    .split([' ', ','])
                    .find(|word| word.starts_with("--"))
                    .map(str::to_owned)
            })
            .flatten();
        match (flag, current.as_mut()) {
            (Some(flag), _) => {
                finish(current.take(), &mut defaults);
                current = Some((flag, String::new()));
            }
            (None, Some((_, text))) => {
                text.push(' ');
                text.push_str(trimmed);
            }
            (None, None) => {}
        }
    }
    finish(current, &mut defaults);
    defaults
}

/// The `V` of `[default: V]` in an option's help text.
fn help_default(text: &str) -> Option<String> {
    let rest = &text[text.find("[default:")? + "[default:".len()..];
    let value: String = rest[..rest.find(']')?].split_whitespace().collect();
    Some(normalize(&value))
}

/// A value as the check compares it: no backticks, no digit-group spaces (`10 000`).
fn normalize(value: &str) -> String {
    value.replace('`', "").split_whitespace().collect()
}

/// The defaults a Markdown text states by the convention, and the flags written as if
/// stating one without it (`--flag` and the line of each).
fn statements(text: &str) -> (Vec<Stated>, Vec<(String, usize)>) {
    let mut stated = Vec::new();
    let mut informal = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut default_column = None;
    for (i, line) in lines.iter().enumerate() {
        let line_no = i + 1;
        if !line.trim_start().starts_with('|') {
            default_column = None;
            continue;
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if default_column.is_none() {
            // A header row (the row before `|---|`): does it have a `default` column?
            let next_is_rule = lines
                .get(i + 1)
                .is_some_and(|next| next.trim_start().starts_with("|-") || next.contains("|---"));
            if next_is_rule {
                default_column = cells.iter().position(|c| c.eq_ignore_ascii_case("default"));
            }
            continue;
        }
        let (Some(column), Some(first)) = (default_column, cells.first()) else {
            continue;
        };
        let Some(flag) = backticked_flag(first) else {
            continue;
        };
        let value = cells
            .get(column)
            .map(|c| normalize(c))
            .filter(|v| !v.is_empty());
        stated.push(Stated {
            flag,
            value,
            line: line_no,
        });
    }
    // Prose: "`--flag` (default V...)", also across a line break; a quoted example in a
    // double-backtick code span (as docs/testing.md shows the convention) states nothing.
    let text = &without_double_backtick_spans(text);
    let mut offset = 0;
    while let Some(start) = text[offset..].find("`--") {
        let at = offset + start;
        offset = at + 3;
        let Some(end) = text[at + 1..].find('`') else {
            break;
        };
        let flag = &text[at + 1..at + 1 + end];
        if !is_flag(flag) {
            continue;
        }
        let line_no = text[..at].matches('\n').count() + 1;
        if lines[line_no - 1].trim_start().starts_with('|') {
            continue;
        }
        let after = text[at + 2 + end..].trim_start();
        let Some(inside) = after.strip_prefix('(') else {
            continue;
        };
        let inside = &inside[..inside.find(')').unwrap_or(inside.len())];
        let inside: String = inside.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(value) = inside.strip_prefix("default ") {
            let value = &value[..value.find([',', ';']).unwrap_or(value.len())];
            stated.push(Stated {
                flag: flag.to_owned(),
                value: Some(normalize(value)),
                line: line_no,
            });
        } else if inside.starts_with(|c: char| c.is_ascii_digit()) {
            informal.push((flag.to_owned(), line_no));
        }
    }
    (stated, informal)
}

/// `text` with every ``` `` ... `` ``` span blanked out, its line breaks kept.
fn without_double_backtick_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split("``").enumerate() {
        if i > 0 {
            out.push_str("  ");
        }
        if i % 2 == 0 {
            out.push_str(part);
        } else {
            out.extend(part.chars().map(|c| if c == '\n' { c } else { ' ' }));
        }
    }
    out
}

/// The flag a table cell names in backticks (`` `--flag` `` or `` `--flag VALUE` ``).
fn backticked_flag(cell: &str) -> Option<String> {
    let inner = cell.strip_prefix('`')?;
    let inner = &inner[..inner.find('`')?];
    let flag = inner.split_whitespace().next()?;
    is_flag(flag).then(|| flag.to_owned())
}

fn is_flag(text: &str) -> bool {
    text.strip_prefix("--").is_some_and(|name| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

#[test]
fn every_link_between_the_docs_reaches_a_file_and_a_heading() {
    let mut dead = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).expect("read a doc");
        let name = doc
            .strip_prefix(repo_root())
            .unwrap_or(&doc)
            .display()
            .to_string();
        for (target, line) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                doc.clone()
            } else {
                doc.parent().expect("a doc's directory").join(path)
            };
            if !file.exists() {
                dead.push(format!(
                    "{name}:{line}: {target}: no file {}",
                    file.display()
                ));
                continue;
            }
            if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let headings = anchors(&std::fs::read_to_string(&file).expect("read a linked doc"));
            if !headings.iter().any(|h| h == anchor) {
                dead.push(format!("{name}:{line}: {target}: no heading #{anchor}"));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
    assert!(checked >= 50, "only {checked} links found");
}

/// The relative targets of the Markdown links in `text` (`[text](target)`, outside code
/// fences and code spans), with their lines.
fn links(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (i, line) in prose_lines(text) {
        let mut rest = without_code_spans(line);
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            found.push((after[..end].to_owned(), i + 1));
            rest = after[end..].to_owned();
        }
    }
    found
}

/// The anchors GitHub makes of a Markdown text's headings: lowercase, every character but
/// letters, digits, `-`, `_` and spaces dropped, spaces made `-`; a repeated one gets `-1`,
/// `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut made = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (_, line) in prose_lines(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = seen.entry(slug.clone()).or_default();
        made.push(if *repeats == 0 {
            slug
        } else {
            format!("{slug}-{repeats}")
        });
        *repeats += 1;
    }
    made
}

/// The lines of a Markdown text outside its fenced code blocks, numbered from 0.
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter(move |(_, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// A line with its code spans (`` `...` ``) blanked out.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { "" })
        .collect::<Vec<_>>()
        .join("``")
}

#[test]
fn the_link_checks_read_links_and_make_anchors_as_github_does() {
    let doc = "\
# Apply → Ready at the `default` interval
## Fleet scale: 1 000 and 10 000
## Fleet scale: 1 000 and 10 000
See [it](api.md#report) and [here](#fleet-scale-1-000-and-10-000-1), not `[code](x.md)`.
```
[fenced](y.md)
```
";
    assert_eq!(
        anchors(doc),
        [
            "apply--ready-at-the-default-interval",
            "fleet-scale-1-000-and-10-000",
            "fleet-scale-1-000-and-10-000-1",
        ]
    );
    assert_eq!(
        links(doc),
        [
            ("api.md#report".to_owned(), 4),
            ("#fleet-scale-1-000-and-10-000-1".to_owned(), 4),
        ]
    );
}

#[test]
fn the_parsers_read_each_form_of_the_convention() {
    let help = "\
Options:
      --providers-config <PROVIDERS_CONFIG>
          Path to the providers config

          [env: PROVIDERS_CONFIG=]

      --metrics-addr <METRICS_ADDR>
          Where metrics are served [env: METRICS_ADDR=] [default:
          0.0.0.0:9090]

  -h, --help
          Print help (see a summary with '-h')
";
    let defaults = parse_help(help);
    assert_eq!(
        defaults,
        Defaults::from([
            ("--providers-config".into(), None),
            ("--metrics-addr".into(), Some("0.0.0.0:9090".into())),
            ("--help".into(), None),
        ])
    );

    let doc = "\
Keeps `--max-retained-leases` (default 10 000, about 600 bytes each) and `--listen`
(default `0.0.0.0:8080`); `--discovery-token` (or `DISCOVERY_TOKEN`) is not a default,
`--banned-sites` (3) is one without the convention, and `` `--flag` (3) `` a quoted example.

| flag | default | |
|---|---|---|
| `--tenants-dir` | | one file per tenant |
| `--max-lease-ttl-seconds` | 3600 | the longest |

| flag | what |
|---|---|
| `--listen` | 10 |
";
    let (stated, informal) = statements(doc);
    assert_eq!(
        stated,
        [
            Stated {
                flag: "--tenants-dir".into(),
                value: None,
                line: 7
            },
            Stated {
                flag: "--max-lease-ttl-seconds".into(),
                value: Some("3600".into()),
                line: 8
            },
            Stated {
                flag: "--max-retained-leases".into(),
                value: Some("10000".into()),
                line: 1
            },
            Stated {
                flag: "--listen".into(),
                value: Some("0.0.0.0:8080".into()),
                line: 1
            },
        ]
    );
    assert_eq!(informal, [("--banned-sites".to_owned(), 3)]);
}
