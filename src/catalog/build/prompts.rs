//! Prompts: arguments, messages, and the resources they embed.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::catalog::assemble::Declared;
use crate::catalog::model::PromptSpec;
use crate::catalog::{Prompt, PromptArgument, Resource, ResourceTemplate};
use crate::diag::{Location, suggest};

use super::{Builder, Scope, wire_head};

impl Builder<'_> {
    pub(super) fn prompt(&mut self, decl: &Declared<PromptSpec>) -> Option<Prompt> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("prompt", &spec.name, origin);
        self.check_description("prompt", &spec.name, spec.description.as_ref(), origin);
        let mut arguments = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (idx, argument) in spec.arguments.iter().flatten().enumerate() {
            if let Some(first) = seen.insert(argument.name.as_str(), idx) {
                let location = self.assembled.locate(origin, &format!("/arguments/{idx}/name"));
                let first_location = self.assembled.locate(origin, &format!("/arguments/{first}/name"));
                self.error("duplicate-argument", location, format!("argument `{}` is declared twice", argument.name))
                    .notes
                    .push(crate::diag::Note { message: "first declared here".to_owned(), location: first_location });
            }
            arguments.push(PromptArgument {
                name: argument.name.clone(),
                required: argument.required.unwrap_or(false),
                complete: argument.complete.clone().unwrap_or_default(),
            });
        }
        let mut names: Vec<String> = arguments.iter().map(|a| a.name.clone()).collect();
        names.extend(["data".to_owned(), "arguments".to_owned(), "auth".to_owned()]);
        let declared_steps = spec.steps.as_deref().unwrap_or_default();
        names.extend(super::steps::produced_by(declared_steps));
        let mut scope = Scope::new(names);
        let owner = format!("prompt {}:", spec.name);
        let errors_before = self.errors();
        let steps = self.steps(declared_steps, &owner, origin, "/steps", &mut scope);
        let mut messages = Vec::new();
        let mut ok = true;
        if spec.messages.is_empty() {
            let location = self.assembled.locate(origin, "/messages");
            self.error("prompt-messages", location, "prompt has no messages").hint =
                Some("add at least one, e.g. `- { role: user, text: \"…\" }`".to_owned());
            ok = false;
        }
        for (idx, message) in spec.messages.iter().enumerate() {
            match self.block(&message.block(), &owner, origin, &format!("/messages/{idx}"), &mut scope) {
                Some(block) => messages.push((message.role, block)),
                None => ok = false,
            }
        }
        let assembled = self.assembled;
        self.warn_unused(
            ("prompt", &spec.name),
            arguments.iter().map(|argument| argument.name.as_str()),
            &scope,
            errors_before,
            |idx, _| assembled.locate(origin, &format!("/arguments/{idx}/name")),
            "use it in a message template, or remove it",
        );
        let mut wire = wire_head(&spec.name, spec.title.as_ref(), spec.description.as_ref());
        if let Some(icons) = self.icons(spec.icons.as_ref(), origin, "") {
            wire.insert("icons".to_owned(), icons);
        }
        if let Some(declared) = &spec.arguments {
            let list: Vec<Value> = declared
                .iter()
                .map(|a| {
                    let mut map = wire_head(&a.name, a.title.as_ref(), a.description.as_ref());
                    map.insert("required".to_owned(), json!(a.required.unwrap_or(false)));
                    Value::Object(map)
                })
                .collect();
            wire.insert("arguments".to_owned(), Value::Array(list));
        }
        let steps = steps?;
        ok.then(|| Prompt { name: spec.name.clone(), wire, arguments, steps, messages })
    }

    /// Prompt messages and content blocks that embed a resource by a fixed
    /// URI must name one the catalog serves.
    pub(super) fn check_prompt_resources(&mut self, resources: &[Resource], templates: &[ResourceTemplate]) {
        let assembled = self.assembled;
        // Each embedded URI, where it is written, and whether a tool (not a prompt) embeds it.
        let mut references: Vec<(&str, Location, bool)> = Vec::new();
        for decl in &assembled.prompts {
            for (idx, message) in decl.spec.messages.iter().enumerate() {
                if let Some(uri) = &message.resource {
                    references.push((uri, assembled.locate(&decl.origin, &format!("/messages/{idx}/resource")), false));
                }
            }
        }
        for decl in &assembled.tools {
            for (idx, block) in decl.spec.run.content.iter().flatten().enumerate() {
                if let Some(uri) = &block.resource {
                    references.push((
                        uri,
                        assembled.locate(&decl.origin, &format!("/run/content/{idx}/resource")),
                        true,
                    ));
                }
            }
        }
        if assembled.dropped.resources {
            return; // one is left out for a mistake (reported): it may be the one named
        }
        for (uri, location, in_tool) in references {
            if uri.contains("{{") || uri.contains("{%") {
                continue; // rendered per call; checked when it runs
            }
            // Whether the resource it names reads a database, and whether it
            // has steps; `None`: there is none.
            let named =
                resources.iter().find(|r| r.uri == uri).map(|r| (r.read.as_ref(), !r.steps.is_empty())).or_else(|| {
                    templates
                        .iter()
                        .find(|t| matches!(t.template.match_uri(uri), Ok(Some(_))))
                        .map(|t| (t.read.as_ref(), !t.steps.is_empty()))
                });
            let reads = named.and_then(|(read, _)| read);
            if named.is_some_and(|(read, steps)| steps && read.is_none()) {
                self.error(
                    "resource-embed",
                    location.clone(),
                    format!("resource `{uri}` has `steps`, which run when a client reads it, so it cannot be embedded"),
                )
                .hint = Some(if in_tool {
                    "its steps may ask the client: link it instead (`- resource_link: { uri: …, name: … }`)"
                } else {
                    "its steps may ask the client: name its URI in the message's text, and the client reads it with `resources/read`"
                }
                .to_owned());
            }
            if let Some(read) = reads {
                let (key, reads) = (read.key(), read.reads());
                self.error(
                    "resource-embed",
                    location.clone(),
                    format!("resource `{uri}` {} (`{key}`), so it cannot be embedded", reads.does),
                )
                .hint = Some(if in_tool {
                    format!(
                        "{} when a client reads it: link it instead (`- resource_link: {{ uri: …, name: … }}`), or {} with the tool's own `{key}:`",
                        reads.when, reads.instead
                    )
                } else {
                    format!(
                        "{} when a client reads it: name its URI in the message's text, and the client reads it with `resources/read`",
                        reads.when
                    )
                });
            }
            // One declared but left out for its own errors (reported) is not "not declared".
            let declared = || {
                assembled.resources.iter().any(|d| d.spec.uri == uri)
                    || assembled.resource_templates.iter().any(|d| {
                        crate::uri_template::UriTemplate::parse(&d.spec.uri_template)
                            .is_ok_and(|t| matches!(t.match_uri(uri), Ok(Some(_))))
                    })
            };
            if reads.is_none() && !declared() {
                let candidates: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
                let hint = suggest(uri, candidates.iter().copied()).unwrap_or_else(|| {
                    "declare it under `resources:` (or a matching `resourceTemplates:` entry)".to_owned()
                });
                self.error("unknown-resource", location, format!("resource `{uri}` is not declared in this catalog"))
                    .hint = Some(hint);
            }
        }
    }
}
