//! Resources and resource templates: bodies, URIs and MIME types.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::catalog::assemble::{Declared, Origin};
use crate::catalog::model::{ResourceSpec, ResourceTemplateSpec};
use crate::catalog::presentation::APP_MIME;
use crate::catalog::{Body, Resource, ResourceTemplate};
use crate::diag::suggest;
use crate::effect::{ReadEffect, ReadSpecs};
use crate::uri_template::UriTemplate;

use super::tools::EffectKeys;
use super::{Builder, Scope, present, read_limited, wire_head};

impl Builder<'_> {
    pub(super) fn resource(&mut self, decl: &Declared<ResourceSpec>) -> Option<Resource> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        // The variables only: a fixed URI needs no matcher compiled.
        let variables = crate::uri_template::UriTemplate::variables_in(&spec.uri);
        if !variables.is_empty() {
            let location = self.assembled.locate(origin, "/uri");
            let message = format!("`{}` is a URI template, but a resource has one fixed URI", spec.uri);
            self.error("resource-uri", location, message).hint = Some(format!(
                "move this entry to `resourceTemplates:` and write `uriTemplate: \"{}\"` instead of `uri:`; its body can then use {}",
                spec.uri,
                variables.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ")
            ));
        } else if let Err(reason) = check_uri(&spec.uri) {
            let location = self.assembled.locate(origin, "/uri");
            self.error("resource-uri", location, format!("`{}` is not a valid URI: {reason}", spec.uri)).hint =
                Some(reason.hint().to_owned());
        }
        let sources = present([
            ("text", spec.text.is_some()),
            ("template", spec.template.is_some()),
            ("file", spec.file.is_some()),
            ("app", spec.app.is_some()),
        ]);
        // An app's page is its body, served as a file is.
        let (file, file_key) = match &spec.app {
            Some(app) => (Some(&app.file), "/app/file"),
            None => (spec.file.as_ref(), "/file"),
        };
        let app_meta = spec.app.as_ref().and_then(|app| self.app(app, &spec.uri, spec.mime_type.as_deref(), origin));
        let declared_steps = spec.steps.as_deref().unwrap_or_default();
        let owner = format!("resource {}:", spec.uri);
        let effect_key = spec.reads.key();
        let read = effect_key.map(|_| {
            // A fixed URI has no variables to mark used: this scope only checks the effect's templates.
            let mut scope = effect_scope(&[], declared_steps);
            self.resource_read(&spec.reads, &[], origin, &owner, &mut scope)
        });
        if let (Some(key), Some(reads), true) = (effect_key, spec.reads.reads(), file.is_some()) {
            let location = self.assembled.locate_key(origin, file_key);
            let message = format!("resource `{}` has both `{key}` and `{}`", spec.uri, &file_key[1..]);
            self.error("resource-body", location, message).hint = Some(format!(
                "a `file` is served as it is; to show {} of `{key}`, write `text:` or `template:` (or neither, for {})",
                reads.output, reads.value
            ));
            return None;
        }
        if effect_key.is_some() && sources.len() <= 1 {
            // `text` or `template` renders the effect's output; neither: its value.
        } else if sources.len() != 1 {
            let location = self.assembled.locate_key(origin, "");
            let message = if sources.is_empty() {
                format!("resource `{}` has no body", spec.uri)
            } else {
                format!("resource `{}` has both `{}` and `{}`", spec.uri, sources[0], sources[1])
            };
            self.error("resource-body", location, message).hint =
                Some("give exactly one of `text`, `template`, `file` or `app`".to_owned());
            return None;
        }
        // A body written for the template it should be sees its variables (no follow-on errors).
        let mut scope = Scope::new(
            ["data".to_owned(), "uri".to_owned()]
                .into_iter()
                .chain(variables)
                .chain(spec.reads.variables().into_iter().map(str::to_owned))
                .chain(super::steps::produced_by(declared_steps)),
        );
        let steps = self.steps(declared_steps, &owner, origin, "/steps", &mut scope);
        let mut mime_type = if spec.app.is_some() { Some(APP_MIME.to_owned()) } else { spec.mime_type.clone() };
        let body = if effect_key.is_some() && spec.text.is_none() && spec.template.is_none() {
            if let Some(Some(read)) = &read {
                mime_type.get_or_insert_with(|| read.value_mime().to_owned());
            }
            Body::Value
        } else if let Some(text) = &spec.text {
            Body::Template(self.inline(format!("{owner}/text"), text, origin, "/text", &mut scope)?)
        } else if let Some(template) = &spec.template {
            Body::Template(self.file_template(template, origin, "/template", &mut scope)?)
        } else {
            let file = file?;
            let path = self.assembled.base_dir(origin).join(file);
            let bytes = match read_limited(&path) {
                Ok(bytes) => bytes,
                Err(err) => {
                    let location = self.assembled.locate(origin, file_key);
                    self.error("resource-file", location, format!("cannot read `{}`: {err}", path.display())).hint =
                        Some("paths are relative to the catalog file that names them".to_owned());
                    return None;
                }
            };
            self.inputs.record(&path, &bytes);
            if mime_type.is_none() {
                mime_type = guess_mime(&path).map(str::to_owned);
            }
            let text = match &mime_type {
                Some(mime) => is_text_mime(mime),
                None => std::str::from_utf8(&bytes).is_ok(),
            };
            if text && std::str::from_utf8(&bytes).is_err() {
                let location = self.assembled.locate(origin, file_key);
                self.error(
                    "resource-file",
                    location,
                    format!(
                        "`{file}` is not valid UTF-8 text but its MIME type is {}",
                        mime_type.as_deref().unwrap_or("text")
                    ),
                )
                .hint = Some(
                    "set `mimeType:` to a binary type (e.g. application/octet-stream) to serve it as a blob".to_owned(),
                );
                return None;
            }
            Body::Bytes { bytes: bytes.into(), text }
        };
        let head = ("uri", spec.uri.as_str(), spec.name.as_str());
        let mut wire = resource_wire(head, spec.title.as_ref(), spec.description.as_ref(), mime_type.as_ref());
        if let Body::Bytes { bytes, .. } = &body {
            wire.insert("size".to_owned(), json!(bytes.len()));
        }
        if let Some(icons) = self.icons(spec.icons.as_ref(), origin, "") {
            wire.insert("icons".to_owned(), icons);
        }
        let meta = app_meta.map(|ui| json!({ "ui": ui }));
        if let Some(meta) = &meta {
            wire.insert("_meta".to_owned(), meta.clone());
        }
        let cache = self.cache(spec.cache.as_ref(), origin, "");
        let read = match read {
            Some(checked) => Some(checked?),
            None => None,
        };
        if spec.app.is_some() && meta.is_none() {
            return None;
        }
        Some(Resource { uri: spec.uri.clone(), wire, mime_type, body, read, steps: steps?, cache, meta })
    }

    pub(super) fn resource_template(&mut self, decl: &Declared<ResourceTemplateSpec>) -> Option<ResourceTemplate> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        let template = match UriTemplate::parse(&spec.uri_template) {
            Ok(template) => template,
            Err(reason) => {
                let location = self.assembled.locate(origin, "/uriTemplate");
                self.error(
                    "uri-template",
                    location,
                    format!("`{}` is not a valid RFC 6570 URI template: {reason}", spec.uri_template),
                )
                .hint = Some("variables are written `{name}`, e.g. `myapp://rooms/{room}`".to_owned());
                return None;
            }
        };
        if let Err(reason) = check_uri(&spec.uri_template) {
            let location = self.assembled.locate(origin, "/uriTemplate");
            self.error("uri-template", location, format!("`{}` is not a valid URI: {reason}", spec.uri_template));
        }
        let variables: Vec<String> = template.variables().into_iter().map(str::to_owned).collect();
        let mut names = variables.clone();
        names.extend(["data".to_owned(), "uri".to_owned()]);
        names.extend(spec.reads.variables().into_iter().map(str::to_owned));
        let declared_steps = spec.steps.as_deref().unwrap_or_default();
        names.extend(super::steps::produced_by(declared_steps));
        let mut scope = Scope::new(names);
        let owner = format!("resource template {}:", spec.uri_template);
        let steps = self.steps(declared_steps, &owner, origin, "/steps", &mut scope);
        let effect_key = spec.reads.key();
        let mut effect_scope = effect_scope(&variables, declared_steps);
        let errors_before = self.errors();
        let read = effect_key.map(|_| self.resource_read(&spec.reads, &variables, origin, &owner, &mut effect_scope));
        // Where the effect failed to check, "unused" would be a guess.
        let effect_checked = self.errors() == errors_before;
        scope.used.extend(effect_scope.used);
        if let Some(Some(read)) = &read {
            scope.used.extend(read.uses().iter().cloned());
        }
        let mut mime_type = spec.mime_type.clone();
        let body = match (&spec.text, &spec.template) {
            (Some(text), None) => self.inline(format!("{owner}/text"), text, origin, "/text", &mut scope).map(Some),
            (None, Some(file)) => self.file_template(file, origin, "/template", &mut scope).map(Some),
            (None, None) if effect_key.is_some() => {
                if let Some(Some(read)) = &read {
                    mime_type.get_or_insert_with(|| read.value_mime().to_owned());
                }
                Some(None)
            }
            _ => {
                let location = self.assembled.locate_key(origin, "");
                self.error(
                    "resource-body",
                    location,
                    format!("resource template `{}` needs exactly one of `text` or `template`", spec.uri_template),
                )
                .hint = Some(if let (Some(key), Some(reads)) = (effect_key, spec.reads.reads()) {
                    format!("give one of them to render {} of `{key}`, or neither for {}", reads.output, reads.value)
                } else {
                    "`text:` is an inline template; `template:` names a file in the templates folder".to_owned()
                });
                None
            }
        };
        for variable in &variables {
            if effect_checked && body.is_some() && !scope.used.contains(variable) {
                let location = self.assembled.locate(origin, "/uriTemplate");
                self.warn(
                    "unused-variable",
                    location,
                    format!("URI variable `{variable}` is never used by the body template"),
                )
                .hint = Some(if spec.reads.sql.is_some() {
                    format!(
                        "use `:{variable}` in the statement or `{{{{ {variable} }}}}` in the body, or drop it from the URI"
                    )
                } else if let Some(key) = effect_key {
                    format!("use `{{{{ {variable} }}}}` in `{key}` or in the body, or drop it from the URI")
                } else {
                    format!("use `{{{{ {variable} }}}}` in the body, or drop it from the URI")
                });
            }
        }
        let complete = spec.complete.clone().unwrap_or_default();
        for key in complete.keys() {
            if !variables.contains(key) {
                let location = self.assembled.locate_key(origin, &format!("/complete/{key}"));
                let hint = suggest(key, variables.iter().map(String::as_str))
                    .unwrap_or_else(|| format!("the URI template's variables are: {}", variables.join(", ")));
                self.error(
                    "complete-key",
                    location,
                    format!("`complete` names `{key}`, which is not a variable of `{}`", spec.uri_template),
                )
                .hint = Some(hint);
            }
        }
        let head = ("uriTemplate", spec.uri_template.as_str(), spec.name.as_str());
        let mut wire = resource_wire(head, spec.title.as_ref(), spec.description.as_ref(), mime_type.as_ref());
        if let Some(icons) = self.icons(spec.icons.as_ref(), origin, "") {
            wire.insert("icons".to_owned(), icons);
        }
        let cache = self.cache(spec.cache.as_ref(), origin, "");
        let read = match read {
            Some(checked) => Some(checked?),
            None => None,
        };
        Some(ResourceTemplate { template, wire, mime_type, body: body?, read, complete, steps: steps?, cache })
    }

    /// Checks the effect (`sql:`, `http:`, `command:`) of a resource whose
    /// URI has `variables`, its templates against `scope`; `None` once it
    /// reported why it cannot run.
    fn resource_read(
        &mut self,
        reads: &ReadSpecs,
        variables: &[String],
        origin: &Origin,
        owner: &str,
        scope: &mut Scope,
    ) -> Option<ReadEffect> {
        // A URI's variables are whatever text the client puts in the URI.
        let keys = EffectKeys::AtTop;
        self.with_effect_host((variables, variables), (origin, keys), owner, scope, |sections, check| {
            reads.check(sections, check)
        })
        .flatten()
    }
}

/// What the templates of a resource's effect see: the URI's `variables`,
/// `data`, `uri`, and what its `steps` produced.
fn effect_scope(variables: &[String], steps: &[crate::catalog::model::StepSpec]) -> Scope {
    Scope::new(
        variables.iter().cloned().chain(["data".to_owned(), "uri".to_owned()]).chain(super::steps::produced_by(steps)),
    )
}

/// What `resources/list` or `resources/templates/list` shows for a
/// resource: its `uri` or `uriTemplate` (`key`, `value`), then `name`,
/// `title` and `description` as for tools, then `mimeType`.
fn resource_wire(
    (key, value, name): (&str, &str, &str),
    title: Option<&String>,
    description: Option<&String>,
    mime_type: Option<&String>,
) -> Map<String, Value> {
    let mut wire = Map::new();
    wire.insert(key.to_owned(), json!(value));
    wire.extend(wire_head(name, title, description));
    if let Some(mime) = mime_type {
        wire.insert("mimeType".to_owned(), json!(mime));
    }
    wire
}

/// Checks that `uri` has a scheme and no characters a URI cannot hold.
pub(super) fn check_uri(uri: &str) -> Result<(), BadUri> {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Err(BadUri::NoScheme);
    };
    let scheme_ok = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(BadUri::Scheme(scheme.to_owned()));
    }
    if rest.is_empty() {
        return Err(BadUri::OnlyScheme);
    }
    if let Some(bad) = uri.chars().find(|c| c.is_whitespace() || matches!(c, '"' | '<' | '>' | '\\' | '^' | '`' | '|'))
    {
        let shown = if bad == ' ' { "a space".to_owned() } else { format!("`{}`", bad.escape_default()) };
        return Err(BadUri::Character(shown));
    }
    Ok(())
}

/// Why a resource's URI (or URI template) is not one.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadUri {
    /// No `scheme:`.
    #[error("it has no scheme (such as `myapp:`)")]
    NoScheme,
    /// A scheme with characters a scheme cannot have.
    #[error("`{0}` is not a valid scheme")]
    Scheme(String),
    /// `scheme:` and nothing after it.
    #[error("nothing follows the scheme")]
    OnlyScheme,
    /// A character a URI cannot hold, as a person reads it.
    #[error("it contains {0}; percent-encode it (a space is %20)")]
    Character(String),
}

impl BadUri {
    /// What to do about it.
    fn hint(&self) -> &'static str {
        match self {
            BadUri::NoScheme | BadUri::Scheme(_) | BadUri::OnlyScheme => {
                "a URI starts with a scheme, e.g. `myapp://policy` or `file:///path`"
            }
            BadUri::Character(_) => "URIs cannot hold spaces or quotes; percent-encode them (a space is %20)",
        }
    }
}

/// A MIME type from a file extension, for the common cases.
pub(super) fn guess_mime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "text" => "text/plain",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "js" => "text/javascript",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "ogg" => "audio/ogg",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// Whether content of this MIME type is served as text (else base64).
pub(super) fn is_text_mime(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or_default().trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json" | "application/yaml" | "application/xml" | "application/javascript" | "image/svg+xml"
        )
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_wire_keeps_mcp_key_order_and_leaves_out_what_is_absent() {
        let (title, mime) = ("Policy".to_owned(), "text/markdown".to_owned());
        let wire = resource_wire(("uri", "reservo://policy", "policy"), Some(&title), None, Some(&mime));
        let keys: Vec<&str> = wire.keys().map(String::as_str).collect();
        assert_eq!(keys, ["uri", "name", "title", "mimeType"]);
        assert_eq!(
            Value::Object(wire),
            json!({"uri": "reservo://policy", "name": "policy", "title": "Policy", "mimeType": "text/markdown"})
        );
        let wire = resource_wire(("uriTemplate", "reservo://rooms/{room}", "room"), None, None, None);
        assert_eq!(wire.keys().map(String::as_str).collect::<Vec<_>>(), ["uriTemplate", "name"]);
    }
}
