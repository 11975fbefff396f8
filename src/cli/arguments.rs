//! The arguments of `carte call`, `prompt`, `read` and `complete`, given as
//! `key=value` on the command line: typed by the tool's schema, checked
//! against what the catalog declares, with "did you mean" for a name it
//! does not have.

use std::path::Path;

use anyhow::Context as _;
use carte::diag;
use carte::server::{ListKind, Snapshot};
use serde_json::{Map, Value};

use super::Kind;

pub(crate) fn list_kind(kind: Kind) -> ListKind {
    match kind {
        Kind::Tools => ListKind::Tools,
        Kind::Prompts => ListKind::Prompts,
        Kind::Resources => ListKind::Resources,
        Kind::Templates => ListKind::Templates,
    }
}

pub(crate) fn split_pair(pair: &str) -> anyhow::Result<(&str, &str)> {
    pair.split_once('=').with_context(|| format!("argument `{pair}` should be key=value"))
}

/// The arguments a tool or prompt declares: each name and whether it is
/// required; `open` when other names are accepted too.
pub(crate) struct Arguments {
    pub(crate) names: Vec<(String, bool)>,
    pub(crate) open: bool,
    /// What one is called: `argument`, or `variable` (of a URI template).
    pub(crate) noun: &'static str,
}

impl Arguments {
    /// `room (required), hours`, or `none`.
    fn describe(&self) -> String {
        if self.names.is_empty() {
            return "none".to_owned();
        }
        let names: Vec<String> = self
            .names
            .iter()
            .map(|(name, required)| if *required { format!("{name} (required)") } else { name.clone() })
            .collect();
        names.join(", ")
    }
}

/// A tool's arguments, from its `inputSchema`: `properties` and `required`;
/// open unless the tool closes them (as the server decides:
/// [`carte::catalog::Tool::closed_arguments`]).
pub(crate) fn tool_arguments(tool: &carte::catalog::Tool) -> Arguments {
    let schema = tool.wire.get("inputSchema").cloned().unwrap_or(Value::Null);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let names = tool.argument_names().into_iter().map(|name| (name.to_owned(), required.contains(&name))).collect();
    Arguments { names, open: !tool.closed_arguments(), noun: "argument" }
}

/// A usage error for the first name that `known` does not declare, with
/// "did you mean" and the declared arguments.
pub(crate) fn check_argument_names<'a>(
    what: &str,
    given: impl IntoIterator<Item = &'a str>,
    known: &Arguments,
) -> anyhow::Result<()> {
    if known.open {
        return Ok(());
    }
    let Some(unknown) = given.into_iter().find(|key| !known.names.iter().any(|(name, _)| name == key)) else {
        return Ok(());
    };
    let guess = diag::suggest(unknown, known.names.iter().map(|(name, _)| name.as_str()))
        .map(|hint| format!("; {hint}"))
        .unwrap_or_default();
    let noun = known.noun;
    anyhow::bail!("{what} has no {noun} `{unknown}`{guess}\n  its {noun}s: {}", known.describe())
}

/// A usage error naming every required argument of a prompt left out.
pub(crate) fn check_required(
    what: &str,
    usage: &str,
    given: &Map<String, Value>,
    known: &Arguments,
) -> anyhow::Result<()> {
    let missing: Vec<&str> = known
        .names
        .iter()
        .filter(|(argument, required)| *required && !given.contains_key(argument))
        .map(|(argument, _)| argument.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let plural = if missing.len() == 1 { "" } else { "s" };
    let example: Vec<String> = missing.iter().map(|argument| format!("{argument}=…")).collect();
    anyhow::bail!(
        "{what} needs argument{plural} `{}`\n  its arguments: {}\n  e.g. {usage} {}",
        missing.join("`, `"),
        known.describe(),
        example.join(" ")
    )
}

/// A usage error when the catalog has no `what` called `name`: "did you
/// mean", and where to see them all.
pub(crate) fn check_name<'a>(
    what: &str,
    name: &str,
    names: impl Iterator<Item = &'a str> + Clone,
    (catalog, kind): (&Path, &str),
) -> anyhow::Result<()> {
    if names.clone().any(|known| known == name) {
        return Ok(());
    }
    let guess = diag::suggest(name, names).map(|hint| format!("; {hint}")).unwrap_or_default();
    anyhow::bail!("this catalog has no {what} `{name}`{guess}\n  see them all: carte list {} {kind}", catalog.display())
}

/// What `carte complete` completes.
pub(crate) enum Target {
    /// A prompt, by name.
    Prompt(String),
    /// A resource template, by its URI template.
    Template(String),
}

/// What `carte complete` was asked to complete: `prompt:NAME`,
/// `resource:URI-TEMPLATE`, or a bare prompt name or URI template.
pub(crate) fn completion_target(snapshot: &Snapshot, path: &Path, reference: &str) -> anyhow::Result<Target> {
    let catalog = &snapshot.catalog;
    if let Some(name) = reference.strip_prefix("prompt:") {
        check_name("prompt", name, catalog.prompts.iter().map(|p| p.name.as_str()), (path, "prompts"))?;
        return Ok(Target::Prompt(name.to_owned()));
    }
    if let Some(uri) = reference.strip_prefix("resource:") {
        let templates = catalog.resource_templates.iter().map(|t| t.template.as_str());
        check_name("resource template", uri, templates, (path, "templates"))?;
        return Ok(Target::Template(uri.to_owned()));
    }
    if catalog.prompt(reference).is_some() {
        return Ok(Target::Prompt(reference.to_owned()));
    }
    if catalog.resource_template(reference).is_some() {
        return Ok(Target::Template(reference.to_owned()));
    }
    let prompts = catalog.prompts.iter().map(|p| p.name.as_str());
    let templates = catalog.resource_templates.iter().map(|t| t.template.as_str());
    let guess = diag::suggest(reference, prompts.chain(templates)).map(|hint| format!("; {hint}")).unwrap_or_default();
    anyhow::bail!(
        "`{reference}` is neither a prompt nor a resource template of this catalog{guess}\n  \
         write `prompt:NAME` or `resource:URI-TEMPLATE` (see `carte list {0} prompts` and `carte list {0} templates`)",
        path.display()
    )
}

/// A key=value argument, typed by the tool's schema: strings stay strings,
/// anything else is read as JSON when it parses.
pub(crate) fn typed_argument(schema: Option<&Value>, key: &str, value: &str) -> Value {
    let declared = schema.and_then(|s| s.pointer(&format!("/properties/{key}/type"))).and_then(Value::as_str);
    if declared == Some("string") {
        return Value::String(value.to_owned());
    }
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()))
}
