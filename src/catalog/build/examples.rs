//! Checking `examples:` against what they call: a tool's arguments against
//! its `inputSchema`, a prompt's against its arguments, a template's `uri`
//! against the template; `rows` need a database, `upstream` an `http`
//! effect (and an `http` effect needs it), `matches` must compile. Each
//! mistake is located at the key that holds it.

use std::sync::Arc;

use regex_automata::nfa::thompson::pikevm::PikeVM;
use serde_json::{Map, Value};

use crate::catalog::assemble::Origin;
use crate::catalog::examples::{Example, ExampleSpec, Expect, Rows, Subject, Texts};
use crate::catalog::{Prompt, Resource, ResourceTemplate, Tool};
use crate::diag::did_you_mean;

use super::Builder;

/// What an example is checked against.
enum Against<'a> {
    Tool(&'a Tool),
    Prompt(&'a Prompt),
    Resource(&'a Resource),
    Template(&'a ResourceTemplate),
}

/// Where an example's subject is, and what of it the checks need.
struct Host<'a> {
    origin: &'a Origin,
    /// "tool `get_quote`".
    what: String,
    against: Against<'a>,
    /// The database its `sql` effect names, if it has one.
    database: Option<&'a str>,
    /// Whether its effect is `http`.
    http: bool,
}

impl Builder<'_> {
    /// The examples of every tool, prompt and resource that was built, in
    /// file order.
    pub(super) fn examples(
        &mut self,
        tools: &[Tool],
        prompts: &[Prompt],
        (resources, templates): (&[Resource], &[ResourceTemplate]),
    ) -> Vec<Example> {
        let assembled = self.assembled;
        let mut examples = Vec::new();
        for decl in &assembled.tools {
            let Some(tool) = tools.iter().find(|t| t.name == decl.spec.name) else { continue };
            let effects = &decl.spec.run.effects;
            let host = Host {
                origin: &decl.origin,
                what: format!("tool `{}`", tool.name),
                against: Against::Tool(tool),
                database: effects.sql.as_ref().map(|sql| sql.database.as_str()),
                http: effects.http.is_some(),
            };
            self.examples_of(&host, decl.spec.examples.as_deref(), &mut examples);
        }
        for decl in &assembled.prompts {
            let Some(prompt) = prompts.iter().find(|p| p.name == decl.spec.name) else { continue };
            let host = Host {
                origin: &decl.origin,
                what: format!("prompt `{}`", prompt.name),
                against: Against::Prompt(prompt),
                database: None,
                http: false,
            };
            self.examples_of(&host, decl.spec.examples.as_deref(), &mut examples);
        }
        for decl in &assembled.resources {
            let Some(resource) = resources.iter().find(|r| r.uri == decl.spec.uri) else { continue };
            let reads = &decl.spec.reads;
            let host = Host {
                origin: &decl.origin,
                what: format!("resource `{}`", resource.uri),
                against: Against::Resource(resource),
                database: reads.sql.as_ref().map(|sql| sql.database.as_str()),
                http: reads.http.is_some(),
            };
            self.examples_of(&host, decl.spec.examples.as_deref(), &mut examples);
        }
        for decl in &assembled.resource_templates {
            let Some(template) = templates.iter().find(|t| t.template.as_str() == decl.spec.uri_template) else {
                continue;
            };
            let reads = &decl.spec.reads;
            let host = Host {
                origin: &decl.origin,
                what: format!("resource template `{}`", decl.spec.uri_template),
                against: Against::Template(template),
                database: reads.sql.as_ref().map(|sql| sql.database.as_str()),
                http: reads.http.is_some(),
            };
            self.examples_of(&host, decl.spec.examples.as_deref(), &mut examples);
        }
        examples
    }

    fn examples_of(&mut self, host: &Host<'_>, specs: Option<&[ExampleSpec]>, examples: &mut Vec<Example>) {
        for (idx, spec) in specs.unwrap_or_default().iter().enumerate() {
            if let Some(example) = self.example(host, idx, spec) {
                examples.push(example);
            }
        }
    }

    /// One example, checked (`None` once a mistake in it was reported).
    fn example(&mut self, host: &Host<'_>, idx: usize, spec: &ExampleSpec) -> Option<Example> {
        let at = format!("/examples/{idx}");
        let errors_before = self.errors();
        let arguments = spec.arguments.clone().unwrap_or_default();
        let subject = self.example_subject(host, &at, spec, &arguments);
        let rows = self.example_rows(host, &at, spec);
        let upstream = match (&spec.upstream, host.http) {
            (Some(upstream), true) => {
                if let Some(status) = upstream.status
                    && !(100..=599).contains(&status)
                {
                    let location = self.assembled.locate(host.origin, &format!("{at}/upstream/status"));
                    self.error("example-upstream", location, format!("{status} is not an HTTP status")).hint =
                        Some("write a status from 100 to 599, such as 200 or 404".to_owned());
                }
                if upstream.json.is_some() && upstream.body.is_some() {
                    let location = self.assembled.locate_key(host.origin, &format!("{at}/upstream/body"));
                    self.error("example-upstream", location, "`upstream` gives both `json` and `body`").hint =
                        Some("an answer has one body: keep `json` (sent as application/json) or `body`".to_owned());
                }
                Some(Arc::new(upstream.stated()))
            }
            (Some(_), false) => {
                let location = self.assembled.locate_key(host.origin, &format!("{at}/upstream"));
                let message = format!("an example of {} states an `upstream` answer, but it calls no api", host.what);
                self.error("example-upstream", location, message).hint =
                    Some("`upstream` is the answer an `http` effect's api gives; remove it".to_owned());
                None
            }
            (None, true) => {
                let location = self.assembled.locate(host.origin, &at);
                let message =
                    format!("an example of {} calls an api (`http`) but states no `upstream` answer", host.what);
                self.error("example-upstream", location, message).hint = Some(
                    "examples never call the real api: add `upstream: { status: 200, json: {…} }` (or `body:`), the answer it would give"
                        .to_owned(),
                );
                None
            }
            (None, false) => None,
        };
        let expect = self.example_expect(host, &at, spec);
        if self.errors() != errors_before {
            return None;
        }
        let position = format!("example {}", idx + 1);
        Some(Example {
            name: format!("{}: {}", host.what, spec.name.as_deref().unwrap_or(&position)),
            subject: subject?,
            location: self.assembled.locate(host.origin, &at),
            arguments,
            rows,
            upstream,
            expect: expect?,
        })
    }

    /// What the example calls, its arguments (or URI) checked.
    fn example_subject(
        &mut self,
        host: &Host<'_>,
        at: &str,
        spec: &ExampleSpec,
        arguments: &Map<String, Value>,
    ) -> Option<Subject> {
        let assembled = self.assembled;
        let key = |name: &str| assembled.locate_key(host.origin, &format!("{at}/{name}"));
        let no_arguments = |builder: &mut Self| {
            if spec.arguments.is_some() {
                let message = format!("an example of {} gives `arguments`, which a read has none of", host.what);
                builder.error("example-arguments", key("arguments"), message).hint =
                    Some("a resource is read by its URI: remove `arguments`".to_owned());
            }
        };
        match host.against {
            Against::Tool(tool) => {
                self.no_uri(host, at, spec);
                // The validator calls use, compiled once (now, for a tool with examples).
                if let Ok(validator) = tool.input_validator() {
                    let instance = Value::Object(arguments.clone());
                    let errors: Vec<(String, String)> = validator
                        .iter_errors(&instance)
                        .map(|err| (err.instance_path().to_string(), err.to_string()))
                        .collect();
                    if let Some((first, _)) = errors.first() {
                        let violations: Vec<String> = errors
                            .iter()
                            .map(|(path, err)| if path.is_empty() { err.clone() } else { format!("{path}: {err}") })
                            .collect();
                        // At the first wrong value, else at the arguments.
                        let location = match spec.arguments {
                            Some(_) => assembled.locate(host.origin, &format!("{at}/arguments{first}")),
                            None => assembled.locate(host.origin, at),
                        };
                        let message = format!(
                            "the arguments of this example do not fit the `inputSchema` of {}: {}",
                            host.what,
                            violations.join("; ")
                        );
                        self.error("example-arguments", location, message).hint = Some(
                            "an example's arguments are what a client would send: fix them or the schema".to_owned(),
                        );
                    }
                }
                Some(Subject::Tool(tool.name.clone()))
            }
            Against::Prompt(prompt) => {
                self.no_uri(host, at, spec);
                for (name, value) in arguments {
                    let pointer = format!("{at}/arguments/{name}");
                    if !prompt.arguments.iter().any(|a| a.name == *name) {
                        let known = prompt.arguments.iter().map(|a| a.name.as_str());
                        let hint = match did_you_mean(name, known) {
                            Some(close) => format!("did you mean `{close}`?"),
                            None => "an example gives only the prompt's own arguments".to_owned(),
                        };
                        let location = assembled.locate_key(host.origin, &pointer);
                        self.error("example-arguments", location, format!("{} has no argument `{name}`", host.what))
                            .hint = Some(hint);
                    } else if !value.is_string() {
                        let location = assembled.locate(host.origin, &pointer);
                        let message =
                            format!("argument `{name}` of {} is text, but the example gives {value}", host.what);
                        self.error("example-arguments", location, message).hint =
                            Some(format!("prompt arguments are strings: write `{name}: \"{value}\"`"));
                    }
                }
                for argument in prompt.arguments.iter().filter(|a| a.required) {
                    if !arguments.contains_key(&argument.name) {
                        let location = assembled.locate(host.origin, at);
                        let message =
                            format!("an example of {} leaves out its required argument `{}`", host.what, argument.name);
                        self.error("example-arguments", location, message).hint =
                            Some(format!("add `arguments: {{ {}: … }}`", argument.name));
                    }
                }
                Some(Subject::Prompt(prompt.name.clone()))
            }
            Against::Resource(resource) => {
                no_arguments(self);
                if let Some(uri) = spec.uri.as_ref().filter(|uri| **uri != resource.uri) {
                    let location = assembled.locate(host.origin, &format!("{at}/uri"));
                    let message = format!("an example of {} reads `{uri}`, another URI", host.what);
                    self.error("example-uri", location, message).hint =
                        Some("a resource's example reads the resource itself: remove `uri`".to_owned());
                }
                Some(Subject::Resource(resource.uri.clone()))
            }
            Against::Template(template) => {
                no_arguments(self);
                let Some(uri) = &spec.uri else {
                    let location = assembled.locate(host.origin, at);
                    let message = format!("an example of {} names no `uri` to read", host.what);
                    self.error("example-uri", location, message).hint = Some(format!(
                        "add `uri:`, a URI the template matches (`{}` with its variables filled in)",
                        template.template.as_str()
                    ));
                    return None;
                };
                if template.template.match_unbounded(uri).is_none() {
                    let location = assembled.locate(host.origin, &format!("{at}/uri"));
                    let message = format!("`{uri}` is not a URI of {}", host.what);
                    self.error("example-uri", location, message).hint =
                        Some(format!("write a URI the template `{}` matches", template.template.as_str()));
                    return None;
                }
                Some(Subject::Resource(uri.clone()))
            }
        }
    }

    fn no_uri(&mut self, host: &Host<'_>, at: &str, spec: &ExampleSpec) {
        if spec.uri.is_some() {
            let location = self.assembled.locate_key(host.origin, &format!("{at}/uri"));
            let message =
                format!("an example of {} gives a `uri`, which only a resource template's example reads", host.what);
            self.error("example-uri", location, message).hint = Some("give `arguments:` instead".to_owned());
        }
    }

    /// The rows to insert, each table in the database they go to.
    fn example_rows(&mut self, host: &Host<'_>, at: &str, spec: &ExampleSpec) -> Vec<Rows> {
        let Some(tables) = &spec.rows else { return Vec::new() };
        let served: Vec<&str> = self.blocks.databases.block.entries.keys().map(String::as_str).collect();
        let database = match host.database {
            Some(database) => Some(database.to_owned()),
            None if served.len() == 1 => served.first().map(|name| (*name).to_owned()),
            None => None,
        };
        let Some(database) = database else {
            let location = self.assembled.locate_key(host.origin, &format!("{at}/rows"));
            let (message, hint) = match served.len() {
                0 => (
                    format!("an example of {} inserts `rows`, but the catalog has no database", host.what),
                    "`rows` fill tables of a `databases:` entry before the example runs; remove them".to_owned(),
                ),
                _ => (
                    format!("an example of {} inserts `rows`, but which database they go to is unclear", host.what),
                    "rows go to the database its `sql` effect names, or to the catalog's only database".to_owned(),
                ),
            };
            self.error("example-rows", location, message).hint = Some(hint);
            return Vec::new();
        };
        tables
            .iter()
            .map(|(table, rows)| Rows { database: database.clone(), table: table.clone(), rows: rows.clone() })
            .collect()
    }

    /// `expect`, checked: `matches` compiles.
    fn example_expect(&mut self, host: &Host<'_>, at: &str, spec: &ExampleSpec) -> Option<Expect> {
        let Some(written) = &spec.expect else { return Some(Expect::default()) };
        let matches = match &written.matches {
            None => None,
            Some(source) => match PikeVM::new(source) {
                Ok(regex) => Some((source.clone(), regex)),
                Err(err) => {
                    let location = self.assembled.locate(host.origin, &format!("{at}/expect/matches"));
                    // The parser's own message quotes the pattern over several lines: its last says why.
                    let text = crate::diag::innermost(&err);
                    let reason = text.lines().last().unwrap_or_default().trim_start_matches("error: ").to_owned();
                    self.error("example-matches", location, format!("`matches` is not a regular expression: {reason}"))
                        .hint = Some("write a regular expression (Rust syntax), e.g. `^Focus .* = [0-9.]+$`; escape `.` `(` `[` as `\\.` `\\(` `\\[`".to_owned());
                    return None;
                }
            },
        };
        let contains = match &written.contains {
            None => Vec::new(),
            Some(Texts::One(text)) => vec![text.clone()],
            Some(Texts::Many(texts)) => texts.clone(),
        };
        Some(Expect {
            text: written.text.clone(),
            contains,
            matches,
            json: written.json.clone(),
            is_error: written.is_error,
        })
    }
}
