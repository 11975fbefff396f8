//! Rendering a prompt: checking its arguments ([`context`]), then (after
//! its steps, which run through the client and add their answers to the
//! context) each message's block ([`render`]). Arguments are strings; an
//! optional argument that was not given is undefined in the templates, so
//! `{% if room %}` works.

use std::collections::BTreeMap;

use minijinja::Value;
use serde_json::Map;

use crate::catalog::{Catalog, Prompt, Role};
use crate::content::{BlockError, Output, render_block};

/// Why a prompt could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A required argument was not given.
    #[error("missing required argument `{0}`")]
    MissingArgument(String),
    /// A message failed to render.
    #[error(transparent)]
    Block(#[from] BlockError),
}

/// What `prompt`'s templates see for `arguments`: the given ones, `arguments`,
/// `data` and `auth` (the claims of the caller's verified token, if any); a
/// required one missing is an error.
pub fn context(
    catalog: &Catalog,
    prompt: &Prompt,
    arguments: &Map<String, serde_json::Value>,
    caller: Option<&Map<String, serde_json::Value>>,
) -> Result<BTreeMap<String, Value>, PromptError> {
    let mut context: BTreeMap<String, Value> = BTreeMap::new();
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in arguments {
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => continue,
            other => other.to_string(),
        };
        given.insert(name.clone(), text);
    }
    for argument in &prompt.arguments {
        match given.get(&argument.name) {
            Some(value) => {
                context.insert(argument.name.clone(), Value::from(value.clone()));
            }
            None if argument.required => return Err(PromptError::MissingArgument(argument.name.clone())),
            None => {}
        }
    }
    context.insert("arguments".to_owned(), crate::render::to_value(&given));
    context.insert("data".to_owned(), catalog.data.clone());
    context.insert("auth".to_owned(), crate::render::auth_value(caller));
    Ok(context)
}

/// Renders `prompt`'s messages with `context` (blocking: templates run here).
pub fn render(catalog: &Catalog, prompt: &Prompt, context: &Value) -> Result<Vec<(Role, Output)>, PromptError> {
    prompt.messages.iter().map(|(role, block)| Ok((*role, render_block(catalog, block, context)?))).collect()
}
