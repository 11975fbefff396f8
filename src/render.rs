//! The minijinja environment of one catalog snapshot: the templates folder
//! and inline templates, `fail()`, `data:` (whose missing keys are errors
//! naming the path, not empty strings: [`data_value`]), filters and tests
//! known to templates (checked at load), and the bounds that keep one render
//! from hurting the server.
//!
//! Every template is compiled and checked when the catalog loads (the files
//! of the templates folder are read then, not lazily), so syntax errors are
//! catalog diagnostics, not runtime surprises. The snapshot keeps only the
//! sources and compiles each template again on first use: a compiled
//! template costs about 12 KiB, which a 10,000-tool catalog cannot afford
//! for tools nobody calls. The sources never change, so neither does a
//! snapshot under a request.
//!
//! # What a render may cost
//! - **Where it runs**: first [`inline`], where the request is answered,
//!   with [`INLINE_FUEL`]; a render that runs out of that slice is started
//!   again (renders have no side effects) with the full fuel on the render
//!   pool ([`pooled`], see `pool`: at most [`max_concurrent_renders`] at
//!   once, in fair turns between callers). So the common render makes no
//!   thread hand-off, and a slow one never delays a `ping`, `/healthz` or
//!   another client.
//! - **Time and data: fuel.** Each render has [`FUEL`] (2,000,000). minijinja
//!   charges one fuel per instruction, and 1/64 fuel per byte of every
//!   string and per list slot (32 bytes) that operators, literals, filters,
//!   functions and the output create. carte's patch of minijinja
//!   (`patches/README.md`) makes every size a template chooses paid for
//!   before it is built — list `+`/`*` (kept shallow: lazy views nest at
//!   most 32 deep), string `+`, `~`, `*`, escaping, output — so a render
//!   creates at most about 128 MiB of data in total (nothing is refunded
//!   when freed): doubling a list or a string in a loop stops at the fuel.
//! - **Filters that build before they are charged**: minijinja's `join`
//!   without a joiner, `tojson`, `string` and `pprint` build their whole
//!   result and only then charge for it (`(['x'*10**6]*3000)|join` built
//!   3 GB and aborted the process). carte replaces `join` with a version
//!   that stops while building, and measures the other three before calling
//!   minijinja's, each within [`MAX_STRING_BYTES`] and what the fuel left
//!   can pay for: "the template used too much memory: `join` would build
//!   more than 8 MiB". Short of [`MAX_STRING_BYTES`], that refusal is out of
//!   fuel, so an inline attempt is made again with the full fuel.
//! - **jq**: steps charged to the fuel, values to a byte budget (see `jq`).
//! - **Output**: at most [`MAX_OUTPUT_BYTES`] per render (a capped writer).
//!
//! A counting global allocator cannot bound a render: it may not unwind,
//! and a null return aborts the process, so it could only observe.

mod bounded;
mod builtins;
mod data;
pub mod jq;
mod pool;

pub use builtins::{filter_names, global_names, has_filter, has_test, test_names};

use bounded::{BYTES_PER_FUEL, byte_budget, join, pprint, string, tojson};
pub use data::{auth_value, data_value};
use data::{default, is_absent, missing_error};
pub use pool::{Caller, RENDER_WAIT, max_concurrent_renders};

use std::collections::HashSet;

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, State, Value};

/// Work one render may do (about one unit per instruction); generous for any
/// real template, small enough that `{% for i in range(10**9) %}` stops.
pub const FUEL: u64 = 2_000_000;

/// The largest output of one render (a tool result, a message, a resource).
pub const MAX_OUTPUT_BYTES: usize = 8 << 20;

/// The largest string one filter (`join`, `tojson`, `string`, `pprint`) may build.
pub const MAX_STRING_BYTES: usize = 8 << 20;

/// Why a render failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The template called `fail("message")`.
    #[error("{0}")]
    Failed(String),
    /// Anything else that went wrong while rendering.
    #[error("{0}")]
    Template(String),
}

#[derive(Debug)]
struct FailCalled(String);

impl std::fmt::Display for FailCalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FailCalled {}

fn fail(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(FailCalled(message)))
}

/// A fresh environment with carte's settings and functions.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    // Output is text or JSON for a model, never HTML: no auto-escaping.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    // `none` (SQL NULL, JSON null) prints as nothing, not "None".
    // A missing key of `data` is an error where it is printed (see `data_value`).
    env.set_formatter(|out, state, value| {
        if let Some(err) = missing_error(value) {
            return Err(err);
        }
        if value.is_none() {
            return Ok(());
        }
        if matches!(state.auto_escape(), minijinja::AutoEscape::Custom(name) if name == URL_ESCAPE) {
            return write_url_escaped(out, value);
        }
        // Without auto-escaping, a string prints as it is: straight out,
        // without the formatting machinery.
        if let Some(text) = value.as_str() {
            return out.write_str(text).map_err(Error::from);
        }
        minijinja::escape_formatter(out, state, value)
    });
    env.add_function("fail", fail);
    // Tests for presence that see a missing key of `data` as undefined.
    env.add_test("defined", |value: &Value| !is_absent(value));
    env.add_test("undefined", |value: &Value| is_absent(value));
    env.add_filter("default", default);
    env.add_filter("d", default);
    // Builtins that build their whole result before minijinja charges fuel
    // for it: the same filters, measured first (see the module doc).
    env.add_filter("join", join);
    env.add_filter("tojson", tojson);
    env.add_filter("string", string);
    env.add_filter("pprint", pprint);
    env.add_filter("jq", jq_filter);
    env.add_filter("round", round);
    env
}

/// minijinja's `round`, without its trip through text (formatting the float
/// and parsing it back) for the common case, a float rounded to a whole
/// number: the same value (half to even, as that formatting rounds).
fn round(value: Value, precision: Option<i32>, method: Option<&str>, kwargs: Kwargs) -> Result<Value, Error> {
    if precision.is_none()
        && method.is_none()
        && value.is_number()
        && !value.is_integer()
        && kwargs.args().next().is_none()
        && let Ok(float) = f64::try_from(value.clone())
    {
        return Ok(Value::from(float.round_ties_even()));
    }
    minijinja::filters::round(value, precision, method, kwargs)
}

/// The templates of one catalog, ready to render: the same sources in two
/// environments that differ only in their fuel, [`INLINE_FUEL`] for the
/// first attempt on the request's own thread and [`FUEL`] for the pool
/// (see [`inline`]). Each compiles a template from `sources` the first time
/// it renders it. Templates named in `url_templates` build URL paths: each
/// value they print is percent-encoded (see [`write_url_escaped`]).
pub struct Templates {
    inline: Environment<'static>,
    full: Environment<'static>,
}

impl Templates {
    /// The templates of `sources`, by name.
    pub fn new(sources: std::collections::HashMap<String, String>, url_templates: HashSet<String>) -> Templates {
        let (sources, url_templates) = (std::sync::Arc::new(sources), std::sync::Arc::new(url_templates));
        let environment = |fuel| {
            let mut env = catalog_environment(sources.clone(), url_templates.clone());
            env.set_fuel(Some(fuel));
            env
        };
        Templates { inline: environment(INLINE_FUEL), full: environment(FUEL) }
    }

    /// The environment of the attempt this thread is in (see [`inline`]).
    fn current(&self) -> &Environment<'static> {
        if ATTEMPT.get() == Attempt::Full { &self.full } else { &self.inline }
    }
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Templates").finish_non_exhaustive()
    }
}

/// [`environment`] plus a loader that compiles each template from `sources`
/// the first time it is used, and the URL escape of `url_templates`.
fn catalog_environment(
    sources: std::sync::Arc<std::collections::HashMap<String, String>>,
    url_templates: std::sync::Arc<HashSet<String>>,
) -> Environment<'static> {
    let mut env = environment();
    env.set_loader(move |name| Ok(sources.get(name).cloned()));
    env.set_auto_escape_callback(move |name| {
        if url_templates.contains(name) {
            minijinja::AutoEscape::Custom(URL_ESCAPE.into())
        } else {
            minijinja::AutoEscape::None
        }
    });
    env
}

/// The name of the auto-escape of URL path templates.
const URL_ESCAPE: &str = "url-segment";

/// What a value printed into a URL path keeps as it is: RFC 3986's
/// unreserved characters. Everything else (`/`, `?`, `#`, `%`, `\`, spaces,
/// non-ASCII) is percent-encoded, so a value stays inside its segment.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Prints `value` percent-encoded for a URL path segment (`safe` or not:
/// no value may change the URL's shape). A lone `.` or `..` is left as it
/// is and refused by the `http` effect when it makes a whole segment.
fn write_url_escaped(out: &mut minijinja::Output<'_>, value: &Value) -> Result<(), Error> {
    let text = match value.as_str() {
        Some(text) => std::borrow::Cow::Borrowed(text),
        None => std::borrow::Cow::Owned(value.to_string()),
    };
    write!(out, "{}", percent_encoding::utf8_percent_encode(&text, SEGMENT)).map_err(Error::from)
}

/// Fuel of a render's first attempt, on the request's own thread: 1% of
/// [`FUEL`], a few hundred microseconds at most, and far more than a
/// template that formats a quote or a few rows needs.
pub const INLINE_FUEL: u64 = FUEL / 100;

/// Which attempt renders on this thread: [`render`] takes the environment
/// of the attempt, and marks an inline attempt whose fuel ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// On the pool, or outside [`inline`]: the full [`FUEL`].
    Full,
    /// Inside [`inline`], with [`INLINE_FUEL`].
    Inline,
    /// Inside [`inline`], after a render ran out of [`INLINE_FUEL`]: the
    /// attempt's result is thrown away and the work is done again on the pool.
    Exhausted,
}

thread_local! {
    static ATTEMPT: std::cell::Cell<Attempt> = const { std::cell::Cell::new(Attempt::Full) };
}

/// Runs `work` (something that renders templates) here and now with
/// [`INLINE_FUEL`] per render: its result, or `None` when one of its
/// renders ran out of that fuel — then the caller does the same work again
/// with [`pooled`], which has the full fuel. Renders have no side effects,
/// so doing one again changes nothing. Almost every render finishes here:
/// no thread hand-off, no allocation beyond the render's own.
pub fn inline<T>(work: impl FnOnce() -> T) -> Option<T> {
    struct Restore(Attempt);
    impl Drop for Restore {
        fn drop(&mut self) {
            ATTEMPT.set(self.0);
        }
    }
    let _restore = Restore(ATTEMPT.replace(Attempt::Inline));
    let done = work();
    (ATTEMPT.get() == Attempt::Inline).then_some(done)
}

/// Runs `work` on the render pool with the full [`FUEL`] per render, in
/// `caller`'s turn (see [`pool`]): what a render that did not fit
/// [`inline`] does. The slot is held by the work itself, so a request
/// dropped while its render runs does not free it early.
pub async fn pooled<T, F>(caller: Caller, work: F) -> Result<T, RenderError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let slot = pool::POOL.turn(caller).await?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        ATTEMPT.set(Attempt::Full);
        work()
    })
    .await
    .map_err(|err| RenderError::Template(format!("the render stopped unexpectedly: {err}")))
}

/// [`inline`], then [`pooled`] if it did not fit: for work that owns what it
/// renders (`Clone`), such as a catalog and a name.
pub async fn inline_first<T, F>(caller: impl FnOnce() -> Caller, work: F) -> Result<T, RenderError>
where
    F: Fn() -> T + Send + 'static,
    T: Send + 'static,
{
    match inline(&work) {
        Some(done) => Ok(done),
        None => pooled(caller(), work).await,
    }
}

/// The names a template sees (arguments, `data`, `auth`, step results…) as
/// one template value. The map itself is the value (minijinja looks a name up
/// in it directly), not copied into a template map, which hashes every name
/// once to build it and again at every lookup.
pub fn scope(names: std::collections::BTreeMap<String, Value>) -> Value {
    Value::from_object(names)
}

/// Converts any serializable value (JSON from the catalog or a client) into
/// a template value.
pub fn to_value<T: serde::Serialize>(value: &T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

/// Renders the template `name` of `templates` with `context`, into at
/// most [`MAX_OUTPUT_BYTES`], with the fuel of this thread's attempt.
/// In an [`inline`] attempt, with [`INLINE_FUEL`]: a render that runs out
/// of it marks the attempt exhausted (and later renders of the attempt are
/// not even started).
pub fn render(templates: &Templates, name: &str, context: Value) -> Result<String, RenderError> {
    if ATTEMPT.get() == Attempt::Exhausted {
        return Err(RenderError::Template("this attempt ran out of its fuel".to_owned()));
    }
    let rendered = render_with(templates.current(), name, context);
    if let Err(Refused::OutOfFuel(_)) = &rendered
        && ATTEMPT.get() == Attempt::Inline
    {
        ATTEMPT.set(Attempt::Exhausted);
    }
    rendered.map_err(RenderError::from)
}

/// Renders `name` of `env` (an environment of its own, as checks and tests
/// make: its own fuel, no attempt) into at most [`MAX_OUTPUT_BYTES`].
pub fn render_in(env: &Environment<'_>, name: &str, context: Value) -> Result<String, RenderError> {
    render_with(env, name, context).map_err(RenderError::from)
}

/// Why [`render_with`] gave no text.
enum Refused {
    /// The render's fuel ran out (or could not pay for what it was about to build).
    OutOfFuel(Error),
    /// Any other error.
    Error(RenderError),
}

impl From<Refused> for RenderError {
    fn from(refused: Refused) -> RenderError {
        match refused {
            Refused::OutOfFuel(err) => RenderError::Template(describe(&err)),
            Refused::Error(err) => err,
        }
    }
}

/// Renders `name` of `env` into at most [`MAX_OUTPUT_BYTES`].
fn render_with(env: &Environment<'_>, name: &str, context: Value) -> Result<String, Refused> {
    let template = env.get_template(name).map_err(|err| Refused::Error(RenderError::Template(describe(&err))))?;
    let mut output = CappedOutput { bytes: Vec::new(), full: false };
    match template.render_captured_to(context, &mut output) {
        Ok(_) => String::from_utf8(output.bytes)
            .map_err(|_| Refused::Error(RenderError::Template("the template's output is not UTF-8".to_owned()))),
        Err(_) if output.full => Err(Refused::Error(RenderError::Template(format!(
            "the template's output is larger than {}; it was stopped",
            size_text(MAX_OUTPUT_BYTES)
        )))),
        Err(err) if out_of_fuel(&err) => Err(Refused::OutOfFuel(err)),
        Err(err) => Err(Refused::Error(match find_fail(&err) {
            Some(message) => RenderError::Failed(message),
            None => RenderError::Template(describe(&err)),
        })),
    }
}

/// Whether `err`, or an error it was caused by, is minijinja's
/// [`ErrorKind::OutOfFuel`] (a refusal for what the fuel left could not pay
/// for is one too: see [`bounded`] and [`jq_filter`]).
fn out_of_fuel(err: &Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = current {
        if error.downcast_ref::<Error>().is_some_and(|err| err.kind() == ErrorKind::OutOfFuel) {
            return true;
        }
        current = error.source();
    }
    false
}

/// The output of a render, refusing to grow past [`MAX_OUTPUT_BYTES`].
struct CappedOutput {
    bytes: Vec<u8>,
    full: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > MAX_OUTPUT_BYTES {
            self.full = true;
            return Err(std::io::Error::other("output limit reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `bytes` for a person: "16 MiB", "640 KiB", "12 bytes".
fn size_text(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// jq steps one fuel pays for: a render's fuel pays for eight full
/// [`jq::STEPS`] runs.
const JQ_STEPS_PER_FUEL: u64 = 4;

/// `jq(filter)`: the outputs of the jq `filter` on the value (see
/// [`jq`]): one output as it is, several (or none) as a list. Its steps and
/// the bytes it reads and gives are charged to the render's fuel.
fn jq_filter(state: &State<'_, '_>, value: &Value, filter: &str) -> Result<Value, Error> {
    if let Some(err) = missing_error(value) {
        return Err(err);
    }
    let steps =
        state.fuel_levels().map_or(jq::STEPS, |(_, left)| left.saturating_mul(JQ_STEPS_PER_FUEL).min(jq::STEPS));
    let byte_limit = byte_budget(state);
    let ran = jq::run(filter, value, steps, byte_limit);
    let bytes = u64::try_from(ran.bytes).unwrap_or(u64::MAX);
    state.consume_fuel(ran.steps / JQ_STEPS_PER_FUEL + bytes / BYTES_PER_FUEL)?;
    // A run that spent budgets cut to the fuel left is out of fuel (so an
    // inline attempt is made again with the full fuel).
    let fuel_bound = steps < jq::STEPS || byte_limit < MAX_STRING_BYTES;
    let kind = if ran.spent && fuel_bound { ErrorKind::OutOfFuel } else { ErrorKind::InvalidOperation };
    ran.result.map_err(|err| Error::new(kind, err.to_string()))
}

fn find_fail(err: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(current) = source {
        if let Some(failed) = current.downcast_ref::<FailCalled>() {
            return Some(failed.0.clone());
        }
        source = current.source();
    }
    None
}

/// One line saying what went wrong and where, for a person.
pub fn describe(err: &Error) -> String {
    let mut message = match err.detail() {
        Some(detail) => format!("{}: {detail}", kind_text(err.kind())),
        None => kind_text(err.kind()).to_owned(),
    };
    // A refusal for what the fuel left could not pay for names what it
    // refused (`join` would build more than …); minijinja's own says nothing.
    if err.kind() == ErrorKind::OutOfFuel && err.detail().is_none() {
        message = "template did too much work or built too much data (a runaway loop?) and was stopped".to_owned();
    } else if err.kind() == ErrorKind::OutOfFuel {
        message = err.detail().unwrap_or_default().to_owned();
    }
    if let (Some(name), Some(line)) = (err.name(), err.line()) {
        message.push_str(&format!(" (in template {}, line {line})", crate::diag::template_place(name)));
    }
    message
}

fn kind_text(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::SyntaxError => "syntax error",
        ErrorKind::UndefinedError => "undefined value",
        ErrorKind::UnknownFilter => "unknown filter",
        ErrorKind::UnknownFunction => "unknown function",
        ErrorKind::UnknownTest => "unknown test",
        ErrorKind::TemplateNotFound => "template not found",
        ErrorKind::InvalidOperation => "invalid operation",
        ErrorKind::BadSerialization => "value cannot be serialized",
        ErrorKind::CannotDeserialize => "value cannot be read",
        ErrorKind::MissingArgument => "missing argument",
        ErrorKind::TooManyArguments => "too many arguments",
        ErrorKind::NonKey => "not a valid key",
        ErrorKind::NonPrimitive => "not a primitive value",
        ErrorKind::BadEscape => "bad string escape",
        ErrorKind::BadInclude => "bad include",
        ErrorKind::EvalBlock => "error in block",
        _ => "template error",
    }
}

#[cfg(test)]
mod tests;
