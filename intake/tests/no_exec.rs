//! The property of intake: nothing reachable from stages 1-5 can spawn a process or load code.
//!
//! The walker starts at intake's `src/lib.rs` and every crate in its normal (not dev, not build) dependency
//! graph as `cargo metadata` resolves it for this platform, follows `mod` declarations (also inside macro
//! invocations such as `cfg_if!`, and `#[path]`) and `include!` (a literal path, or a file in the
//! package's build-script `OUT_DIR`), and parses each file with `syn`. Items whose `#[cfg]` is
//! false for this build (the package's resolved features, this target, `test` and `doc` off) are not
//! reachable and are skipped; an unknown cfg counts as possibly true. Comments, doc comments and string
//! literals are not code. Foreign declarations (`extern "C" { fn fork(); }`, as libc has) are bindings,
//! not calls; using them is what is flagged. Build scripts, tests, benches and examples are not reached
//! through `mod` from a library root, so they are not scanned.
//!
//! Flagged: `std::process::Command` (however imported: path, `use` group, glob) and `CommandExt`;
//! `Command::new` and `process::Command` from any crate (tokio's too); the libc/nix
//! spawners (`fork`, `vfork`, `exec*`, `posix_spawn*`, `system`, `popen`) used as a path segment or called
//! as a free function; `dlopen`/`dlmopen`; the `libloading` crate; raw `SYS_`/`__NR_` fork, clone and
//! execve numbers used (not defined). No crate is allow-listed.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use syn::visit_mut::VisitMut;

/// The `std::process` items that start processes; the rest (`Child`, `Stdio`, `Output`, `exit`, `id`...)
/// are only handed out by `Command` or do not spawn, so naming them is harmless once `Command` is flagged.
const SPAWNING_STD_PROCESS: &[&str] = &["Command", "CommandExt"];
const EXEC_FNS: &[&str] = &[
    "fork",
    "vfork",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "execl",
    "execle",
    "execlp",
    "fexecve",
    "execveat",
    "posix_spawn",
    "posix_spawnp",
    "system",
    "popen",
];
/// cfg names the compiler itself may set; any other name can only come from a build script or RUSTFLAGS.
const BUILTIN_CFGS: &[&str] = &[
    "debug_assertions",
    "overflow_checks",
    "panic",
    "proc_macro",
    "relocation_model",
    "sanitize",
    "target_abi",
    "target_arch",
    "target_endian",
    "target_env",
    "target_family",
    "target_feature",
    "target_has_atomic",
    "target_has_atomic_equal_alignment",
    "target_has_atomic_load_store",
    "target_os",
    "target_pointer_width",
    "target_thread_local",
    "target_vendor",
    "ub_checks",
    "fmt_debug",
    "contract_checks",
    "emscripten_wasm_eh",
    "rustfmt",
    "clippy",
];
const LOADERS: &[&str] = &["dlopen", "dlmopen"];
const RAW_SYSCALLS: &[&str] = &["fork", "vfork", "clone", "clone3", "execve", "execveat"];

/// One reachable use of something that spawns or loads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Hit {
    krate: String,
    file: PathBuf,
    line: usize,
    what: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    True,
    False,
    Unknown,
}

struct Walker {
    krate: String,
    /// The directory of the crate root file: `mod x;` in a macro body resolves here when the body is
    /// expanded at the root (serde's `crate_root!`, libc's `prelude!`).
    root_dir: PathBuf,
    features: HashSet<String>,
    /// `cfg`s the package's build script set in this build (`name` or `name="value"`), read from its
    /// output under the target directory; `None` when that output could not be found.
    build_cfgs: Option<HashSet<String>>,
    /// The package name and target directory, to find what `include!(concat!(env!("OUT_DIR"), ..))` names.
    package: String,
    target_dir: Option<PathBuf>,
    hits: Vec<Hit>,
    files: BTreeSet<PathBuf>,
    unparsed: Vec<PathBuf>,
    missing: Vec<String>,
}

impl Walker {
    fn new(krate: &str, features: HashSet<String>, root_dir: &Path) -> Walker {
        Walker {
            krate: krate.to_string(),
            root_dir: root_dir.to_path_buf(),
            features,
            build_cfgs: None,
            package: String::new(),
            target_dir: None,
            hits: Vec::new(),
            files: BTreeSet::new(),
            unparsed: Vec::new(),
            missing: Vec::new(),
        }
    }

    // ---- cfg evaluation ---------------------------------------------------------------------------

    fn eval_cfg(&self, tokens: &TokenStream) -> Tri {
        let toks: Vec<TokenTree> = tokens.clone().into_iter().collect();
        self.eval_pred(&toks)
    }

    fn eval_pred(&self, toks: &[TokenTree]) -> Tri {
        let Some(TokenTree::Ident(name)) = toks.first() else {
            return Tri::Unknown;
        };
        let name = name.to_string();
        match toks.get(1) {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
                let args = split_commas(g.stream());
                let vals: Vec<Tri> = args.iter().map(|a| self.eval_pred(a)).collect();
                match name.as_str() {
                    "all" => {
                        if vals.contains(&Tri::False) {
                            Tri::False
                        } else if vals.iter().all(|v| *v == Tri::True) {
                            Tri::True
                        } else {
                            Tri::Unknown
                        }
                    }
                    "any" => {
                        if vals.contains(&Tri::True) {
                            Tri::True
                        } else if vals.iter().all(|v| *v == Tri::False) {
                            Tri::False
                        } else {
                            Tri::Unknown
                        }
                    }
                    "not" => match vals.first() {
                        Some(Tri::True) => Tri::False,
                        Some(Tri::False) => Tri::True,
                        _ => Tri::Unknown,
                    },
                    _ => Tri::Unknown,
                }
            }
            Some(TokenTree::Punct(p)) if p.as_char() == '=' => {
                let value = match toks.get(2) {
                    Some(TokenTree::Literal(l)) => l.to_string().trim_matches('"').to_string(),
                    _ => return Tri::Unknown,
                };
                let known = |v: &str| if value == v { Tri::True } else { Tri::False };
                match name.as_str() {
                    "feature" => {
                        if self.features.contains(&value) {
                            Tri::True
                        } else {
                            Tri::False
                        }
                    }
                    "target_os" => known(std::env::consts::OS),
                    "target_family" => known(std::env::consts::FAMILY),
                    "target_arch" => known(std::env::consts::ARCH),
                    "target_env" if cfg!(target_env = "gnu") => known("gnu"),
                    "target_env" if cfg!(target_env = "musl") => known("musl"),
                    "target_pointer_width" => known(if cfg!(target_pointer_width = "64") {
                        "64"
                    } else {
                        "32"
                    }),
                    "target_endian" => known(if cfg!(target_endian = "little") {
                        "little"
                    } else {
                        "big"
                    }),
                    n if BUILTIN_CFGS.contains(&n) => Tri::Unknown,
                    n => self.custom_cfg(&format!("{n}=\"{value}\"")),
                }
            }
            None => match name.as_str() {
                "test" | "doc" | "doctest" | "docsrs" | "miri" | "fuzzing" => Tri::False,
                "unix" => {
                    if cfg!(unix) {
                        Tri::True
                    } else {
                        Tri::False
                    }
                }
                "windows" => {
                    if cfg!(windows) {
                        Tri::True
                    } else {
                        Tri::False
                    }
                }
                n if BUILTIN_CFGS.contains(&n) => Tri::Unknown,
                n => self.custom_cfg(n),
            },
            _ => Tri::Unknown,
        }
    }

    /// A cfg no compiler sets: true when the build script set it, false when it did not (rustc treats an
    /// unset cfg as false), unknown when the build script's output is not available or RUSTFLAGS may set it.
    fn custom_cfg(&self, key: &str) -> Tri {
        let flags = std::env::var("RUSTFLAGS").unwrap_or_default()
            + &std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
        if flags.contains("--cfg") {
            return Tri::Unknown;
        }
        match &self.build_cfgs {
            Some(set) if set.contains(key) => Tri::True,
            Some(_) => Tri::False,
            None => Tri::Unknown,
        }
    }

    /// False only when some `#[cfg(..)]` on the item is false for this build.
    fn enabled(&self, attrs: &[syn::Attribute]) -> bool {
        for a in attrs {
            if a.path().is_ident("cfg") {
                if let syn::Meta::List(l) = &a.meta {
                    if self.eval_cfg(&l.tokens) == Tri::False {
                        return false;
                    }
                }
            }
        }
        true
    }

    // ---- files and modules -------------------------------------------------------------------------

    /// Scans a module file; `child_dir` is where its `mod x;` children live.
    fn scan_file(&mut self, file: &Path, child_dir: &Path) {
        let file = file.to_path_buf();
        if !self.files.insert(file.clone()) {
            return;
        }
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                self.missing.push(format!("{}: {e}", file.display()));
                return;
            }
        };
        match syn::parse_file(&text) {
            Ok(f) => {
                if !self.enabled(&f.attrs) {
                    return;
                }
                for item in &f.items {
                    self.item(item, &file, child_dir, false);
                }
            }
            Err(_) => {
                // Not parseable by syn: scan every token of the file (no cfg evaluation: conservative).
                self.unparsed.push(file.clone());
                if let Ok(ts) = text.parse::<TokenStream>() {
                    self.tokens(ts, &file, child_dir, true);
                }
            }
        }
    }

    /// `inline`: the `mod` sits inside an inline `mod m { .. }`, where `#[path]` is relative to
    /// `child_dir` rather than to the file's directory (the Reference's rule).
    fn child_module(
        &mut self,
        name: &str,
        path_attrs: Vec<String>,
        file: &Path,
        child_dir: &Path,
        inline: bool,
    ) {
        if !path_attrs.is_empty() {
            for p in path_attrs {
                let base = if inline {
                    child_dir
                } else {
                    file.parent().unwrap_or(Path::new("."))
                };
                let target = base.join(p);
                let dir = target.parent().map(Path::to_path_buf).unwrap_or_default();
                if target.exists() {
                    self.scan_file(&target, &dir);
                } else {
                    self.missing.push(format!(
                        "mod {name} at {} (from {})",
                        target.display(),
                        file.display()
                    ));
                }
            }
            return;
        }
        let root = self.root_dir.clone();
        for dir in [child_dir, root.as_path()] {
            let a = dir.join(format!("{name}.rs"));
            let b = dir.join(name).join("mod.rs");
            if a.exists() {
                self.scan_file(&a, &dir.join(name));
                return;
            } else if b.exists() {
                self.scan_file(&b, &dir.join(name));
                return;
            }
        }
        self.missing
            .push(format!("mod {name} (from {})", file.display()));
    }

    /// The module paths `#[path = ".."]` and `#[cfg_attr(pred, path = "..")]` (pred not false) name.
    fn path_attrs(&self, attrs: &[syn::Attribute]) -> Vec<String> {
        let mut out = Vec::new();
        for a in attrs {
            if a.path().is_ident("path") {
                if let syn::Meta::NameValue(nv) = &a.meta {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                    {
                        out.push(s.value());
                    }
                }
            } else if a.path().is_ident("cfg_attr") {
                if let syn::Meta::List(l) = &a.meta {
                    let parts = split_commas(l.tokens.clone());
                    if let Some((pred, rest)) = parts.split_first() {
                        if self.eval_pred(pred) == Tri::False {
                            continue;
                        }
                        for r in rest {
                            if let (Some(TokenTree::Ident(i)), Some(TokenTree::Literal(lit))) =
                                (r.first(), r.get(2))
                            {
                                if i == "path" {
                                    out.push(lit.to_string().trim_matches('"').to_string());
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn item(&mut self, item: &syn::Item, file: &Path, child_dir: &Path, inline: bool) {
        use syn::Item;
        let attrs = item_attrs(item);
        if !self.enabled(attrs) {
            return;
        }
        match item {
            Item::Mod(m) => {
                let name = m.ident.to_string();
                match &m.content {
                    Some((_, items)) => {
                        let dir = child_dir.join(&name);
                        for i in items {
                            self.item(i, file, &dir, true);
                        }
                    }
                    None => {
                        let paths = self.path_attrs(&m.attrs);
                        self.child_module(&name, paths, file, child_dir, inline);
                    }
                }
            }
            // Declarations of foreign functions are bindings, not uses.
            Item::ForeignMod(_) => {}
            Item::Macro(m) => self.tokens(m.mac.to_token_stream(), file, child_dir, true),
            other => {
                let mut pruned = other.clone();
                Pruner(self).visit_item_mut(&mut pruned);
                self.tokens(pruned.to_token_stream(), file, child_dir, false);
            }
        }
    }

    /// `include!("path")` (relative to the including file) and `include!(concat!(env!("OUT_DIR"), "/f"))`
    /// (every build-script output directory of this package) are scanned as part of the including module.
    fn include(&mut self, flat: &[Tok], open: usize, file: &Path, child_dir: &Path) {
        let mut depth = 0;
        let mut lits = Vec::new();
        for t in &flat[open..] {
            match t {
                Tok::Open(_) => depth += 1,
                Tok::Close => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Lit(l) => lits.push(l.trim_matches('"').to_string()),
                _ => {}
            }
        }
        match lits.as_slice() {
            [one] => {
                let target = file.parent().unwrap_or(Path::new(".")).join(one);
                if target.exists() {
                    self.scan_file(&target, child_dir);
                } else {
                    self.missing
                        .push(format!("include!({one}) (from {})", file.display()));
                }
            }
            [var, rest] if var == "OUT_DIR" => {
                let found = self.out_dir_files(rest.trim_start_matches('/'));
                if found.is_empty() {
                    self.missing.push(format!(
                        "include! of OUT_DIR/{rest} (from {})",
                        file.display()
                    ));
                }
                for f in found {
                    self.scan_file(&f, child_dir);
                }
            }
            other => self.missing.push(format!(
                "include! of {other:?}, not resolvable (from {})",
                file.display()
            )),
        }
    }

    fn out_dir_files(&self, rel: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Some(td) = &self.target_dir else {
            return out;
        };
        let Ok(profiles) = std::fs::read_dir(td) else {
            return out;
        };
        for profile in profiles.flatten() {
            let Ok(rd) = std::fs::read_dir(profile.path().join("build")) else {
                continue;
            };
            for d in rd.flatten() {
                let name = d.file_name().to_string_lossy().into_owned();
                let Some(hash) = name
                    .strip_prefix(&self.package)
                    .and_then(|r| r.strip_prefix('-'))
                else {
                    continue;
                };
                if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    let f = d.path().join("out").join(rel);
                    if f.exists() {
                        out.push(f);
                    }
                }
            }
        }
        out
    }

    // ---- token rules -------------------------------------------------------------------------------

    fn hit(&mut self, file: &Path, line: usize, what: String) {
        self.hits.push(Hit {
            krate: self.krate.clone(),
            file: file.to_path_buf(),
            line,
            what,
        });
    }

    /// Applies the rules to a token stream; with `follow_mods`, `mod x;` inside it (macro bodies) is followed.
    fn tokens(&mut self, ts: TokenStream, file: &Path, child_dir: &Path, follow_mods: bool) {
        let flat = flatten(ts);
        for (i, t) in flat.iter().enumerate() {
            let Tok::Ident(name, line) = t else { continue };
            let prev = i.checked_sub(1).map(|j| &flat[j]);
            let prev2 = i.checked_sub(2).map(|j| &flat[j]);
            let next = flat.get(i + 1);
            let next2 = flat.get(i + 2);
            let after_sep = matches!(prev, Some(Tok::PathSep));
            let defined = matches!(prev, Some(Tok::Ident(k, _)) if k == "fn" || k == "const" || k == "static" || k == "struct" || k == "enum" || k == "mod");
            let method = matches!(prev, Some(Tok::Punct('.')));
            let called = matches!(next, Some(Tok::Open(Delimiter::Parenthesis)));
            let n = name.as_str();

            if n == "libloading" {
                self.hit(file, *line, "the libloading crate (loads code)".into());
            }
            if LOADERS.contains(&n) && !defined && !method && (after_sep || called) {
                self.hit(file, *line, format!("{n} (loads code)"));
            }
            if EXEC_FNS.contains(&n) && !defined && !method && (after_sep || called) {
                self.hit(file, *line, format!("{n} (spawns a process)"));
            }
            if n == "CommandExt" {
                self.hit(file, *line, "CommandExt (exec/pre_exec)".into());
            }
            if n == "Command" {
                let qualified =
                    after_sep && matches!(prev2, Some(Tok::Ident(p, _)) if p == "process");
                let new = matches!(next, Some(Tok::PathSep))
                    && matches!(next2, Some(Tok::Ident(x, _)) if x == "new");
                if qualified || new {
                    self.hit(file, *line, "Command (spawns a process)".into());
                }
            }
            if n == "process" && after_sep && matches!(prev2, Some(Tok::Ident(p, _)) if p == "std")
            {
                // std::process::<item>, std::process::{a, b}, std::process::*
                match (next, next2) {
                    (Some(Tok::PathSep), Some(Tok::Ident(x, _)))
                        if SPAWNING_STD_PROCESS.contains(&x.as_str()) =>
                    {
                        self.hit(file, *line, format!("std::process::{x}"));
                    }
                    (Some(Tok::PathSep), Some(Tok::Punct('*'))) => {
                        self.hit(file, *line, "std::process::*".into());
                    }
                    (Some(Tok::PathSep), Some(Tok::Open(Delimiter::Brace))) => {
                        let inner = group_idents(&flat, i + 2);
                        for x in inner {
                            if SPAWNING_STD_PROCESS.contains(&x.as_str()) {
                                self.hit(file, *line, format!("std::process::{{{x}}}"));
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Some(sys) = n.strip_prefix("SYS_").or_else(|| n.strip_prefix("__NR_")) {
                if RAW_SYSCALLS.contains(&sys) && !defined {
                    self.hit(file, *line, format!("raw syscall number {n}"));
                }
            }
            if n == "include"
                && matches!(next, Some(Tok::Punct('!')))
                && matches!(next2, Some(Tok::Open(Delimiter::Parenthesis)))
            {
                self.include(&flat, i + 2, file, child_dir);
            }
            if follow_mods && n == "mod" {
                if let (Some(Tok::Ident(m, _)), Some(Tok::Punct(';'))) = (next, next2) {
                    let path_attr = path_attr_before(&flat, i).into_iter().collect();
                    let m = m.clone();
                    self.child_module(&m, path_attr, file, child_dir, false);
                }
            }
        }
    }
}

/// Removes from an item everything whose `#[cfg]` is false: statements, nested items, match arms,
/// struct-literal fields, expressions carrying attributes.
struct Pruner<'a>(&'a Walker);

fn expr_attrs(e: &syn::Expr) -> &[syn::Attribute] {
    use syn::Expr as E;
    match e {
        E::Array(x) => &x.attrs,
        E::Assign(x) => &x.attrs,
        E::Async(x) => &x.attrs,
        E::Await(x) => &x.attrs,
        E::Binary(x) => &x.attrs,
        E::Block(x) => &x.attrs,
        E::Break(x) => &x.attrs,
        E::Call(x) => &x.attrs,
        E::Cast(x) => &x.attrs,
        E::Closure(x) => &x.attrs,
        E::Const(x) => &x.attrs,
        E::Continue(x) => &x.attrs,
        E::Field(x) => &x.attrs,
        E::ForLoop(x) => &x.attrs,
        E::Group(x) => &x.attrs,
        E::If(x) => &x.attrs,
        E::Index(x) => &x.attrs,
        E::Let(x) => &x.attrs,
        E::Lit(x) => &x.attrs,
        E::Loop(x) => &x.attrs,
        E::Macro(x) => &x.attrs,
        E::Match(x) => &x.attrs,
        E::MethodCall(x) => &x.attrs,
        E::Paren(x) => &x.attrs,
        E::Path(x) => &x.attrs,
        E::Range(x) => &x.attrs,
        E::Reference(x) => &x.attrs,
        E::Repeat(x) => &x.attrs,
        E::Return(x) => &x.attrs,
        E::Struct(x) => &x.attrs,
        E::Try(x) => &x.attrs,
        E::TryBlock(x) => &x.attrs,
        E::Tuple(x) => &x.attrs,
        E::Unary(x) => &x.attrs,
        E::Unsafe(x) => &x.attrs,
        E::While(x) => &x.attrs,
        E::Yield(x) => &x.attrs,
        _ => &[],
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl VisitMut for Pruner<'_> {
    fn visit_block_mut(&mut self, b: &mut syn::Block) {
        b.stmts.retain(|st| {
            let attrs: &[syn::Attribute] = match st {
                syn::Stmt::Local(l) => &l.attrs,
                syn::Stmt::Item(i) => item_attrs(i),
                syn::Stmt::Expr(e, _) => expr_attrs(e),
                syn::Stmt::Macro(m) => &m.attrs,
            };
            self.0.enabled(attrs)
        });
        // Foreign declarations nested in a body are bindings too.
        b.stmts
            .retain(|st| !matches!(st, syn::Stmt::Item(syn::Item::ForeignMod(_))));
        syn::visit_mut::visit_block_mut(self, b);
    }

    fn visit_expr_match_mut(&mut self, m: &mut syn::ExprMatch) {
        m.arms.retain(|a| self.0.enabled(&a.attrs));
        syn::visit_mut::visit_expr_match_mut(self, m);
    }

    fn visit_expr_struct_mut(&mut self, e: &mut syn::ExprStruct) {
        let kept: syn::punctuated::Punctuated<syn::FieldValue, syn::Token![,]> = e
            .fields
            .clone()
            .into_iter()
            .filter(|f| self.0.enabled(&f.attrs))
            .collect();
        e.fields = kept;
        syn::visit_mut::visit_expr_struct_mut(self, e);
    }

    fn visit_item_impl_mut(&mut self, i: &mut syn::ItemImpl) {
        i.items.retain(|ii| {
            let a: &[syn::Attribute] = match ii {
                syn::ImplItem::Const(x) => &x.attrs,
                syn::ImplItem::Fn(x) => &x.attrs,
                syn::ImplItem::Type(x) => &x.attrs,
                syn::ImplItem::Macro(x) => &x.attrs,
                _ => &[],
            };
            self.0.enabled(a)
        });
        syn::visit_mut::visit_item_impl_mut(self, i);
    }

    fn visit_item_trait_mut(&mut self, t: &mut syn::ItemTrait) {
        t.items.retain(|ti| {
            let a: &[syn::Attribute] = match ti {
                syn::TraitItem::Const(x) => &x.attrs,
                syn::TraitItem::Fn(x) => &x.attrs,
                syn::TraitItem::Type(x) => &x.attrs,
                syn::TraitItem::Macro(x) => &x.attrs,
                _ => &[],
            };
            self.0.enabled(a)
        });
        syn::visit_mut::visit_item_trait_mut(self, t);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String, usize),
    PathSep,
    Punct(char),
    Lit(String),
    Open(Delimiter),
    Close,
}

fn flatten(ts: TokenStream) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut pending_colon = false;
    fn go(ts: TokenStream, out: &mut Vec<Tok>, pending_colon: &mut bool) {
        for t in ts {
            match t {
                TokenTree::Punct(p) if p.as_char() == ':' => {
                    if *pending_colon {
                        *pending_colon = false;
                        out.push(Tok::PathSep);
                    } else if p.spacing() == Spacing::Joint {
                        *pending_colon = true;
                    } else {
                        out.push(Tok::Punct(':'));
                    }
                }
                other => {
                    if *pending_colon {
                        *pending_colon = false;
                        out.push(Tok::Punct(':'));
                    }
                    match other {
                        TokenTree::Ident(i) => {
                            let s = i.to_string();
                            let s = s.strip_prefix("r#").map(str::to_string).unwrap_or(s);
                            out.push(Tok::Ident(s, i.span().start().line));
                        }
                        TokenTree::Punct(p) => out.push(Tok::Punct(p.as_char())),
                        TokenTree::Literal(l) => out.push(Tok::Lit(l.to_string())),
                        TokenTree::Group(g) => {
                            out.push(Tok::Open(g.delimiter()));
                            go(g.stream(), out, pending_colon);
                            out.push(Tok::Close);
                        }
                    }
                }
            }
        }
    }
    go(ts, &mut out, &mut pending_colon);
    out
}

/// Identifiers directly inside the group opened at `open` (for `use a::{b, c}`), nested groups included.
fn group_idents(flat: &[Tok], open: usize) -> Vec<String> {
    let mut depth = 0;
    let mut out = Vec::new();
    for t in &flat[open..] {
        match t {
            Tok::Open(_) => depth += 1,
            Tok::Close => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Tok::Ident(s, _) if s != "as" => {
                // `Command as Cmd`: the alias is not an item of std::process, but flagging it is harmless.
                out.push(s.clone());
            }
            _ => {}
        }
    }
    out
}

/// `#[path = "x"]` right before `mod` at `i`, in a flattened macro body.
fn path_attr_before(flat: &[Tok], i: usize) -> Option<String> {
    // # [ path = "x" ] mod
    if i >= 6 {
        if let (
            Tok::Punct('#'),
            Tok::Open(Delimiter::Bracket),
            Tok::Ident(p, _),
            Tok::Punct('='),
            Tok::Lit(l),
            Tok::Close,
        ) = (
            &flat[i - 6],
            &flat[i - 5],
            &flat[i - 4],
            &flat[i - 3],
            &flat[i - 2],
            &flat[i - 1],
        ) {
            if p == "path" {
                return Some(l.trim_matches('"').to_string());
            }
        }
    }
    None
}

fn split_commas(ts: TokenStream) -> Vec<Vec<TokenTree>> {
    let mut out = vec![Vec::new()];
    for t in ts {
        match &t {
            TokenTree::Punct(p) if p.as_char() == ',' => out.push(Vec::new()),
            _ => out.last_mut().expect("non-empty").push(t),
        }
    }
    out.retain(|v| !v.is_empty());
    out
}

// ---- cargo metadata ---------------------------------------------------------------------------------

struct Scan {
    hits: Vec<Hit>,
    crates: Vec<String>,
    files: BTreeSet<PathBuf>,
    unparsed: Vec<PathBuf>,
    missing: Vec<String>,
}

fn host_triple() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = Path::new(&cargo).with_file_name("rustc");
    let rustc = if rustc.exists() {
        rustc
    } else {
        PathBuf::from("rustc")
    };
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host")
}

/// Walks the package `root_name` of the workspace at `manifest` and its normal dependency graph.
fn scan_package(manifest: &Path, root_name: &str) -> Scan {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let run = |offline: bool| {
        let mut c = Command::new(&cargo);
        c.args(["metadata", "--format-version", "1", "--filter-platform"])
            .arg(host_triple())
            .arg("--manifest-path")
            .arg(manifest);
        if offline {
            c.arg("--offline");
        }
        c.output().expect("cargo metadata runs")
    };
    let mut out = run(true);
    if !out.status.success() {
        out = run(false);
    }
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let target_dir = PathBuf::from(meta["target_directory"].as_str().expect("target_directory"));
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve nodes");
    let root_id = packages
        .iter()
        .find(|p| p["name"] == root_name && p["source"].is_null())
        .and_then(|p| p["id"].as_str())
        .expect("root package in metadata")
        .to_string();

    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([root_id]);
    let mut scan = Scan {
        hits: Vec::new(),
        crates: Vec::new(),
        files: BTreeSet::new(),
        unparsed: Vec::new(),
        missing: Vec::new(),
    };
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let node = nodes
            .iter()
            .find(|n| n["id"] == id.as_str())
            .expect("node for package");
        let pkg = packages
            .iter()
            .find(|p| p["id"] == id.as_str())
            .expect("package");
        let features: HashSet<String> = node["features"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let name = format!(
            "{} {}",
            pkg["name"].as_str().unwrap_or("?"),
            pkg["version"].as_str().unwrap_or("?")
        );
        let lib = pkg["targets"].as_array().and_then(|ts| {
            ts.iter().find(|t| {
                t["kind"].as_array().is_some_and(|k| {
                    k.iter().any(|k| {
                        k == "lib"
                            || k == "rlib"
                            || k == "proc-macro"
                            || k == "dylib"
                            || k == "cdylib"
                    })
                })
            })
        });
        if let Some(lib) = lib {
            let src = PathBuf::from(lib["src_path"].as_str().expect("src_path"));
            let dir = src.parent().expect("src dir").to_path_buf();
            let mut w = Walker::new(&name, features, &dir);
            w.package = pkg["name"].as_str().unwrap_or_default().to_string();
            w.target_dir = Some(target_dir.clone());
            let has_build_script = pkg["targets"].as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["kind"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k == "custom-build"))
                })
            });
            w.build_cfgs = if has_build_script {
                build_script_cfgs(&target_dir, pkg["name"].as_str().unwrap_or_default())
            } else {
                Some(HashSet::new())
            };
            w.scan_file(&src, &dir);
            scan.hits.extend(w.hits);
            scan.files.extend(w.files);
            scan.unparsed.extend(w.unparsed);
            scan.missing
                .extend(w.missing.into_iter().map(|m| format!("{name}: {m}")));
            scan.crates.push(name);
        }
        for d in node["deps"].as_array().into_iter().flatten() {
            let normal = d["dep_kinds"]
                .as_array()
                .is_some_and(|ks| ks.iter().any(|k| k["kind"].is_null()));
            if normal {
                if let Some(p) = d["pkg"].as_str() {
                    queue.push_back(p.to_string());
                }
            }
        }
    }
    scan.hits.sort();
    scan.hits.dedup();
    scan
}

/// The cfgs every build-script run of `package` under `target/*/build/` emitted (union over runs and
/// profiles: more cfgs set means more code scanned); `None` when no run's output is there.
fn build_script_cfgs(target_dir: &Path, package: &str) -> Option<HashSet<String>> {
    let mut out = HashSet::new();
    let mut found = false;
    for profile in std::fs::read_dir(target_dir).ok()?.flatten() {
        let Ok(rd) = std::fs::read_dir(profile.path().join("build")) else {
            continue;
        };
        for d in rd.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let Some(hash) = name.strip_prefix(package).and_then(|r| r.strip_prefix('-')) else {
                continue;
            };
            if hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(d.path().join("output")) else {
                continue;
            };
            found = true;
            for l in text.lines() {
                if let Some(c) = l
                    .strip_prefix("cargo:rustc-cfg=")
                    .or_else(|| l.strip_prefix("cargo::rustc-cfg="))
                {
                    out.insert(c.trim().to_string());
                }
            }
        }
    }
    found.then_some(out)
}

fn render(hits: &[Hit]) -> String {
    hits.iter()
        .map(|h| format!("{}: {}:{}: {}", h.krate, h.file.display(), h.line, h.what))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---- the tests --------------------------------------------------------------------------------------

#[test]
fn nothing_reachable_from_intake_spawns_or_loads_code() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("Cargo.toml");
    let scan = scan_package(&ws, "intake");
    println!(
        "scanned {} crates, {} files:",
        scan.crates.len(),
        scan.files.len()
    );
    for c in &scan.crates {
        println!("  {c}");
    }
    if !scan.unparsed.is_empty() {
        println!("token-scanned (syn could not parse): {:#?}", scan.unparsed);
    }
    // A module the walker cannot find is code it cannot vouch for.
    assert!(
        scan.missing.is_empty(),
        "modules not found: {:#?}",
        scan.missing
    );
    // The walk is not vacuous: every module of intake and the crates that read archives were reached.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for m in [
        "lib",
        "job",
        "normalise",
        "receive",
        "report",
        "scan",
        "structure",
        "unpack",
    ] {
        let p = src.join(format!("{m}.rs"));
        assert!(
            scan.files
                .iter()
                .any(|f| f.ends_with(format!("intake/src/{m}.rs")) || *f == p),
            "intake module {m} was not reached"
        );
    }
    // The job loader and the address policy moved to job-policy (re-exported by intake): reached there.
    for m in ["lib", "addr", "allow", "hostport", "isolation", "job"] {
        assert!(
            scan.files
                .iter()
                .any(|f| f.ends_with(format!("job-policy/src/{m}.rs"))),
            "job-policy module {m} was not reached"
        );
    }
    for k in ["tar ", "flate2 ", "zip ", "toml ", "idna ", "libc "] {
        assert!(
            scan.crates.iter().any(|c| c.starts_with(k)),
            "{k}was not in the graph"
        );
    }
    assert!(
        scan.hits.is_empty(),
        "code reachable from intake can spawn a process or load code:\n{}",
        render(&scan.hits)
    );
}

#[test]
fn the_walker_flags_a_crate_that_spawns() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spawner/Cargo.toml");
    let scan = scan_package(&manifest, "spawner-fixture");
    let got: Vec<(String, usize, String)> = scan
        .hits
        .iter()
        .map(|h| {
            (
                h.file
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
                h.line,
                h.what.clone(),
            )
        })
        .collect();
    let text = render(&scan.hits);
    let has = |file: &str, line: usize, what: &str| {
        got.iter()
            .any(|(f, l, w)| f == file && *l == line && w.contains(what))
    };
    // lib.rs: the direct spawn.
    assert!(has("lib.rs", 13, "Command"), "{text}");
    // hidden.rs, reached only through `mod hidden;`.
    assert!(has("hidden.rs", 3, "std::process::{Command}"), "{text}");
    assert!(has("hidden.rs", 7, "fork"), "{text}");
    assert!(has("hidden.rs", 12, "execv"), "{text}");
    assert!(has("hidden.rs", 21, "dlopen"), "{text}");
    assert!(has("hidden.rs", 26, "libloading"), "{text}");
    assert!(has("hidden.rs", 31, "Command"), "{text}");
    // included.rs, pulled in by `include!`.
    assert!(has("included.rs", 3, "Command"), "{text}");
    // Line 38 (`Cmd::new`, an alias) is caught by its `use` on line 3, not on its own.
    // Not flagged: the extern declaration, exit/id, doc comments, strings, cfg(test), a disabled feature,
    // cfg(windows), a file no `mod` names, and methods that share a name with libc functions.
    assert!(
        !has("hidden.rs", 16, ""),
        "a foreign declaration was flagged: {text}"
    );
    for (f, _, _) in &got {
        assert!(
            f == "lib.rs" || f == "hidden.rs" || f == "included.rs",
            "flagged a file that is unreachable or clean: {f}\n{text}"
        );
    }
    assert!(
        got.iter()
            .filter(|(f, _, _)| f == "lib.rs")
            .all(|(_, l, _)| *l == 13),
        "lib.rs look-alikes were flagged:\n{text}"
    );
    assert!(
        scan.files.iter().any(|f| f.ends_with("quiet.rs")),
        "quiet.rs was not reached"
    );
    assert!(!scan.files.iter().any(|f| f.ends_with("unreached.rs")
        || f.ends_with("gated.rs")
        || f.ends_with("windows_only.rs")));
}
