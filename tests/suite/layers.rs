//! The house stays layered: reads src/ as text and fails when a file
//! imports a module of a layer above its own, when files import each
//! other in a circle, when a function grows past 100 lines, or when a
//! struct of the daemon grows past 20 fields. docs/architecture.md has
//! the same layer table, with what each layer owns.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module's layer, lowest first; a module may use only
/// modules of a lower layer (and its own files).
const LAYERS: [(&str, u32); 18] = [
    ("model", 0),
    ("config", 1),
    ("array", 2),
    ("validate", 2),
    ("slurm_options", 2),
    ("gpu", 2),
    ("token", 2),
    ("sched", 3),
    ("script", 4),
    ("report", 4),
    ("proto", 5),
    ("db", 6),
    ("spool", 7),
    ("exec", 8),
    ("sim", 9),
    ("query", 9),
    ("net", 9),
    ("leader", 9),
];

/// Above every library layer: the daemon and the node agent, the
/// commands and the binaries; the commands may use the daemon and the
/// agent only to start them.
const TOP: [(&str, u32); 5] = [
    ("daemon", 11),
    ("agent", 11),
    ("web", 11),
    ("cli", 12),
    ("bin", 13),
];

const MAX_FUNCTION_LINES: usize = 100;
const MAX_DAEMON_STRUCT_FIELDS: usize = 20;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The module path of a file: src/a/b.rs and src/a/b/mod.rs are `a::b`;
/// the binaries are `bin::name`.
fn module_of(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src_dir()).unwrap();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments and string literals, which
/// hold paths that are not imports.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut previous = ' ';
        let mut kept = String::new();
        for c in line.chars() {
            if in_string {
                if c == '"' && previous != '\\' {
                    in_string = false;
                }
                previous = if previous == '\\' && c == '\\' {
                    ' '
                } else {
                    c
                };
                continue;
            }
            if c == '/' && previous == '/' {
                kept.pop();
                break;
            }
            if c == '"' && previous != '\'' {
                in_string = true;
            } else {
                kept.push(c);
            }
            previous = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.len() - 1];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use(&format!("{prefix}{p}")))
        .collect()
}

/// Every path a file names that starts at `crate`, `super` or `self`, or
/// at a child module it declares, resolved to an absolute module path.
/// Inline modules (`mod tests { .. }`) are told by rustfmt's indentation:
/// their `super` is the file's own module.
fn named_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let children: BTreeSet<String> = code
        .lines()
        .filter_map(|l| {
            let l = l
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let mut inline_mods: Vec<String> = Vec::new();
    let mut statement: Option<(String, usize)> = None;
    let mut paths = Vec::new();
    for line in code.lines() {
        let trimmed = line.trim_start();
        let depth = inline_mods.len();
        if inline_mods.last().is_some_and(|close| close == line) {
            inline_mods.pop();
        } else if trimmed.trim_start_matches("pub ").starts_with("mod ") && trimmed.ends_with('{') {
            inline_mods.push(format!("{}}}", &line[..line.len() - trimmed.len()]));
        }
        let use_start = trimmed
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        if let Some(tree) = use_start.strip_prefix("use ") {
            statement = Some((String::new(), depth));
            statement.as_mut().unwrap().0.push_str(tree);
        } else if let Some((text, _)) = statement.as_mut() {
            text.push_str(trimmed);
        } else {
            paths.extend(
                inline_paths(line, &children)
                    .into_iter()
                    .map(|p| (p, depth)),
            );
        }
        if let Some((text, depth)) = statement.take_if(|(text, _)| text.contains(';')) {
            let tree = text.split(';').next().unwrap();
            paths.extend(expand_use(tree).into_iter().map(|p| (p, depth)));
        }
    }
    paths
        .into_iter()
        .filter_map(|(p, depth)| resolve(module, depth, &children, &p))
        .collect()
}

/// Paths used in the code without a `use`: `crate::a::b`, `super::x`,
/// `child::f`.
fn inline_paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < bytes.len() && (is_ident(bytes[end]) || code[end..].starts_with("::")) {
            end += if bytes[end] == b':' { 2 } else { 1 };
        }
        let path = &code[i..end];
        let head = path.split("::").next().unwrap();
        if path.contains("::")
            && (["crate", "super", "self"].contains(&head) || children.contains(head))
        {
            found.push(path.to_string());
        }
        i = end.max(i + 1);
    }
    found
}

fn resolve(
    module: &[String],
    mut depth: usize,
    children: &BTreeSet<String>,
    path: &str,
) -> Option<Vec<String>> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base = module.to_vec();
    match *parts.first()? {
        "crate" => {
            parts.remove(0);
            base.clear();
        }
        "super" | "self" => {
            while let Some(head) = parts.first().filter(|h| **h == "super" || **h == "self") {
                if *head == "super" {
                    if depth > 0 {
                        depth -= 1;
                    } else {
                        base.pop();
                    }
                }
                parts.remove(0);
            }
        }
        head if children.contains(head) && depth == 0 => {}
        _ => return None,
    }
    base.extend(parts.iter().map(|p| p.to_string()));
    Some(base)
}

struct Graph {
    /// file -> files it imports
    edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
    modules: BTreeMap<Vec<String>, PathBuf>,
}

fn graph() -> Graph {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut edges = BTreeMap::new();
    // lib.rs only declares the modules.
    for file in files.iter().filter(|f| !f.ends_with("lib.rs")) {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let module = module_of(file);
        let mut targets = BTreeSet::new();
        for path in named_paths(&module, &code) {
            // The longest prefix that is a file of its own.
            let target = (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
            if let Some(target) = target.filter(|t| *t != file && !t.ends_with("lib.rs")) {
                targets.insert(target.clone());
            }
        }
        edges.insert(file.clone(), targets);
    }
    Graph { edges, modules }
}

fn layer_of(file: &Path) -> (String, u32) {
    let module = module_of(file);
    let top = module.first().cloned().unwrap_or_default();
    let layer = LAYERS
        .iter()
        .chain(TOP.iter())
        .find(|(name, _)| *name == top)
        .map(|(_, layer)| *layer)
        .unwrap_or_else(|| {
            panic!(
                "{}: module `{top}` is in no layer of tests/suite/layers.rs",
                file.display()
            )
        });
    (top, layer)
}

fn short(file: &Path) -> String {
    file.strip_prefix(src_dir()).unwrap().display().to_string()
}

#[test]
fn no_file_imports_a_layer_above_its_own() {
    let graph = graph();
    let mut wrong = Vec::new();
    for (file, targets) in &graph.edges {
        let (top, layer) = layer_of(file);
        for target in targets {
            let (target_top, target_layer) = layer_of(target);
            let allowed = target_top == top
                || target_layer < layer
                // The commands start the daemon; nothing else of it.
                || (top == "bin" && target_top == "cli");
            if !allowed {
                wrong.push(format!(
                    "{} (layer {layer}) imports {} (layer {target_layer})",
                    short(file),
                    short(target)
                ));
            }
        }
    }
    assert!(graph.modules.len() > 50, "src/ was not read");
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// Tarjan's strongly connected components: each with more than one file
/// is a circle of imports.
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, (usize, usize)>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.on_stack.contains(w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let graph = graph();
    let found: Vec<String> = circles(&graph.edges)
        .iter()
        .map(|c| c.iter().map(|f| short(f)).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// `(file, line, name, length)` of every function body in the files.
fn function_lengths(files: &[PathBuf]) -> Vec<(PathBuf, usize, String, usize)> {
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            let signature = [
                "pub fn ",
                "pub(crate) fn ",
                "pub(super) fn ",
                "fn ",
                "const fn ",
                "pub const fn ",
            ]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p));
            let Some(signature) = signature else { continue };
            if line.trim_end().ends_with(';') || line.trim_end().ends_with('}') {
                continue;
            }
            let name: String = signature
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{indent}}}");
            let end = lines[start..]
                .iter()
                .position(|l| *l == close)
                .map_or(lines.len(), |n| start + n);
            found.push((file.clone(), start + 1, name, end - start + 1));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_100_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let found = function_lengths(&files);
    assert!(
        found.len() > 1_000,
        "functions were not read: {}",
        found.len()
    );
    let wrong: Vec<String> = found
        .into_iter()
        .filter(|(_, _, _, length)| *length > MAX_FUNCTION_LINES)
        .map(|(file, line, name, length)| {
            let file = file.strip_prefix(root).unwrap().display().to_string();
            format!("{file}:{line}: {name}, {length} lines")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        wrong.join("\n")
    );
}

/// Library errors are typed (thiserror enums); text is made at the
/// command line. The binaries, which print and exit, may use text.
#[test]
fn no_library_function_returns_a_string_error() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut wrong = Vec::new();
    for file in files
        .iter()
        .filter(|f| module_of(f).first().is_none_or(|m| m != "bin"))
    {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
        for (at, _) in flat.match_indices("Result<") {
            let rest = &flat[at + "Result<".len()..];
            // The error type is what follows the last top-level comma.
            let (mut depth, mut comma, mut end) = (0i32, None, None);
            for (i, c) in rest.char_indices() {
                match c {
                    '<' | '(' | '[' => depth += 1,
                    ')' | ']' => depth -= 1,
                    '>' if depth == 0 => {
                        end = Some(i);
                        break;
                    }
                    '>' => depth -= 1,
                    ',' if depth == 0 => comma = Some(i),
                    _ => {}
                }
            }
            if let (Some(comma), Some(end)) = (comma, end) {
                if rest[comma + 1..end].trim() == "String" {
                    wrong.push(format!("{}: Result<{}>", short(file), &rest[..end]));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "library functions with text errors:\n{}",
        wrong.join("\n")
    );
}

/// `(file, struct, fields)` of the structs with named fields in `files`.
fn struct_widths(files: &[PathBuf]) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let declared = without_visibility(trimmed).strip_prefix("struct ");
            let Some(declared) = declared.filter(|_| trimmed.ends_with('{')) else {
                continue;
            };
            let name: String = declared
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{}}}", &line[..line.len() - trimmed.len()]);
            let fields = lines[start + 1..]
                .iter()
                .take_while(|l| **l != close)
                .filter(|l| {
                    let field = without_visibility(l.trim_start());
                    field.split_once(':').is_some_and(|(name, _)| {
                        !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    })
                })
                .count();
            found.push((short(file), name, fields));
        }
    }
    found
}

fn without_visibility(text: &str) -> &str {
    ["pub(crate) ", "pub(super) ", "pub "]
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .unwrap_or(text)
}

#[test]
fn no_daemon_struct_has_more_than_20_fields() {
    let mut files = Vec::new();
    rust_files(&src_dir().join("daemon"), &mut files);
    let found = struct_widths(&files);
    assert!(
        found.iter().any(|(_, name, _)| name == "Daemon"),
        "the daemon's structs were not read"
    );
    let wrong: Vec<String> = found
        .into_iter()
        .filter(|(_, _, fields)| *fields > MAX_DAEMON_STRUCT_FIELDS)
        .map(|(file, name, fields)| format!("{file}: {name}, {fields} fields"))
        .collect();
    assert!(
        wrong.is_empty(),
        "daemon structs over {MAX_DAEMON_STRUCT_FIELDS} fields:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_circles_and_lengths() {
    // The checks above can fail: a circle, a layer breach and a long
    // function are seen when they exist.
    let a = PathBuf::from("a");
    let b = PathBuf::from("b");
    let edges = BTreeMap::from([
        (a.clone(), BTreeSet::from([b.clone()])),
        (b.clone(), BTreeSet::from([a.clone()])),
    ]);
    assert_eq!(circles(&edges).len(), 1);
    let code = code_of(
        "use crate::model::job::{JobId, state::{A, B}};\nfn f() {\n    super::x::y(); v1::go(); \"crate::no::path\";\n}\nmod v1;\nmod tests {\n    use super::Here;\n}\n",
    );
    let module = vec!["exec".to_string(), "cgroup".to_string()];
    let paths = named_paths(&module, &code);
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert!(
        joined.contains(&"model::job::JobId".to_string()),
        "{joined:?}"
    );
    assert!(
        joined.contains(&"model::job::state::B".to_string()),
        "{joined:?}"
    );
    assert!(joined.contains(&"exec::x::y".to_string()), "{joined:?}");
    assert!(
        joined.contains(&"exec::cgroup::v1::go".to_string()),
        "{joined:?}"
    );
    assert!(!joined.iter().any(|p| p.contains("no")), "{joined:?}");
    assert!(
        joined.contains(&"exec::cgroup::Here".to_string()),
        "{joined:?}"
    );
}
