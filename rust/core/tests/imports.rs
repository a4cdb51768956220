//! The crate's file-level import graph has no circle, and the kernels never reach into the
//! loops around them.
//!
//! Each file of `src/` is a node. A file imports another when it names an item the other
//! defines, through a `use` declaration (grouped or not, renamed or not, a glob) or a path in
//! its code (`crate::kernels::prefetch(p)`, `super::tuning::kc_max::<T>()`, `child::item` in a
//! `mod.rs`). Paths are resolved as the compiler resolves them: `crate` is `lib.rs`, `super`
//! the parent module (of `a/b.rs`: `a/mod.rs` or `a.rs`; of `a/mod.rs`: the module above `a`;
//! inside an inline `mod tests { ... }`: the file itself), `self` the file's module, and a name
//! that a module re-exports (`pub use view::MatRef;` in `gemm/mod.rs`) leads on to the file
//! that defines it, so going through a facade is not an import of the facade. Declaring a
//! module (`mod loops;`) is not an import. Comments and string literals are not read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module path from the crate root (`[]` is `lib.rs`, `["gemm", "loops"]` is
/// `gemm/loops.rs`).
type ModPath = Vec<String>;

/// One source file: its module path, its text without comments or literals, and the names
/// its `use` declarations bring in (name -> absolute path of what it names).
struct File {
    module: ModPath,
    code: String,
    uses: HashMap<String, ModPath>,
}

/// The crate: every file by module path, and where each `#[macro_export]` macro is defined.
struct Crate {
    files: BTreeMap<ModPath, File>,
    exported_macros: HashMap<String, ModPath>,
}

/// `text` with comments, string literals and character literals replaced by spaces (line
/// breaks kept), so that nothing in them reads as code.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            // Block comments nest.
            let (mut depth, mut j) = (0usize, 0usize);
            loop {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
                assert!(j < rest.len(), "unterminated block comment");
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest[0] == b'r' || rest.starts_with(b"br")) && (i == 0 || !ident(b[i - 1])) && {
            let s = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[s..].iter().take_while(|&&c| c == b'#').count();
            rest.get(s + hashes) == Some(&b'"')
        } {
            // A raw string: r"..." or r#"..."# (any number of #).
            let s = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[s..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = s + hashes + 1;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .expect("unterminated raw string")
                + body
                + close.len();
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, &rest[..j + 1]);
            i += j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{1F600}'), or a lifetime / label ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..2]).ok())
                    .and_then(|s| s.chars().next())
                    .map_or(1, |c| c.len_utf8());
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("stripping keeps UTF-8")
}

/// The identifier starting at byte `i` of `s`, if one does.
fn ident_at(s: &[u8], i: usize) -> Option<&str> {
    let is = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if i >= s.len() || !(s[i].is_ascii_alphabetic() || s[i] == b'_' || s[i] == b'$') {
        return None;
    }
    let mut j = i + 1;
    while j < s.len() && is(s[j]) {
        j += 1;
    }
    std::str::from_utf8(&s[i..j]).ok()
}

/// For every byte of `code`, how many inline modules (`mod name { ... }`) enclose it.
fn inline_depths(code: &str) -> Vec<usize> {
    let b = code.as_bytes();
    let mut depth = vec![0usize; b.len()];
    // Brace depths at which an inline module's body opened.
    let mut open: Vec<usize> = Vec::new();
    let mut braces = 0usize;
    let mut pending_mod = false;
    let mut i = 0;
    while i < b.len() {
        depth[i] = open.len();
        match b[i] {
            b'{' => {
                braces += 1;
                if pending_mod {
                    open.push(braces);
                    pending_mod = false;
                }
            }
            b'}' => {
                if open.last() == Some(&braces) {
                    open.pop();
                }
                braces -= 1;
            }
            b';' => pending_mod = false,
            _ => {
                if (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
                    && ident_at(b, i) == Some("mod")
                {
                    pending_mod = true;
                    i += 3;
                    continue;
                }
            }
        }
        i += 1;
    }
    depth
}

/// The paths a `use` tree names: `crate::{a, b::{c, d as e}}` gives
/// `(a, [crate, a])`, `(c, [crate, b, c])`, `(e, [crate, b, d])`; a glob gives its module
/// under the name `*`, `self` in a group its module under the module's name.
fn use_paths(tree: &str) -> Vec<(String, Vec<String>)> {
    fn parse(s: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
        let skip = |i: &mut usize| {
            while *i < s.len() && (s[*i] as char).is_whitespace() {
                *i += 1;
            }
        };
        let mut path = prefix.to_vec();
        loop {
            skip(i);
            if *i >= s.len() {
                break;
            }
            if s[*i] == b'{' {
                *i += 1;
                loop {
                    parse(s, i, &path, out);
                    skip(i);
                    match s.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b'}') => {
                            *i += 1;
                            break;
                        }
                        _ => break,
                    }
                    skip(i);
                    if s.get(*i) == Some(&b'}') {
                        *i += 1;
                        break;
                    }
                }
                return;
            }
            if s[*i] == b'*' {
                *i += 1;
                out.push(("*".into(), path));
                return;
            }
            let Some(name) = ident_at(s, *i) else { return };
            *i += name.len();
            if name == "self" && path.len() == prefix.len() && !prefix.is_empty() {
                // `a::{self, ...}`: the module `a` itself.
                out.push((prefix[prefix.len() - 1].clone(), path));
                return;
            }
            path.push(name.to_string());
            skip(i);
            if s[*i..].starts_with(b"::") {
                *i += 2;
                continue;
            }
            let mut bound = name.to_string();
            if ident_at(s, *i) == Some("as") {
                *i += 2;
                skip(i);
                if let Some(alias) = ident_at(s, *i) {
                    *i += alias.len();
                    bound = alias.to_string();
                }
            }
            out.push((bound, path));
            return;
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    parse(tree.as_bytes(), &mut i, &[], &mut out);
    out
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut exported_macros = HashMap::new();
        let mut stack = vec![src.to_path_buf()];
        let mut paths: Vec<PathBuf> = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "rs") {
                    paths.push(p);
                }
            }
        }
        for p in paths {
            let rel = p.strip_prefix(src).unwrap();
            let mut module: ModPath = rel
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let code = strip(&std::fs::read_to_string(&p).unwrap());
            for (at, _) in code.match_indices("#[macro_export]") {
                let after = &code[at..];
                if let Some(m) = after.find("macro_rules!") {
                    let name = after[m + "macro_rules!".len()..].trim_start();
                    if let Some(name) = ident_at(name.as_bytes(), 0) {
                        exported_macros.insert(name.to_string(), module.clone());
                    }
                }
            }
            files.insert(
                module.clone(),
                File {
                    module,
                    code,
                    uses: HashMap::new(),
                },
            );
        }
        let mut krate = Crate {
            files,
            exported_macros,
        };
        // The names each file's `use` declarations bring in, as absolute paths.
        let modules: Vec<ModPath> = krate.files.keys().cloned().collect();
        for m in modules {
            let refs = krate.references(&m);
            let uses = refs
                .into_iter()
                .filter_map(|(bound, path)| bound.map(|b| (b, path)))
                .collect();
            krate.files.get_mut(&m).unwrap().uses = uses;
        }
        krate
    }

    fn is_module(&self, m: &[String]) -> bool {
        self.files.contains_key(m)
    }

    /// The absolute path of `segments` (a path as written) met in module `m` under `inline`
    /// inline modules; `None` for a path into another crate or a local item.
    fn absolute(&self, m: &ModPath, inline: usize, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?.as_str();
        let mut at: ModPath;
        let mut rest = segments;
        match first {
            "crate" | "$crate" => {
                at = vec![];
                rest = &segments[1..];
            }
            "self" => {
                at = m.clone();
                rest = &segments[1..];
            }
            "super" => {
                at = m.clone();
                let supers = segments.iter().take_while(|s| *s == "super").count();
                // The first `inline` of them leave inline modules, staying in this file.
                for _ in 0..supers.saturating_sub(inline) {
                    at.pop()?;
                }
                rest = &segments[supers..];
            }
            child => {
                let mut c = m.clone();
                c.push(child.to_string());
                if !self.is_module(&c) {
                    return None;
                }
                at = m.clone();
            }
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    /// Every `use`-declared name and path in module `m`, and every path in its code:
    /// `(Some(bound name), absolute path)` for a `use`, `(None, absolute path)` for the rest.
    fn references(&self, m: &ModPath) -> Vec<(Option<String>, ModPath)> {
        let file = &self.files[m];
        let code = file.code.as_bytes();
        let depths = inline_depths(&file.code);
        let mut out = Vec::new();
        let boundary =
            |i: usize| i == 0 || !(code[i - 1].is_ascii_alphanumeric() || code[i - 1] == b'_');
        let mut i = 0;
        while i < code.len() {
            if !boundary(i) {
                i += 1;
                continue;
            }
            let Some(word) = ident_at(code, i) else {
                i += 1;
                continue;
            };
            if word == "use" && code.get(i + 3).is_some_and(|c| c.is_ascii_whitespace()) {
                let end = file.code[i..].find(';').map_or(code.len(), |e| i + e);
                for (bound, path) in use_paths(&file.code[i + 3..end]) {
                    if let Some(abs) = self.absolute(m, depths[i], &path) {
                        out.push((Some(bound), abs));
                    }
                }
                i = end;
                continue;
            }
            // A path in code: a word followed by `::`, not itself after `::` (that is the
            // middle of a path) or `.`.
            // Nor a visibility's path (`pub(in crate::kernels)`).
            let before = file.code[..i].trim_end();
            if before.ends_with("::") || before.ends_with('.') || before.ends_with("(in") {
                i += word.len();
                continue;
            }
            let mut segments = vec![word.to_string()];
            let mut j = i + word.len();
            loop {
                let after = &file.code[j..];
                let trimmed = after.trim_start();
                if !trimmed.starts_with("::") {
                    break;
                }
                let k = j + (after.len() - trimmed.len()) + 2;
                let k = k + (file.code[k..].len() - file.code[k..].trim_start().len());
                match ident_at(code, k) {
                    Some(next) => {
                        segments.push(next.to_string());
                        j = k + next.len();
                    }
                    None => break,
                }
            }
            if segments.len() > 1 {
                if let Some(abs) = self.absolute(m, depths[i], &segments) {
                    out.push((None, abs));
                }
            }
            i = j;
        }
        out
    }

    /// The file (module) that defines what `path` names, following re-exports.
    fn resolve(&self, path: &[String], hops: usize) -> ModPath {
        let mut at: ModPath = vec![];
        for (n, seg) in path.iter().enumerate() {
            let mut next = at.clone();
            next.push(seg.clone());
            if self.is_module(&next) {
                at = next;
                continue;
            }
            if at.is_empty() && path.len() == n + 1 {
                if let Some(defined) = self.exported_macros.get(seg) {
                    return defined.clone();
                }
            }
            if let Some(target) = self.files[&at].uses.get(seg) {
                if hops < 16 && target.as_slice() != path {
                    let mut longer = target.clone();
                    longer.extend(path[n + 1..].iter().cloned());
                    return self.resolve(&longer, hops + 1);
                }
            }
            return at;
        }
        at
    }

    /// File -> the files it imports.
    fn graph(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut g = BTreeMap::new();
        for (m, file) in &self.files {
            let mut to = BTreeSet::new();
            for (_, path) in self.references(m) {
                let target = self.resolve(&path, 0);
                if &target != m {
                    to.insert(target);
                }
            }
            debug_assert_eq!(&file.module, m);
            g.insert(m.clone(), to);
        }
        g
    }
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "lib.rs".into()
    } else {
        m.join("/")
    }
}

/// The circles of `g`: its strongly connected components of more than one file (Tarjan).
fn circles(g: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        g: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: HashMap<&'a ModPath, usize>,
        low: HashMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.g[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn src_graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    Crate::read(&src).graph()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let g = src_graph();
    // The reader sees the crate: its files and the imports between them.
    let edges: usize = g.values().map(BTreeSet::len).sum();
    assert!(
        g.len() > 40 && edges > 3 * g.len(),
        "{} files, {edges} imports",
        g.len()
    );
    let loops: ModPath = vec!["gemm".into(), "loops".into()];
    assert!(g[&loops].contains(&vec!["gemm".to_string(), "pack".to_string()]));
    let found = circles(&g);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            let files: Vec<String> = c.iter().map(name).collect();
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{} -> {}", name(a), name(b)))
                })
                .collect();
            format!("[{}]\n    {}", files.join(", "), edges.join("\n    "))
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", shown.join("\n"));
}

#[test]
fn kernels_depend_on_nothing_in_gemm() {
    let g = src_graph();
    let bad: Vec<String> = g
        .iter()
        .filter(|(from, _)| from.first().is_some_and(|s| s == "kernels"))
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|t| t.first().is_some_and(|s| s == "gemm"))
                .map(move |t| format!("{} -> {}", name(from), name(t)))
        })
        .collect();
    assert!(bad.is_empty(), "kernels/ imports gemm/: {bad:?}");
}

/// The reader itself, on code written to trip it: comments, strings, raw strings, characters
/// and lifetimes hide nothing and invent nothing; grouped, nested, renamed and glob imports,
/// `self` in a group, `super::super`, inline modules, `mod.rs` and paths in code resolve to
/// the files that define what they name, through re-exports.
#[test]
fn the_reader_resolves_what_the_compiler_resolves() {
    let dir = std::env::temp_dir().join(format!("gptcore-imports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod a; pub mod b; pub mod c; mod m;\npub use c::Top;\n\
",
    );
    write(
        "a/mod.rs",
        "mod x; mod y;\npub use x::{X, X2 as Renamed};\npub use self::y::Y;\n\
         // use crate::b::Nothing;\nconst S: &str = \"crate::b::B\";\n\
         const R: &str = r#\"super::b \"quoted\" crate::b\"#;\nconst C: char = '\"';\n\
         fn f<'a>(s: &'a str) -> &'a str { s }\n",
    );
    write(
        "a/x.rs",
        "pub struct X; pub struct X2;\nuse super::super::b::{self, deep::{D}};\n",
    );
    write(
        "a/y.rs",
        "pub struct Y;\nfn g() { let _ = crate::c::helper(1); }\n\
         #[cfg(test)] mod tests { use super::*; fn t() { super::super::x::X; } }\n",
    );
    write("b/mod.rs", "pub mod deep;\npub struct B;\n");
    write("b/deep.rs", "pub struct D;\nuse crate::Top;\n");
    write(
        "c.rs",
        "pub struct Top;\npub fn helper(x: u8) -> u8 { x }\nuse crate::a::Renamed;\n\
         #[macro_export] macro_rules! err { () => { $crate::c::Top } }\n\
         pub(in crate::a) fn vis() {}\n",
    );
    write("m.rs", "fn h() { crate::err!(); let _ = crate::a::Y; }\n");
    let g = Crate::read(&dir).graph();
    std::fs::remove_dir_all(&dir).unwrap();
    let edges = |m: &str| -> Vec<String> {
        let key: ModPath = if m.is_empty() {
            vec![]
        } else {
            m.split('/').map(String::from).collect()
        };
        g[&key].iter().map(name).collect()
    };
    assert_eq!(
        edges(""),
        ["c"],
        "lib.rs re-exports c::Top; declaring modules is no import"
    );
    assert_eq!(
        edges("a"),
        ["a/x", "a/y"],
        "comments, strings and characters are skipped"
    );
    assert_eq!(
        edges("a/x"),
        ["b", "b/deep"],
        "super::super, self in a group, nesting"
    );
    assert_eq!(
        edges("a/y"),
        ["a/x", "c"],
        "a path in code; super inside an inline module"
    );
    assert_eq!(
        edges("b/deep"),
        ["c"],
        "crate::Top goes on through lib.rs's re-export"
    );
    assert_eq!(
        edges("c"),
        ["a/x"],
        "a renamed re-export leads to its definition"
    );
    assert_eq!(
        edges("m"),
        ["a/y", "c"],
        "an exported macro; a re-export in a mod.rs"
    );
    // A circle is found, and only a circle.
    let mut cyc: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let p = |s: &str| vec![s.to_string()];
    cyc.insert(p("a"), [p("b")].into());
    cyc.insert(p("b"), [p("c")].into());
    cyc.insert(p("c"), [p("a"), p("d")].into());
    cyc.insert(p("d"), BTreeSet::new());
    assert_eq!(circles(&cyc), vec![vec![p("a"), p("b"), p("c")]]);
    cyc.get_mut(&p("c")).unwrap().remove(&p("a"));
    assert!(circles(&cyc).is_empty());
}
