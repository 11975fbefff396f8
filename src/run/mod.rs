//! Running a tool: check the arguments against `inputSchema`, run the
//! effect (if any), then render the result.
//!
//! Each effect is a module of [`crate::effect`] (`sql`, `http`, `command`):
//! it takes the arguments (and renders its own templates through
//! [`Running`], this call's [`effect::Call`]) and gives the variables its
//! result template sees (`rows` for `sql`). The result is rendered before the effect's work is final: `sql`
//! hands its rows to the render inside the statement's transaction
//! ([`crate::effect::sql::engine::Database::transact`]) and commits only if
//! the result succeeded, so a result that fails (`fail()`, a render error,
//! an `outputSchema` violation, the timeout, a cancelled call) changes
//! nothing and a retry cannot do the work twice. Steps (which may wait for
//! a person) all run before the effect, never inside a transaction.
//!
//! Every failure a caller can cause or a catalog can hit at run time becomes
//! an `isError` result, never a crash and never a protocol error.

pub mod steps;

use std::collections::BTreeMap;
use std::sync::Arc;

use minijinja::Value as TemplateValue;
use serde_json::{Map, Value};

use crate::catalog::model::LogLevel;
use crate::catalog::{Catalog, ResultSpec, Tool};
use crate::content::{Output, render_block};
use crate::effect::{self, CallFuture, Failure, Template};
use crate::metrics;
use crate::render::{self, RenderError};

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// Content blocks.
    pub blocks: Vec<Output>,
    /// `structuredContent`, for tools with `outputSchema` or `json: true`.
    pub structured: Option<Value>,
    /// Whether the call failed.
    pub is_error: bool,
    /// The `databases` entry the call's committed write changed, if any:
    /// the resources that read it may have changed (live resources).
    pub changed: Option<String>,
}

impl ToolOutcome {
    /// A failed call with one text block saying why.
    pub fn error(message: impl Into<String>) -> ToolOutcome {
        ToolOutcome { blocks: vec![Output::Text(message.into())], structured: None, is_error: true, changed: None }
    }
}

/// Why a call gave no result.
#[derive(Debug)]
pub enum Halted {
    /// The client cancelled the call: it gets no result.
    Cancelled,
    /// The client must answer questions first (see [`steps::InputRequired`]).
    InputRequired(steps::InputRequired),
}

/// Calls `tool` of `catalog` with `arguments`, on behalf of `client`,
/// starting its steps at `resume` (see [`steps::run`]).
pub async fn call(
    catalog: &Arc<Catalog>,
    tool: &Tool,
    arguments: Map<String, Value>,
    client: &dyn steps::Client,
    resume: steps::Resume,
) -> Result<ToolOutcome, Halted> {
    let (arguments, mut context) = match start(catalog, tool, arguments, client) {
        Ok(started) => started,
        Err(message) => return Ok(ToolOutcome::error(message)),
    };
    match run_steps(catalog, tool, &mut context, client, resume, None).await? {
        Err(outcome) => Ok(outcome),
        // A cancelled call drops its effect, which stops its work (an SQL
        // statement) and rolls back a write whose result was rendering.
        Ok(_) => tokio::select! {
            outcome = finish(catalog, tool, arguments, context, client) => Ok(redact_error(outcome)),
            () = client.until_cancelled() => Err(Halted::Cancelled),
        },
    }
}

/// Runs the steps of `tool` from `resume` up to `stop_before` (see
/// [`steps::run`]): where the rest resumes, the error result a failed step
/// ends the call with, or why the call halted.
async fn run_steps(
    catalog: &Arc<Catalog>,
    tool: &Tool,
    context: &mut Context,
    client: &dyn steps::Client,
    resume: steps::Resume,
    stop_before: Option<usize>,
) -> Result<Result<steps::Resume, ToolOutcome>, Halted> {
    if tool.steps.is_empty() && resume.step == 0 {
        // Nothing to run (and no message to name the tool in).
        return Ok(Ok(resume));
    }
    let what = format!("tool `{}`", tool.name);
    let owner = steps::Owner { catalog, what: &what };
    // Boxed: most tools have no steps, and a call carries the size of every
    // future it may await.
    match Box::pin(steps::run(owner, &tool.steps, context, client, resume, stop_before)).await {
        Ok(resume) => Ok(Ok(resume)),
        Err(steps::Stopped::Cancelled) => Err(Halted::Cancelled),
        Err(steps::Stopped::Failed(message)) => Ok(Err(ToolOutcome::error(message))),
        Err(steps::Stopped::InputRequired(asked)) => Err(Halted::InputRequired(asked)),
    }
}

/// What templates see, by name.
type Context = BTreeMap<String, TemplateValue>;

/// The arguments checked, and the context templates see before any step
/// (with `auth`, the claims of `client`'s verified caller); else what the
/// error result says.
fn start(
    catalog: &Catalog,
    tool: &Tool,
    arguments: Map<String, Value>,
    client: &dyn steps::Client,
) -> Result<(Map<String, Value>, Context), String> {
    let arguments = check_arguments(tool, arguments)?;
    // One conversion: each argument's value is shared with `arguments`.
    let all = crate::render::to_value(&arguments);
    let mut context: Context =
        arguments.keys().map(|key| (key.clone(), all.get_attr(key).unwrap_or(TemplateValue::UNDEFINED))).collect();
    context.insert("arguments".to_owned(), all);
    context.insert("data".to_owned(), catalog.data.clone());
    context.insert("auth".to_owned(), crate::render::auth_value(client.caller()));
    Ok((arguments, context))
}

/// Runs only the steps of `tool` before step `count` (its leading input
/// steps, for a task's `askFirst`), from `resume`: where the rest resumes
/// (the task then runs it), or the result that ends the call.
pub async fn ask_first(
    catalog: &Arc<Catalog>,
    tool: &Tool,
    arguments: Map<String, Value>,
    client: &dyn steps::Client,
    resume: steps::Resume,
    count: usize,
) -> Result<Result<steps::Resume, ToolOutcome>, Halted> {
    let (_, mut context) = match start(catalog, tool, arguments, client) {
        Ok(started) => started,
        Err(message) => return Ok(Err(ToolOutcome::error(message))),
    };
    run_steps(catalog, tool, &mut context, client, resume, Some(count)).await
}

/// An error result with secrets from `${VAR}` hidden: an effect's error
/// (a URL, a program's stderr) may quote one.
fn redact_error(mut outcome: ToolOutcome) -> ToolOutcome {
    if outcome.is_error {
        for block in &mut outcome.blocks {
            if let Output::Text(text) = block
                && let std::borrow::Cow::Owned(redacted) = crate::secret::redact(text)
            {
                *text = redacted;
            }
        }
    }
    outcome
}

/// The arguments, if they satisfy `inputSchema`; else what the error result says.
fn check_arguments(tool: &Tool, arguments: Map<String, Value>) -> Result<Map<String, Value>, String> {
    if let Some(unknown) = tool.undeclared_argument(arguments.keys().map(String::as_str)) {
        let names = tool.argument_names();
        let close = crate::diag::did_you_mean(unknown, names.iter().copied())
            .map(|close| format!(" (did you mean `{close}`?)"))
            .unwrap_or_default();
        let listed = match names.is_empty() {
            true => "it takes none".to_owned(),
            false => format!("its arguments: {}", names.join(", ")),
        };
        return Err(format!("tool `{}` has no argument `{unknown}`{close}; {listed}", tool.name));
    }
    let arguments = Value::Object(arguments);
    let input = tool
        .input_validator()
        .map_err(|err| format!("tool `{}` has an inputSchema that cannot be compiled: {err}", tool.name))?;
    if !input.is_valid(&arguments) {
        let violations = list_violations(input.iter_errors(&arguments));
        return Err(format!("invalid arguments for tool `{}`: {violations}", tool.name));
    }
    match arguments {
        Value::Object(arguments) => Ok(arguments),
        _ => Err("arguments must be an object".to_owned()),
    }
}

/// Runs the effect and renders the result, inline first (see
/// [`render::inline`]): a slow template never holds a runtime thread.
/// A statement that writes is committed only once its result rendered (and
/// matched `outputSchema`): a result that fails rolls it back.
async fn finish(
    catalog: &Arc<Catalog>,
    tool: &Tool,
    arguments: Map<String, Value>,
    context: BTreeMap<String, TemplateValue>,
    client: &dyn steps::Client,
) -> ToolOutcome {
    let Some(effect) = &tool.effect else {
        return render_outcome(catalog, tool, context, None, client).await;
    };
    let call = Running { catalog: Arc::clone(catalog), variables: crate::render::scope(context.clone()), client };
    let started = std::time::Instant::now();
    // Boxed: an effect's future (a transaction, a request) is kilobytes that a
    // tool without one would otherwise carry through every call.
    let outcome = Box::pin(effect.run(&call, arguments, |output| {
        let (mut context, mut effect_result) = (context, None);
        let changed = output.changed;
        for (name, value) in output.variables {
            context.insert(name, crate::render::to_value(&value));
            effect_result = Some(value);
        }
        async move {
            let mut outcome = render_outcome(catalog, tool, context, effect_result, client).await;
            if outcome.is_error {
                return Err(outcome);
            }
            // What the model reading the result must know (e.g. rows were left out).
            outcome.blocks.extend(output.notice.map(Output::Text));
            // `Ok` commits the effect's work: from then on, it changed this database.
            outcome.changed = changed;
            Ok(outcome)
        }
    }))
    .await;
    metrics::effect(effect.key(), started.elapsed(), outcome.as_ref().err().map(Failure::error));
    match outcome {
        Ok(outcome) => outcome,
        Err(Failure::Refused { reason: mut outcome, undone }) => {
            outcome.blocks.extend(undone.map(|notice| Output::Text(notice.to_owned())));
            outcome
        }
        Err(Failure::Failed { reason, .. }) => ToolOutcome::error(format!("tool `{}` failed: {reason}", tool.name)),
    }
}

/// What a resource's effect runs through when `client` reads it: its
/// templates see `context` (the URI's variables, `data`, `uri` and what the
/// resource's steps produced).
pub fn resource_call<'c>(
    catalog: &Arc<Catalog>,
    context: &BTreeMap<String, TemplateValue>,
    client: &'c dyn steps::Client,
) -> impl effect::Call + 'c {
    Running { catalog: Arc::clone(catalog), variables: crate::render::scope(context.clone()), client }
}

/// A tool call (or a resource's read) as its effect sees it (see [`effect::Call`]).
struct Running<'c> {
    catalog: Arc<Catalog>,
    /// What the effect's templates see: the arguments, `arguments`, `data`
    /// and what the steps produced.
    variables: TemplateValue,
    client: &'c dyn steps::Client,
}

impl effect::Call for Running<'_> {
    fn render<'a>(&'a self, templates: &'a [Template]) -> CallFuture<'a, Result<Vec<Value>, String>> {
        if let Some(rendered) = render::inline(|| render_all(&self.catalog, templates, &self.variables)) {
            return Box::pin(std::future::ready(rendered));
        }
        let (catalog, variables, templates) = (Arc::clone(&self.catalog), self.variables.clone(), templates.to_vec());
        let caller = self.client.render_caller();
        Box::pin(async move {
            let rendered = render::pooled(caller, move || render_all(&catalog, &templates, &variables));
            rendered.await.map_err(|err| err.to_string()).and_then(|rendered| rendered)
        })
    }

    fn info<'a>(&'a self, logger: &'a str, message: String) -> CallFuture<'a, ()> {
        self.client.log(LogLevel::Info, logger, Value::String(message))
    }

    fn stated_answer(&self) -> Option<&effect::http::StatedAnswer> {
        self.client.stated_answer()
    }

    fn access_token(&self) -> Option<&effect::http::AccessToken> {
        self.client.access_token()
    }
}

/// Renders an effect's templates, each as [`render_one`].
fn render_all(catalog: &Catalog, templates: &[Template], variables: &TemplateValue) -> Result<Vec<Value>, String> {
    templates.iter().map(|template| render_one(catalog, template, variables)).collect()
}

/// Renders one of an effect's templates: its text, or the value of its one
/// expression (see [`Template::typed`]).
fn render_one(catalog: &Catalog, template: &Template, variables: &TemplateValue) -> Result<Value, String> {
    let Some(typed) = &template.typed else {
        return render::render(&catalog.templates, &template.name, variables.clone())
            .map(Value::String)
            .map_err(|e| e.to_string());
    };
    let json = render::render(&catalog.templates, typed, variables.clone()).map_err(|err| err.to_string())?;
    serde_json::from_str(&json).map_err(|err| format!("`{}` gave no JSON value: {err}", template.name))
}

/// Renders the result of `tool` with `context`, inline first (see
/// [`render::inline`]), on `client`'s turn of the render pool if it does not fit.
async fn render_outcome(
    catalog: &Arc<Catalog>,
    tool: &Tool,
    context: BTreeMap<String, TemplateValue>,
    effect_result: Option<Value>,
    client: &dyn steps::Client,
) -> ToolOutcome {
    let context = crate::render::scope(context);
    if let Some(outcome) = render::inline(|| render_result(catalog, tool, context.clone(), effect_result.as_ref())) {
        return outcome;
    }
    let (catalog, name) = (Arc::clone(catalog), tool.name.clone());
    let rendered = render::pooled(client.render_caller(), move || match catalog.tool(&name) {
        Some(tool) => render_result(&catalog, tool, context, effect_result.as_ref()),
        None => ToolOutcome::error(format!("tool `{name}` is gone")),
    });
    rendered.await.unwrap_or_else(render_failure)
}

/// Renders the result of `tool` with `context` (templates run here).
fn render_result(catalog: &Catalog, tool: &Tool, context: TemplateValue, effect_result: Option<&Value>) -> ToolOutcome {
    match &tool.result {
        ResultSpec::Text(template) => match render::render(&catalog.templates, template, context) {
            Ok(text) => finish_text(tool, text),
            Err(err) => render_failure(err),
        },
        ResultSpec::EffectJson => finish_text(tool, effect_result.unwrap_or(&Value::Null).to_string()),
        ResultSpec::Content(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for block in blocks {
                match render_block(catalog, block, &context) {
                    Ok(output) => out.push(output),
                    Err(crate::content::BlockError::Render(err)) => return render_failure(err),
                    Err(err) => return ToolOutcome::error(err.to_string()),
                }
            }
            ToolOutcome { blocks: out, structured: None, is_error: false, changed: None }
        }
    }
}

fn render_failure(err: RenderError) -> ToolOutcome {
    ToolOutcome::error(err.to_string())
}

/// Turns rendered text into the outcome: plain text, or JSON that is also
/// `structuredContent` (checked against `outputSchema`).
fn finish_text(tool: &Tool, text: String) -> ToolOutcome {
    if !tool.structured {
        return ToolOutcome { blocks: vec![Output::Text(text)], structured: None, is_error: false, changed: None };
    }
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(err) => {
            return ToolOutcome::error(format!(
                "tool `{}` rendered text that is not valid JSON ({err}); a tool with `outputSchema` or `json: true` must render JSON",
                tool.name
            ));
        }
    };
    if let Some(output) = tool.output_validator() {
        let output = match output {
            Ok(output) => output,
            Err(err) => {
                return ToolOutcome::error(format!(
                    "tool `{}` has an outputSchema that cannot be compiled: {err}",
                    tool.name
                ));
            }
        };
        if !output.is_valid(&value) {
            let violations = list_violations(output.iter_errors(&value));
            return ToolOutcome::error(format!(
                "tool `{}` produced a result that does not match its outputSchema: {violations}",
                tool.name
            ));
        }
    }
    ToolOutcome { blocks: vec![Output::Text(text)], structured: Some(value), is_error: false, changed: None }
}

/// Most schema violations one error message lists; the rest are counted.
pub const MAX_VIOLATIONS: usize = 5;

/// Longest description of one violation, in bytes: a value quoted in it
/// (a 4 MiB string argument) is cut, not echoed back whole.
pub const MAX_VIOLATION_BYTES: usize = 300;

/// The first [`MAX_VIOLATIONS`] violations in words, each cut to
/// [`MAX_VIOLATION_BYTES`], then "and N more". The rest are only counted.
pub fn list_violations<'a>(violations: impl Iterator<Item = jsonschema::ValidationError<'a>>) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut more = 0usize;
    for violation in violations {
        if shown.len() < MAX_VIOLATIONS {
            shown.push(cut(describe_violation(&violation), MAX_VIOLATION_BYTES));
        } else {
            more += 1;
        }
    }
    let mut text = shown.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

/// `text`, or its first `max` bytes (at a character boundary) and "…".
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        text.truncate(prefix(&text, max).len());
        text.push('…');
    }
    text
}

/// The longest start of `text` that is at most `max` bytes and ends at a
/// character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One schema violation in words: the field and the rule it broke.
pub fn describe_violation(error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    let path = error.instance_path().as_str();
    let field = if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("`{}`", path.trim_start_matches('/').replace('/', "."))
    };
    let found: &Value = error.instance().as_ref();
    match error.kind() {
        Kind::Required { property } => {
            let name = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
            if path.is_empty() { format!("`{name}` is required") } else { format!("{field}.{name} is required") }
        }
        Kind::Type { kind } => format!("{field} must be of type {}, got {}", type_name(kind), json_type(found)),
        Kind::Enum { options } => {
            let options: Vec<String> =
                options.as_array().map(|o| o.iter().map(Value::to_string).collect()).unwrap_or_default();
            format!("{field} must be one of {}, got {found}", options.join(", "))
        }
        Kind::AdditionalProperties { unexpected } => {
            let names: Vec<String> = unexpected.iter().map(|n| format!("`{n}`")).collect();
            format!("unknown argument {} (additional properties are not allowed)", names.join(", "))
        }
        _ => format!("{field}: {error}"),
    }
}

fn type_name(kind: &jsonschema::error::TypeKind) -> String {
    match kind {
        jsonschema::error::TypeKind::Single(one) => one.to_string(),
        jsonschema::error::TypeKind::Multiple(many) => {
            many.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" or ")
        }
    }
}

fn json_type(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "boolean".to_owned(),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("integer {n}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            // Only the start of a long string is quoted: the description is cut anyway.
            let start = prefix(s, MAX_VIOLATION_BYTES);
            let quoted = Value::String(start.to_owned());
            if start.len() < s.len() {
                format!("string {}…", quoted.to_string().trim_end_matches('"'))
            } else {
                format!("string {quoted}")
            }
        }
        Value::Array(_) => "array".to_owned(),
        Value::Object(_) => "object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violations(schema: Value, instance: Value) -> String {
        let validator = jsonschema::validator_for(&schema).unwrap();
        list_violations(validator.iter_errors(&instance))
    }

    #[test]
    fn at_most_a_handful_of_violations_are_listed() {
        let schema = serde_json::json!({"type": "array", "items": {"type": "integer"}});
        let instance = Value::Array((0..1000).map(|n| Value::String(format!("v{n}"))).collect());
        let text = violations(schema, instance);
        assert_eq!(text.matches("must be").count() + text.matches("is not of type").count(), MAX_VIOLATIONS, "{text}");
        assert!(text.ends_with("; and 995 more"), "{text}");
    }

    #[test]
    fn quoted_values_are_cut() {
        let big = "x".repeat(4 << 20);
        let schema = serde_json::json!({"type": "object", "properties": {"room": {"type": "integer"}, "name": {"maxLength": 3}}});
        let text = violations(schema, serde_json::json!({"room": big, "name": big}));
        assert!(text.len() < 2 * MAX_VIOLATION_BYTES + 100, "{} bytes", text.len());
        assert!(text.contains("`room` must be of type integer, got string \"xxx"), "{text}");
        assert!(text.contains('…'), "{text}");
    }

    #[test]
    fn cut_respects_character_boundaries() {
        assert_eq!(cut("ééé".to_owned(), 3), "é…");
        assert_eq!(cut("abc".to_owned(), 3), "abc");
    }
}
