//! Effects: what a tool does before its result renders (`sql` now).
//!
//! Each effect is one module that owns everything about it: its keys in
//! the catalog format (a serde spec, from which `carte schema` is derived),
//! its load-time checks (returning diagnostics and a checked form, see
//! [`Kind::check`]) and its run ([`Kind::run`]: the arguments in, the
//! variables its result template sees out). The catalog depends on this
//! module for the specs and the checked forms, and `run` calls them; an
//! effect depends on neither. Adding an effect is its module and one line
//! in `effects!` below (and, for one with a top-level block such as
//! `databases:`, that block's key in the format and its field in
//! [`Sections`]).
//!
//! An effect hands its result to `finish` (the result's render) before its
//! work is final, so that a result that fails can undo it: `sql` renders
//! inside the statement's transaction and commits only if `finish`
//! succeeded (see `sql::engine::Database::transact`).

pub mod sql;

use std::future::Future;
use std::ops::Range;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::diag::{Diagnostic, Location};

/// What an effect gives the result template.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The variables the result template sees, by name. The last one is
    /// the effect's value: what a `run` without a result template prints
    /// as JSON.
    pub variables: Vec<(String, Value)>,
    /// What the model reading the result must also know (e.g. that rows
    /// were left out), added to the result after its content.
    pub notice: Option<String>,
}

/// Why an effect gave no result.
#[derive(Debug)]
pub enum Failure<T> {
    /// The effect failed, for this reason: the call's error result says it.
    Failed(String),
    /// `finish` failed with `reason`; `undone` is what the model must be
    /// told about the work that was undone (a write rolled back).
    Refused {
        /// What `finish` returned.
        reason: T,
        /// A notice that the effect's work was undone, if it was.
        undone: Option<&'static str>,
    },
}

/// What checking one tool's effect sees and where it reports.
pub struct Check<'a> {
    /// The tool's arguments (`inputSchema.properties`).
    pub arguments: &'a [String],
    /// Where a key of the tool is written, by its JSON pointer in the tool
    /// (`/run/sql/statement`).
    pub locate: &'a dyn Fn(&str) -> Location,
    /// Where bytes `range` of the text value at `pointer` are written (the
    /// value's own place when that cannot be told, e.g. after `${VAR}`).
    pub locate_in: &'a dyn Fn(&str, &str, Range<usize>) -> Location,
    /// Where problems go.
    pub diagnostics: &'a mut Vec<Diagnostic>,
}

impl Check<'_> {
    /// Reports an error at the key `pointer` of the tool.
    pub fn error(&mut self, code: &'static str, pointer: &str, message: impl Into<String>) -> &mut Diagnostic {
        let location = (self.locate)(pointer);
        self.report(Diagnostic::error(code, location, message))
    }

    /// Reports an error at bytes `range` of `text`, the value at `pointer`.
    pub fn error_in(
        &mut self,
        code: &'static str,
        (pointer, text, range): (&str, &str, Range<usize>),
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        let location = (self.locate_in)(pointer, text, range);
        self.report(Diagnostic::error(code, location, message))
    }

    fn report(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        self.diagnostics.push(diagnostic);
        let last = self.diagnostics.len() - 1;
        &mut self.diagnostics[last]
    }
}

/// The top-level blocks effects use, checked before the tools are.
pub struct Sections<'a> {
    /// `databases:`, for `sql`.
    pub databases: &'a sql::Checked,
    /// Whether a block (`databases`) may declare `name` though it was left
    /// out for a mistake in it (reported already): whatever refers to it
    /// is not reported again.
    pub left_out: &'a dyn Fn(&str, &str) -> bool,
}

/// One effect: its spec, its load-time check and its run.
pub trait Kind: Sized + Send + Sync {
    /// The variables its result template sees, besides the arguments,
    /// `arguments` and `data`.
    const VARIABLES: &'static [&'static str];

    /// Its spec under `run`, as the catalog writes it.
    type Spec;

    /// Checks `spec` at load, reporting into `check`; `None` once it
    /// reported why the effect cannot run. Checking has no side effects.
    fn check(spec: &Self::Spec, sections: &Sections<'_>, check: &mut Check<'_>) -> Option<Self>;

    /// The arguments it uses itself (they are not reported unused).
    fn arguments_used(&self) -> &[String];

    /// Runs it with the call's `arguments`, then `finish` (the result's
    /// render) with what it produced. If `finish` fails, the effect undoes
    /// what it can and says so in [`Failure::Refused`]; dropping the
    /// future (a cancelled call) stops the work.
    fn run<T, F, Fut>(&self, arguments: Map<String, Value>, finish: F) -> impl Future<Output = Result<T, Failure<T>>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>;
}

/// Registers the effects: one line each, `key: module::Kind(module::Spec)`,
/// with the doc comment users read in the schema. It makes [`Specs`] (the
/// effect keys of `run`), [`Effect`] (a checked effect) and [`KEYS`].
macro_rules! effects {
    ($($(#[doc = $doc:literal])* $key:ident: $module:ident::$kind:ident($spec:ty),)*) => {
        /// The effect keys of a tool's `run`, flattened into it.
        #[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
        pub struct Specs {
            $($(#[doc = $doc])* #[serde(default)] pub $key: Option<$spec>,)*
        }

        /// The keys under `run` that name an effect.
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// A tool's effect, checked and ready to run.
        pub enum Effect {
            $($(#[doc = $doc])* $kind($module::$kind),)*
        }

        impl Specs {
            /// Whether `run` names an effect.
            pub fn any(&self) -> bool {
                false $(|| self.$key.is_some())*
            }

            /// The variables the given effect's result template sees.
            pub fn variables(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $(if self.$key.is_some() { names.extend(<$module::$kind as Kind>::VARIABLES); })*
                names
            }

            /// Checks the given effect: `Some(None)` if there is none, `None`
            /// once it reported why it cannot run.
            pub fn check(&self, sections: &Sections<'_>, check: &mut Check<'_>) -> Option<Option<Effect>> {
                $(if let Some(spec) = &self.$key {
                    return <$module::$kind as Kind>::check(spec, sections, check).map(|e| Some(Effect::$kind(e)));
                })*
                Some(None)
            }
        }

        impl Effect {
            /// The arguments it uses itself.
            pub fn arguments_used(&self) -> &[String] {
                match self {
                    $(Effect::$kind(effect) => effect.arguments_used(),)*
                }
            }

            /// Runs it, then `finish` (see [`Kind::run`]).
            pub async fn run<T, F, Fut>(&self, arguments: Map<String, Value>, finish: F) -> Result<T, Failure<T>>
            where
                F: FnOnce(Output) -> Fut,
                Fut: Future<Output = Result<T, T>>,
            {
                match self {
                    $(Effect::$kind(effect) => effect.run(arguments, finish).await,)*
                }
            }
        }
    };
}

effects! {
    /// Runs one SQL statement on a `databases` entry; its rows are `rows` in the result template.
    sql: sql::Sql(sql::SqlSpec),
}

/// Effects the catalog format names; those not in [`KEYS`] are not in this
/// version of carte, and a catalog that uses one is told so.
pub const PLANNED: &[&str] = &["command", "http", "sql"];
