//! Effects: what a tool does before its result renders (`sql`, `http`, `command`).
//!
//! Each effect is one module that owns everything about it: its keys in
//! the catalog format (a serde spec, from which `carte schema` is derived),
//! its load-time checks (returning diagnostics and a checked form, see
//! [`Kind::check`]) and its run ([`Kind::run`]: the arguments in, the
//! variables its result template sees out). The catalog depends on this
//! module for the specs and the checked forms, and `run` calls them; an
//! effect depends on neither. An effect with a top-level block of its own
//! (`databases:` for `sql`, `apis:` for `http`) also implements
//! [`block::Block`] for it. Adding an effect is its module and one line in
//! `effects!` below: see ARCHITECTURE.md, "Adding an effect".
//!
//! An effect hands its result to `finish` (the result's render) before its
//! work is final, so that a result that fails can undo it: `sql` renders
//! inside the statement's transaction and commits only if `finish`
//! succeeded (see `sql::engine::Database::transact`).

pub mod block;
pub mod command;
pub mod http;
pub mod sql;

use std::future::Future;
use std::ops::Range;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::diag::{Diagnostic, Location};
pub use crate::metrics::EffectError;

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
    /// The `databases` entry this effect writes to, if it does: once the
    /// call's work is committed, what reads that database (live resources)
    /// may have changed.
    pub changed: Option<String>,
}

/// Why an effect gave no result.
#[derive(Debug)]
pub enum Failure<T> {
    /// The effect failed (`error`: how, as metrics and traces name it) for
    /// `reason`, which the call's error result says.
    Failed {
        /// The kind of failure.
        error: EffectError,
        /// What went wrong, for the model.
        reason: String,
    },
    /// `finish` failed with `reason`; `undone` is what the model must be
    /// told about the work that was undone (a write rolled back).
    Refused {
        /// What `finish` returned.
        reason: T,
        /// A notice that the effect's work was undone, if it was.
        undone: Option<&'static str>,
    },
}

impl<T> Failure<T> {
    /// A template of the effect did not render (or rendered what the effect
    /// cannot use) for `reason`.
    pub fn render(reason: String) -> Failure<T> {
        Failure::Failed { error: EffectError::Render, reason }
    }

    /// The effect's work failed with `error` for `reason`; `span`, the
    /// effect's trace span, says so too.
    pub fn of(span: &tracing::Span, error: EffectError, reason: String) -> Failure<T> {
        crate::telemetry::failed(span, error);
        Failure::Failed { error, reason }
    }

    /// How it failed, as metrics name it.
    pub fn error(&self) -> EffectError {
        match self {
            Failure::Failed { error, .. } => *error,
            Failure::Refused { .. } => EffectError::Refused,
        }
    }
}

/// One entry of an effect's top-level block (`databases:`, `apis:`) as a
/// catalog file declares it: what the effect's `check_…` reads.
pub struct Declared<'a, S> {
    /// Its name.
    pub name: &'a str,
    /// What it says.
    pub spec: &'a S,
    /// The folder of the file that declares it (relative paths start there).
    pub base: std::path::PathBuf,
    /// Where a key of it is written, by its JSON pointer in the entry (`/url`).
    pub locate: Box<dyn Fn(&str) -> Location + 'a>,
}

/// A template an effect renders when it runs (a URL path, an argument of
/// a program), registered and checked with the tool's templates.
#[derive(Debug, Clone)]
pub struct Template {
    /// Its name in the catalog's template environment.
    pub name: String,
    /// For a template that is one `{{ expression }}`: the name of its twin
    /// that renders the expression's value as JSON, so that `"{{ count }}"`
    /// stays a number where a value keeps its type (a JSON body, an SQL
    /// parameter).
    pub typed: Option<String>,
}

/// What checking an effect needs from the catalog being built: where keys
/// are written, its templates, where problems go.
pub trait Host {
    /// Where a key of the tool is written, by its JSON pointer in the tool
    /// (`/run/sql/statement`).
    fn locate(&self, pointer: &str) -> Location;
    /// Where the key at `pointer` itself is written (a name in a map, such
    /// as `/run/sql/params/who`); its value's place if that cannot be told.
    fn locate_key(&self, pointer: &str) -> Location {
        self.locate(pointer)
    }
    /// Where bytes `range` of the text value at `pointer` are written (the
    /// value's own place when that cannot be told, e.g. after `${VAR}`).
    fn locate_in(&self, pointer: &str, text: &str, range: Range<usize>) -> Location;
    /// Registers `source`, the template written at `pointer`, and checks
    /// it against the names the effect may use (the tool's arguments,
    /// `arguments`, `data`, and what its steps produced); `None` once it
    /// reported why it cannot render.
    fn template(&mut self, pointer: &str, source: &str) -> Option<Template>;
    /// Like [`Host::template`], for a template that builds a URL path: each
    /// value it prints is percent-encoded as (part of) one path segment, so
    /// `/`, `?`, `#` and `..` from a value cannot change the URL's shape.
    fn url_template(&mut self, pointer: &str, source: &str) -> Option<Template>;
    /// Adds a problem to the catalog's diagnostics.
    fn report(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic;
}

/// What checking one tool's effect sees and where it reports.
pub struct Check<'a> {
    /// The tool's arguments (`inputSchema.properties`).
    pub arguments: &'a [String],
    /// Those of them a client may send as any text: a string (or untyped)
    /// property without `enum`, `const` or `pattern`.
    pub free_text: &'a [String],
    /// The catalog being built.
    pub host: &'a mut dyn Host,
}

impl Check<'_> {
    /// Reports an error at the key `pointer` of the tool.
    pub fn error(&mut self, code: &'static str, pointer: &str, message: impl Into<String>) -> &mut Diagnostic {
        let location = self.host.locate(pointer);
        self.host.report(Diagnostic::error(code, location, message))
    }

    /// Reports a warning at the key `pointer` of the tool.
    pub fn warning(&mut self, code: &'static str, pointer: &str, message: impl Into<String>) -> &mut Diagnostic {
        let location = self.host.locate(pointer);
        self.host.report(Diagnostic::warning(code, location, message))
    }

    /// Reports an error at bytes `range` of `text`, the value at `pointer`.
    pub fn error_in(
        &mut self,
        code: &'static str,
        (pointer, text, range): (&str, &str, Range<usize>),
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        let location = self.host.locate_in(pointer, text, range);
        self.host.report(Diagnostic::error(code, location, message))
    }

    /// Registers and checks the template `source` written at `pointer`.
    pub fn template(&mut self, pointer: &str, source: &str) -> Option<Template> {
        self.host.template(pointer, source)
    }

    /// Registers and checks the URL path template `source` written at
    /// `pointer` (see [`Host::url_template`]).
    pub fn url_template(&mut self, pointer: &str, source: &str) -> Option<Template> {
        self.host.url_template(pointer, source)
    }
}

/// A future an effect's [`Call`] returns.
pub type CallFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The tool call an effect runs for: the variables its templates see and
/// the client it may tell what happens.
pub trait Call: Send + Sync {
    /// Renders `templates` with the call's variables, all in one trip to
    /// the blocking pool: each as text, or, for one with a
    /// [`Template::typed`] twin, as the JSON value of its expression. An
    /// error says which template failed and why.
    fn render<'a>(&'a self, templates: &'a [Template]) -> CallFuture<'a, Result<Vec<Value>, String>>;
    /// Sends `message` to the client as a log message at `info` from
    /// `logger` (if the client asked for that level).
    fn info<'a>(&'a self, logger: &'a str, message: String) -> CallFuture<'a, ()>;
    /// The answer an `http` effect takes instead of asking its api (an
    /// example's `upstream`, under `carte test`); `None`: ask the api.
    fn stated_answer(&self) -> Option<&http::StatedAnswer> {
        None
    }
    /// The caller's verified access token, which an api's `auth:
    /// { exchange }` exchanges; `None` when carte verified no caller.
    fn access_token(&self) -> Option<&http::AccessToken>;
}

/// The top-level blocks effects use, checked before the tools are.
pub type Sections = Blocks<block::Checking>;

/// One effect: its spec, its load-time check and its run.
pub trait Kind: Sized + Send + Sync {
    /// The variables its result template sees, besides the arguments,
    /// `arguments` and `data`.
    const VARIABLES: &'static [&'static str];

    /// Its spec under `run`, as the catalog writes it.
    type Spec;

    /// Checks `spec` at load, reporting into `check`; `None` once it
    /// reported why the effect cannot run. Checking has no side effects.
    fn check(spec: &Self::Spec, sections: &Sections, check: &mut Check<'_>) -> Option<Self>;

    /// The arguments it uses itself (they are not reported unused).
    fn arguments_used(&self) -> &[String];

    /// What a resource that names it does when a client reads it, for
    /// messages.
    const READS: Reads;

    /// The MIME type of a resource body that is this effect's value (the
    /// last of its output's variables: a string as it is, anything else as
    /// JSON), for a resource with neither `text` nor `template`.
    const VALUE_MIME: &'static str;

    /// Its spec in a resource, as the catalog writes it (a resource's keys
    /// are at the top of the entry, not under `run`).
    type ReadSpec;

    /// Its checked form in a resource: what a read runs.
    type Read: Send + Sync;

    /// Checks `spec` in a resource, like [`Kind::check`]: `check.arguments`
    /// are the variables of the resource's URI (none for a fixed URI). The
    /// check places keys as in a tool (`/run/http/api`); the host places
    /// them in the resource.
    fn check_read(spec: &Self::ReadSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Self::Read>;

    /// Runs a resource's read with the URI's `variables`: what its body
    /// sees, or why it failed. Dropping the future stops the work.
    fn read<'a>(
        read: &'a Self::Read,
        call: &'a dyn Call,
        variables: Map<String, Value>,
    ) -> impl Future<Output = Result<Output, String>> + Send + 'a;

    /// The entry of the effect's block whose writes change what `read`
    /// reads (its `databases` entry), for live resources; `None`: no write
    /// a tool makes is known to change it.
    fn watches(read: &Self::Read) -> Option<&str> {
        let _ = read;
        None
    }

    /// The URI variables `read` uses itself (they are not reported unused).
    fn read_uses(read: &Self::Read) -> &[String];

    /// Runs it with the call's `arguments`, then `finish` (the result's
    /// render) with what it produced. If `finish` fails, the effect undoes
    /// what it can and says so in [`Failure::Refused`]; dropping the
    /// future (a cancelled call) stops the work.
    fn run<T, F, Fut>(
        &self,
        call: &dyn Call,
        arguments: Map<String, Value>,
        finish: F,
    ) -> impl Future<Output = Result<T, Failure<T>>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>;
}

/// Runs `effect` as a resource's read: its output as it is, or why it
/// failed (for an effect whose read is its run, such as `http`).
pub async fn run_as_read<K: Kind>(
    effect: &K,
    call: &dyn Call,
    variables: Map<String, Value>,
) -> Result<Output, String> {
    let finish = |output: Output| std::future::ready(Ok::<Output, Output>(output));
    effect.run(call, variables, finish).await.map_err(|failure| match failure {
        Failure::Failed { reason, .. } => reason,
        Failure::Refused { .. } => "its output was refused".to_owned(),
    })
}

/// How messages say what a resource's effect does when the resource is
/// read (`resource … reads a database (`sql`), so it cannot be embedded`).
#[derive(Debug, Clone, Copy)]
pub struct Reads {
    /// What the resource does: "reads a database".
    pub does: &'static str,
    /// When: "its rows are read" (when a client reads it).
    pub when: &'static str,
    /// What a tool does instead, with its own effect: "read the rows".
    pub instead: &'static str,
    /// What a body template renders of its output: "the rows".
    pub output: &'static str,
    /// What the body is without a template: "the rows as JSON".
    pub value: &'static str,
}

/// Whether at most one of the effect keys (`named`: each key and whether it
/// is written) is written in `owner` (`` `run` ``, "a resource"); if not,
/// reports it with `hint`.
fn one_effect(named: &[(&str, bool)], check: &mut Check<'_>, owner: &str, hint: &str) -> bool {
    let mut present = named.iter().filter(|(_, present)| *present).map(|(key, _)| key);
    let (Some(first), Some(second)) = (present.next(), present.next()) else { return true };
    check.error("run", &format!("/run/{second}"), format!("{owner} has both `{first}` and `{second}`")).hint =
        Some(hint.to_owned());
    false
}

/// Registers the effects: one line each, `key: module::Kind(module::Spec)`,
/// with the doc comment users read in the schema, then in braces the
/// effect's own top-level block if it has one (`block_key: module::Block`,
/// with its doc comment). It makes [`Specs`] (the effect keys of `run`),
/// [`Effect`] (a checked effect), [`KEYS`], and for the blocks
/// [`BlockSpecs`] (their keys in a catalog file), [`Blocks`] and
/// [`BLOCK_KEYS`].
macro_rules! effects {
    ($($(#[doc = $doc:literal])* $key:ident: $module:ident::$kind:ident($spec:ty) {
        $($(#[doc = $block_doc:literal])* $block:ident: $block_module:ident::$block_type:ident)?
    } read {
        $(#[doc = $read_doc:literal])*
    },)*) => {
        /// The effect keys of a resource or resource template, flattened into it.
        #[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
        pub struct ReadSpecs {
            $($(#[doc = $read_doc])* #[serde(default)] pub $key: Option<<$module::$kind as Kind>::ReadSpec>,)*
        }

        /// A resource's effect, checked: what a read of it runs.
        pub enum ReadEffect {
            $($(#[doc = $doc])* $kind(<$module::$kind as Kind>::Read),)*
        }

        impl ReadSpecs {
            /// The key of the effect the resource names, if it names one.
            pub fn key(&self) -> Option<&'static str> {
                $(if self.$key.is_some() { return Some(stringify!($key)); })*
                None
            }

            /// How messages say what the given effect does, if one is given.
            pub fn reads(&self) -> Option<Reads> {
                $(if self.$key.is_some() { return Some(<$module::$kind as Kind>::READS); })*
                None
            }

            /// The variables the given effect's output gives the body.
            pub fn variables(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $(if self.$key.is_some() { names.extend(<$module::$kind as Kind>::VARIABLES); })*
                names
            }

            /// Checks the given effect: `Some(None)` if there is none, `None`
            /// once it reported why it cannot run (also when it names two).
            pub fn check(&self, sections: &Sections, check: &mut Check<'_>) -> Option<Option<ReadEffect>> {
                let named = [$((stringify!($key), self.$key.is_some())),*];
                if !one_effect(&named, check, "a resource", "a resource reads with one effect; give this one its own URI") {
                    return None;
                }
                $(if let Some(spec) = &self.$key {
                    return <$module::$kind as Kind>::check_read(spec, sections, check).map(|e| Some(ReadEffect::$kind(e)));
                })*
                Some(None)
            }
        }

        impl ReadEffect {
            /// Its key (`sql`, `http`, `command`).
            pub fn key(&self) -> &'static str {
                match self {
                    $(ReadEffect::$kind(_) => stringify!($key),)*
                }
            }

            /// What a read of it does, for messages.
            pub fn reads(&self) -> Reads {
                match self {
                    $(ReadEffect::$kind(_) => <$module::$kind as Kind>::READS,)*
                }
            }

            /// Runs a read (see [`Kind::read`]).
            pub async fn read(&self, call: &dyn Call, variables: Map<String, Value>) -> Result<Output, String> {
                match self {
                    $(ReadEffect::$kind(read) => <$module::$kind as Kind>::read(read, call, variables).await,)*
                }
            }

            /// The URI variables it uses itself (see [`Kind::read_uses`]).
            pub fn uses(&self) -> &[String] {
                match self {
                    $(ReadEffect::$kind(read) => <$module::$kind as Kind>::read_uses(read),)*
                }
            }

            /// The MIME type of a body that is its value (see [`Kind::VALUE_MIME`]).
            pub fn value_mime(&self) -> &'static str {
                match self {
                    $(ReadEffect::$kind(_) => <$module::$kind as Kind>::VALUE_MIME,)*
                }
            }

            /// The block entry whose writes change what it reads (see [`Kind::watches`]).
            pub fn watches(&self) -> Option<&str> {
                match self {
                    $(ReadEffect::$kind(read) => <$module::$kind as Kind>::watches(read),)*
                }
            }
        }

        /// The effects' top-level blocks as a catalog file writes them,
        /// flattened into it.
        #[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
        pub struct BlockSpecs {
            $($($(#[doc = $block_doc])* #[serde(default)]
            pub $block: Option<IndexMap<String, <$block_module::$block_type as block::Block>::Spec>>,)?)*
        }

        /// The top-level keys of the effects' blocks.
        pub const BLOCK_KEYS: &[&str] = &[$($(stringify!($block),)?)*];

        /// Every effect's top-level block at one stage `S` of building a catalog.
        pub struct Blocks<S: block::Stage> {
            $($($(#[doc = $block_doc])* pub $block: S::Of<$block_module::$block_type>,)?)*
        }

        impl<S: block::Stage> Default for Blocks<S>
        where
            $($(S::Of<$block_module::$block_type>: Default,)?)*
        {
            fn default() -> Self {
                Blocks { $($($block: Default::default(),)?)* }
            }
        }

        impl<S: block::Stage> std::fmt::Debug for Blocks<S>
        where
            $($(S::Of<$block_module::$block_type>: std::fmt::Debug,)?)*
        {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Blocks")$($(.field(stringify!($block), &self.$block))?)*.finish()
            }
        }

        impl<S: block::Stage> Blocks<S> {
            /// Makes each block with `make`.
            pub fn build(make: &mut impl block::Build<S>) -> Blocks<S> {
                Blocks { $($($block: make.build::<$block_module::$block_type>(),)?)* }
            }

            /// Visits each block, in the order `effects!` lists them.
            pub fn each<'a>(&'a self, visit: &mut impl block::Each<'a, S>) {
                $($(visit.each::<$block_module::$block_type>(&self.$block);)?)*
            }

            /// Visits each block to change it.
            pub fn each_mut(&mut self, visit: &mut impl block::EachMut<S>) {
                $($(visit.each::<$block_module::$block_type>(&mut self.$block);)?)*
            }
        }

        impl BlockSpecs {
            /// The blocks written, an absent one empty.
            pub fn into_written(self) -> Blocks<block::Written> {
                Blocks { $($($block: self.$block.unwrap_or_default(),)?)* }
            }
        }

        $($(impl block::Registered for $block_module::$block_type {
            fn of<S: block::Stage>(blocks: &Blocks<S>) -> &S::Of<Self> {
                &blocks.$block
            }

            fn of_mut<S: block::Stage>(blocks: &mut Blocks<S>) -> &mut S::Of<Self> {
                &mut blocks.$block
            }
        })?)*

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
            /// once it reported why it cannot run (also when `run` names two).
            pub fn check(&self, sections: &Sections, check: &mut Check<'_>) -> Option<Option<Effect>> {
                let named = [$((stringify!($key), self.$key.is_some())),*];
                if !one_effect(&named, check, "`run`", "a tool runs one effect; split it into two tools") {
                    return None;
                }
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

            /// Its key under `run` (`sql`, `http`, `command`).
            pub fn key(&self) -> &'static str {
                match self {
                    $(Effect::$kind(_) => stringify!($key),)*
                }
            }

            /// Runs it, then `finish` (see [`Kind::run`]).
            pub async fn run<T, F, Fut>(&self, call: &dyn Call, arguments: Map<String, Value>, finish: F) -> Result<T, Failure<T>>
            where
                F: FnOnce(Output) -> Fut,
                Fut: Future<Output = Result<T, T>>,
            {
                match self {
                    $(Effect::$kind(effect) => effect.run(call, arguments, finish).await,)*
                }
            }
        }
    };
}

effects! {
    /// Runs one SQL statement on a `databases` entry; its rows are `rows` in the result template.
    sql: sql::Sql(sql::SqlSpec) {
        /// Named databases for `sql` tools.
        databases: sql::Databases
    } read {
        /// Reads its body from a database: a read-only statement (in a resource template, its
        /// `:name` parameters are the URI template's variables); `text` or `template` see its rows as
        /// `rows` (without either, the body is the rows as JSON). Subscribers get
        /// `notifications/resources/updated` when a tool's write changes what it reads.
    },
    /// Sends one HTTP request to an `apis` entry; the answer is `status`, `headers`, `body` and `json` in the result template.
    http: http::Http(http::HttpSpec) {
        /// Named HTTP APIs for `http` tools.
        apis: http::Apis
    } read {
        /// Reads its body from an `apis` entry with one GET request (the URI's variables fill the
        /// path and query templates); `text` or `template` see `status`, `headers`, `body` and
        /// `json` (without either, the body is `json`).
    },
    /// Runs a program (never a shell); its `stdout`, `stderr` and `exit_code` are in the result template.
    command: command::Command(command::CommandSpec) {} read {
        /// Reads its body from a program's output (never a shell; the URI's variables fill the argv
        /// templates); `text` or `template` see `stdout`, `stderr` and `exit_code` (without either,
        /// the body is `stdout`).
    },
}
