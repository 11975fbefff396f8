//! The minijinja environment of one catalog snapshot: the templates folder
//! and inline templates, `fail()`, and a fuel bound so that a runaway loop
//! in a catalog cannot hang the server.
//!
//! Every template is compiled and checked when the catalog loads (the files
//! of the templates folder are read then, not lazily), so syntax errors are
//! catalog diagnostics, not runtime surprises. The snapshot keeps only the
//! sources and compiles each template again on first use: a compiled
//! template costs about 12 KiB, which a 10,000-tool catalog cannot afford
//! for tools nobody calls. The sources never change, so neither does a
//! snapshot under a request.

use std::collections::HashSet;

use minijinja::{Environment, Error, ErrorKind, Value};

/// Work one render may do (about one unit per instruction); generous for any
/// real template, small enough that `{% for i in range(10**9) %}` stops.
pub const FUEL: u64 = 2_000_000;

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
    env.set_formatter(
        |out, state, value| {
            if value.is_none() { Ok(()) } else { minijinja::escape_formatter(out, state, value) }
        },
    );
    env.add_function("fail", fail);
    env
}

/// The environment a catalog renders with: [`environment`] plus a loader
/// that compiles each template from `sources` the first time it is used.
pub fn catalog_environment(sources: std::collections::HashMap<String, String>) -> Environment<'static> {
    let mut env = environment();
    env.set_loader(move |name| Ok(sources.get(name).cloned()));
    env
}

/// Renders that may run at once: each runs on the blocking pool, so
/// rendering never holds a runtime thread (a slow render does not delay a
/// `ping` or `/healthz`); the bound keeps CPU and the memory of renders in
/// flight (each bounded by [`FUEL`], see the module doc) proportional to the
/// cores, however many requests arrive. Later renders wait their turn
/// without holding a thread.
pub fn max_concurrent_renders() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get).max(2)
}

static RENDER_SLOTS: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| std::sync::Arc::new(tokio::sync::Semaphore::new(max_concurrent_renders())));

/// Runs `work` (something that renders templates) on the blocking pool,
/// at most [`max_concurrent_renders`] at once. The slot is held by the work
/// itself, so a request dropped while its render runs does not free it early.
pub async fn off_thread<T, F>(work: F) -> Result<T, RenderError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let slot = RENDER_SLOTS
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RenderError::Template("rendering has shut down".to_owned()))?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|err| RenderError::Template(format!("the render stopped unexpectedly: {err}")))
}

/// Converts any serializable value (JSON from the catalog or a client) into
/// a template value.
pub fn to_value<T: serde::Serialize>(value: &T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

/// Names every template may use without declaring them: globals and
/// functions of the environment (`fail`, `range`, `namespace`, …).
pub fn global_names(env: &Environment<'_>) -> HashSet<String> {
    let mut names: HashSet<String> = env.globals().map(|(name, _)| name.to_owned()).collect();
    // Tests and loop helpers that undeclared_variables may report.
    names.extend(["loop", "self", "super", "caller", "varargs", "kwargs"].map(String::from));
    names
}

/// Renders the template `name` with `context`.
pub fn render(env: &Environment<'_>, name: &str, context: Value) -> Result<String, RenderError> {
    let template = env.get_template(name).map_err(|err| RenderError::Template(describe(&err)))?;
    template.render(context).map_err(|err| match find_fail(&err) {
        Some(message) => RenderError::Failed(message),
        None => RenderError::Template(describe(&err)),
    })
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
    if err.kind() == ErrorKind::OutOfFuel {
        message = "template did too much work (a runaway loop?) and was stopped".to_owned();
    }
    if let (Some(name), Some(line)) = (err.name(), err.line()) {
        message.push_str(&format!(" (in template {name}, line {line})"));
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
mod tests {
    use super::*;

    #[test]
    fn fail_is_an_error_with_the_message() {
        let mut env = environment();
        env.add_template("t", "{% if n < 1 %}{{ fail('hours must be at least 1') }}{% endif %}ok").unwrap();
        let err = render(&env, "t", minijinja::context! { n => 0 }).unwrap_err();
        assert_eq!(err, RenderError::Failed("hours must be at least 1".to_owned()));
        assert_eq!(render(&env, "t", minijinja::context! { n => 2 }).unwrap(), "ok");
    }

    #[test]
    fn runaway_loops_stop() {
        let mut env = environment();
        env.add_template("t", "{% for i in range(10000) %}{% for j in range(10000) %}{{ j }}{% endfor %}{% endfor %}")
            .unwrap();
        let err = render(&env, "t", minijinja::context! {}).unwrap_err();
        assert!(matches!(err, RenderError::Template(ref m) if m.contains("runaway")), "{err:?}");
    }
}
