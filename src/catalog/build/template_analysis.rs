//! What a template uses, with where: the variables it reads from outside
//! (undeclared ones), the filters and tests it calls, and the paths into
//! `data` it follows, each with the byte range of its name in the template
//! source, so a diagnostic can underline the name itself.
//!
//! It walks minijinja's syntax tree (`unstable_machinery`, pinned to the
//! minijinja version in Cargo.toml) with the same scoping as minijinja's own
//! `undeclared_variables`.
//!
//! # `data` paths
//! `data` is static, so a path whose parts are literal (`data.menu`,
//! `data["menu"]`, `data.rooms[0]`) is looked up at load. A part that is an
//! expression (`data.menu[product]`) stands for every value there: the next
//! part is an error only if no value has it. `{% for item in data.menu %}`
//! binds `item` to the list's items and `{% set m = data.menu %}` binds `m`,
//! so `item.nmae` and `m.x` are checked the same way.
//!
//! A path is not checked where the template asks whether it is there:
//! - as the subject of any test (`data.x is defined`),
//! - filtered by `default`/`d` (`data.x | default(1)`),
//! - as a bare condition (`{% if data.x %}`, `… if data.x else …`,
//!   `data.x and …`, `not data.x`), and then nothing below that path is
//!   checked inside what the condition guards (the `if`'s bodies, the
//!   inline `if`'s branches, the right side of `and`/`or`),
//! - as the object of a method call (`data.get("x")`, `data.menu.items()`).

mod data_paths;

use data_paths::static_path;

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use minijinja::machinery::ast::{self, CallArg, Expr, Stmt};
use minijinja::machinery::{Span, parse};
use minijinja::syntax::SyntaxConfig;
use serde_json::{Map, Value};

use crate::diag::did_you_mean;

/// A name used in a template, and the bytes of the template it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Use {
    pub name: String,
    pub range: Range<usize>,
}

/// A path into `data` that leads nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DataProblem {
    /// The part of the path that does not exist.
    pub range: Range<usize>,
    pub message: String,
    pub hint: String,
}

/// What one template uses.
#[derive(Debug, Default)]
pub(super) struct Analysis {
    /// Variables read before any assignment, each at its first use, in order.
    pub undeclared: Vec<Use>,
    /// Every filter applied.
    pub filters: Vec<Use>,
    /// Every test applied.
    pub tests: Vec<Use>,
    pub data: Vec<DataProblem>,
    /// `jq` filters that do not compile, or are not written as a string.
    pub jq: Vec<DataProblem>,
}

/// Most values one path part may stand for before checking stops (each
/// value is visited once per part, so this bounds the cost of a path).
const MAX_VALUES: usize = 100_000;

/// Keys listed in a hint when there are this many or fewer.
const FEW_KEYS: usize = 12;

/// Parses `source` and reports what it uses; `data` is the catalog's `data:`.
pub(super) fn analyze<'d>(source: &'d str, data: &'d Map<String, Value>) -> Result<Analysis, minijinja::Error> {
    let tree = parse(source, "<template>", SyntaxConfig::default())?;
    let mut walker = Walker {
        source,
        data,
        assigned: vec![HashMap::new()],
        seen: HashSet::new(),
        guards: Vec::new(),
        out: Analysis::default(),
    };
    walker.stmt(&tree);
    Ok(walker.out)
}

fn range(span: Span) -> Range<usize> {
    span.start_offset as usize..span.end_offset as usize
}

/// The values a local variable or an expression stands for in `data`.
#[derive(Clone)]
struct Resolved<'d> {
    values: Vec<&'d Value>,
    /// The root is `data` itself (a map the walker does not hold as a `Value`).
    root: bool,
    /// Where in `data` it is: `data.menu[…]`.
    path: String,
    /// How the template wrote it: `data.menu[product]` is `data.menu[…]`,
    /// and `item.name` in `{% for item in data.menu %}` is `item.name`.
    written: String,
    /// Whether a part of the path was an expression.
    dynamic: bool,
}

struct Walker<'d> {
    source: &'d str,
    data: &'d Map<String, Value>,
    /// Assigned names per scope; `Some` for those known to hold `data` values.
    assigned: Vec<HashMap<String, Option<Resolved<'d>>>>,
    seen: HashSet<String>,
    /// Paths tested for presence by an enclosing condition.
    guards: Vec<String>,
    out: Analysis,
}

impl<'d> Walker<'d> {
    fn lookup(&self, name: &str) -> Option<&Option<Resolved<'d>>> {
        self.assigned.iter().rev().find_map(|scope| scope.get(name))
    }

    fn assign(&mut self, name: &str, value: Option<Resolved<'d>>) {
        if let Some(scope) = self.assigned.last_mut() {
            scope.insert(name.to_owned(), value);
        }
    }

    fn push(&mut self) {
        self.assigned.push(HashMap::new());
    }

    fn pop(&mut self) {
        self.assigned.pop();
    }

    fn var(&mut self, var: &ast::Spanned<ast::Var<'_>>) {
        if self.lookup(var.id).is_none() && self.seen.insert(var.id.to_owned()) {
            self.out.undeclared.push(Use { name: var.id.to_owned(), range: range(var.span()) });
        }
    }

    fn guarded(&self, path: &str) -> bool {
        self.guards.iter().any(|guard| {
            path.strip_prefix(guard.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }

    /// The path a bare condition tests, as written, if it is a path.
    fn condition_path(expr: &Expr<'_>) -> Option<String> {
        match expr {
            Expr::Test(test) => Self::condition_path(&test.expr),
            other => static_path(other),
        }
    }

    /// Visits a condition: bare paths and tests are presence checks; returns
    /// the paths it tests, which guard what the condition controls.
    fn condition(&mut self, expr: &Expr<'_>, guards: &mut Vec<String>) {
        match expr {
            Expr::Var(_) | Expr::GetAttr(_) | Expr::GetItem(_) | Expr::Test(_) => {
                if let Some(path) = Self::condition_path(expr) {
                    guards.push(path);
                }
                self.expr(expr, false);
            }
            Expr::UnaryOp(op) if matches!(op.op, ast::UnaryOpKind::Not) => self.condition(&op.expr, guards),
            Expr::BinOp(op) if matches!(op.op, ast::BinOpKind::ScAnd | ast::BinOpKind::ScOr) => {
                self.condition(&op.left, guards);
                let before = self.guards.len();
                self.guards.extend(guards.iter().cloned());
                self.condition(&op.right, guards);
                self.guards.truncate(before);
            }
            _ => self.expr(expr, true),
        }
    }

    /// Runs `visit` with `guards` guarding what it visits.
    fn with_guards(&mut self, guards: &[String], visit: impl FnOnce(&mut Self)) {
        let before = self.guards.len();
        self.guards.extend(guards.iter().cloned());
        visit(self);
        self.guards.truncate(before);
    }

    /// Visits an expression; `check` says whether a path it is gets checked
    /// (its parts' subscripts always are).
    fn expr(&mut self, expr: &Expr<'_>, check: bool) {
        match expr {
            Expr::Var(var) => self.var(var),
            Expr::Const(_) => {}
            Expr::GetAttr(_) | Expr::GetItem(_) => {
                if check {
                    self.resolve(expr, true);
                }
                self.path_parts(expr);
            }
            Expr::Slice(slice) => {
                self.expr(&slice.expr, true);
                for part in [&slice.start, &slice.stop, &slice.step].into_iter().flatten() {
                    self.expr(part, true);
                }
            }
            Expr::UnaryOp(op) => self.expr(&op.expr, true),
            Expr::BinOp(op) if matches!(op.op, ast::BinOpKind::ScAnd | ast::BinOpKind::ScOr) => {
                let mut guards = Vec::new();
                self.condition(&op.left, &mut guards);
                self.with_guards(&guards, |walker| walker.expr(&op.right, true));
            }
            Expr::BinOp(op) => {
                self.expr(&op.left, true);
                self.expr(&op.right, true);
            }
            Expr::Compare(compare) => {
                self.expr(&compare.expr, true);
                for op in &compare.ops {
                    self.expr(&op.expr, true);
                }
            }
            Expr::IfExpr(if_expr) => {
                let mut guards = Vec::new();
                self.condition(&if_expr.test_expr, &mut guards);
                self.with_guards(&guards, |walker| {
                    walker.expr(&if_expr.true_expr, true);
                    if let Some(false_expr) = &if_expr.false_expr {
                        walker.expr(false_expr, true);
                    }
                });
            }
            Expr::Filter(filter) => {
                let start = filter.span().start_offset as usize;
                self.out.filters.push(Use { name: filter.name.to_owned(), range: start..start + filter.name.len() });
                if let Some(inner) = &filter.expr {
                    self.expr(inner, !matches!(filter.name, "default" | "d"));
                }
                if filter.name == "jq" {
                    self.jq(filter.span(), &filter.args);
                }
                self.args(&filter.args);
            }
            Expr::Test(test) => {
                let start = test.span().start_offset as usize;
                self.out.tests.push(Use { name: test.name.to_owned(), range: start..start + test.name.len() });
                self.expr(&test.expr, false);
                self.args(&test.args);
            }
            Expr::Call(call) => {
                match &call.expr {
                    // A method: its object is checked, not the method's name.
                    Expr::GetAttr(method) => {
                        if matches!(method.expr, Expr::Var(_) | Expr::GetAttr(_) | Expr::GetItem(_)) {
                            self.path_parts(&method.expr);
                        } else {
                            self.expr(&method.expr, true);
                        }
                        self.resolve(&method.expr, true);
                    }
                    callee => self.expr(callee, true),
                }
                self.args(&call.args);
            }
            Expr::List(list) => list.items.iter().for_each(|item| self.expr(item, true)),
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.expr(item, true)),
            Expr::Map(map) => {
                for (key, value) in map.keys.iter().zip(map.values.iter()) {
                    self.expr(key, true);
                    self.expr(value, true);
                }
            }
        }
    }

    /// Visits the parts of a path (its root and subscripts) without checking
    /// the path itself (done once, for the whole path).
    fn path_parts(&mut self, expr: &Expr<'_>) {
        match expr {
            Expr::GetAttr(attr) => self.path_parts(&attr.expr),
            Expr::GetItem(item) => {
                self.path_parts(&item.expr);
                self.expr(&item.subscript_expr, true);
            }
            other => self.expr(other, true),
        }
    }

    /// Checks the filter of `jq(…)`: a string written in the template that
    /// compiles (a filter from elsewhere could be code a client wrote).
    fn jq(&mut self, span: Span, args: &[CallArg<'_>]) {
        let literal = match args {
            [CallArg::Pos(Expr::Const(constant))] => {
                constant.value.as_str().map(|text| (text.to_owned(), range(constant.span())))
            }
            _ => None,
        };
        let Some((text, at)) = literal else {
            let start = span.start_offset as usize;
            let at = match args.first() {
                Some(
                    CallArg::Pos(expr) | CallArg::Kwarg(_, expr) | CallArg::PosSplat(expr) | CallArg::KwargSplat(expr),
                ) => range(expr.span()),
                None => start..span.end_offset as usize,
            };
            self.out.jq.push(DataProblem {
                range: at,
                message: "`jq` takes one filter, written as a string in the template".to_owned(),
                hint: "write the filter in quotes: `jq(\".items[].id\")`; a filter taken from an argument \
                    would run code a client wrote"
                    .to_owned(),
            });
            return;
        };
        if let Err(invalid) = crate::render::jq::check(&text) {
            // Underline the fault itself when the literal is written without escapes.
            let inner = at.start + 1..at.end.saturating_sub(1);
            let written_as_is = self.source.get(inner.clone()) == Some(text.as_str());
            let at = match invalid.at {
                Some(fault) if written_as_is => {
                    let start = inner.start + fault.start;
                    start..(inner.start + fault.end).max(start + 1).min(at.end)
                }
                _ => at,
            };
            self.out.jq.push(DataProblem {
                range: at,
                message: format!("the jq filter does not compile: {}", invalid.message),
                hint: if invalid.reads_environment {
                    "jq in carte cannot read the server's environment: give the filter what it needs as its input"
                        .to_owned()
                } else {
                    "see the jq manual for the syntax: carte runs filters with jaq, without `env`, `input` or `halt`"
                        .to_owned()
                },
            });
        }
    }

    fn args(&mut self, args: &[CallArg<'_>]) {
        for arg in args {
            match arg {
                CallArg::Pos(expr) | CallArg::Kwarg(_, expr) | CallArg::PosSplat(expr) | CallArg::KwargSplat(expr) => {
                    self.expr(expr, true);
                }
            }
        }
    }

    fn target(&mut self, target: &Expr<'_>, value: Option<Resolved<'d>>) {
        match target {
            Expr::Var(var) => self.assign(var.id, value),
            Expr::List(list) => list.items.iter().for_each(|item| self.target(item, None)),
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.target(item, None)),
            _ => {}
        }
    }

    /// What an assigned expression holds, if it is a `data` path.
    fn bound(&mut self, expr: &Expr<'_>) -> Option<Resolved<'d>> {
        match expr {
            Expr::Var(_) | Expr::GetAttr(_) | Expr::GetItem(_) => self.resolve(expr, false),
            _ => None,
        }
    }

    fn body(&mut self, body: &[Stmt<'_>]) {
        self.push();
        body.iter().for_each(|stmt| self.stmt(stmt));
        self.pop();
    }

    fn stmt(&mut self, stmt: &Stmt<'_>) {
        match stmt {
            Stmt::Template(template) => {
                self.assign("self", None);
                template.children.iter().for_each(|child| self.stmt(child));
            }
            Stmt::EmitExpr(emit) => self.expr(&emit.expr, true),
            Stmt::EmitRaw(_) => {}
            Stmt::ForLoop(for_loop) => {
                self.expr(&for_loop.iter, true);
                let items = self.bound(&for_loop.iter).and_then(|list| {
                    let lists = list.values.iter().all(|v| v.is_array()) && !list.root;
                    if lists { self.every(list) } else { None }
                });
                self.push();
                self.assign("loop", None);
                self.target(&for_loop.target, items);
                if let Some(filter) = &for_loop.filter_expr {
                    self.expr(filter, true);
                }
                for_loop.body.iter().for_each(|stmt| self.stmt(stmt));
                self.pop();
                self.body(&for_loop.else_body);
            }
            Stmt::IfCond(if_cond) => {
                let mut guards = Vec::new();
                self.condition(&if_cond.expr, &mut guards);
                self.with_guards(&guards, |walker| {
                    walker.body(&if_cond.true_body);
                    walker.body(&if_cond.false_body);
                });
            }
            Stmt::WithBlock(with) => {
                self.push();
                for (target, value) in &with.assignments {
                    self.expr(value, true);
                    let bound = self.bound(value);
                    self.target(target, bound);
                }
                with.body.iter().for_each(|stmt| self.stmt(stmt));
                self.pop();
            }
            Stmt::Set(set) => {
                self.expr(&set.expr, true);
                let bound = self.bound(&set.expr);
                self.target(&set.target, bound);
            }
            Stmt::SetBlock(set) => {
                self.target(&set.target, None);
                if let Some(filter) = &set.filter {
                    self.expr(filter, true);
                }
                self.body(&set.body);
            }
            Stmt::AutoEscape(block) => self.body(&block.body),
            Stmt::FilterBlock(block) => {
                self.expr(&block.filter, true);
                self.body(&block.body);
            }
            Stmt::Block(block) => {
                self.push();
                self.assign("super", None);
                block.body.iter().for_each(|stmt| self.stmt(stmt));
                self.pop();
            }
            Stmt::Extends(_) | Stmt::Include(_) => {}
            Stmt::Import(import) => self.target(&import.name, None),
            Stmt::FromImport(import) => {
                for (name, alias) in &import.names {
                    self.target(alias.as_ref().unwrap_or(name), None);
                }
            }
            Stmt::Macro(mac) => {
                self.assign(mac.name, None);
                self.push();
                self.macro_body(mac);
                self.pop();
            }
            Stmt::CallBlock(call) => {
                self.expr(&call.call.expr, true);
                self.args(&call.call.args);
                self.push();
                self.macro_body(&call.macro_decl);
                self.pop();
            }
            Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::Do(call) => {
                self.expr(&call.call.expr, true);
                self.args(&call.call.args);
            }
        }
    }

    fn macro_body(&mut self, mac: &ast::Macro<'_>) {
        self.assign("caller", None);
        mac.args.iter().for_each(|arg| self.target(arg, None));
        mac.defaults.iter().for_each(|default| self.expr(default, true));
        mac.body.iter().for_each(|stmt| self.stmt(stmt));
    }
}

#[cfg(test)]
mod tests;
