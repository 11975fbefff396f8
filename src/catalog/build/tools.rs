//! Tools: their arguments, `run` (effect, steps, result) and names.

use std::collections::HashMap;
use std::ops::Range;

use serde_json::{Map, Value, json};

use crate::catalog::assemble::{Declared, Origin};
use std::time::Duration;

use crate::catalog::model::{NumberSpec, RunSpec, SleepSpec, StepSpec, TaskSpec, ToolSpec};
use crate::catalog::{Amount, Input, InputKind, ResultSpec, Step, StepData, TaskOptions, Tool, Wait};
use crate::diag::{Diagnostic, Location};
use crate::duration::{positive_at_most, show_duration};
use crate::effect::{self, Effect};

use super::{Builder, Scope, present, wire_head};

/// A task's ttl without `ttl:`.
const DEFAULT_TASK_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest `ttl:` a task may have.
const MAX_TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// A task's poll interval without `pollInterval:`.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The shortest `pollInterval:`.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);

impl Builder<'_> {
    pub(super) fn tool(&mut self, decl: &Declared<ToolSpec>) -> Option<Tool> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("tool", &spec.name, origin);
        self.check_description("tool", &spec.name, spec.description.as_ref(), origin);
        let input_schema = spec.input_schema.clone().unwrap_or_else(|| {
            let mut empty = Map::new();
            empty.insert("type".to_owned(), json!("object"));
            empty.insert("properties".to_owned(), json!({}));
            empty
        });
        let input = self.schema(&input_schema, origin, "inputSchema");
        if input.is_some() {
            self.check_mcp_headers(&input_schema, origin);
        }
        let output = spec.output_schema.as_ref().map(|schema| self.schema(schema, origin, "outputSchema"));
        let properties: Vec<String> = input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let free_text = free_text(&input_schema);
        let run = &spec.run;
        let errors_before = self.errors();
        let owner = format!("tool {}:", spec.name);
        let mut names = properties.clone();
        names.extend(["data".to_owned(), "arguments".to_owned(), "auth".to_owned()]);
        let declared_steps = run.steps.as_deref().unwrap_or_default();
        let produced = produced_by(declared_steps);
        // The effect's templates see what the steps produced; the result's
        // also see what the effect produced.
        let mut scope = Scope::new(names.iter().chain(&produced).cloned());
        let effect = self.effect(run, (&properties, &free_text), origin, &owner, &mut scope);
        names.extend(run.effects.variables().into_iter().map(str::to_owned));
        names.extend(produced);
        scope.allowed = names;
        let steps = self.steps(declared_steps, &owner, origin, "/run/steps", &mut scope);
        let result = self.result(run, &owner, origin, &mut scope);
        if let Some(Some(effect)) = &effect {
            scope.used.extend(effect.arguments_used().iter().cloned());
        }
        let assembled = self.assembled;
        // An effect that could not be checked (its database did not open)
        // says nothing of which arguments it uses.
        if effect.is_some() {
            self.warn_unused(
                ("tool", &spec.name),
                properties.iter().map(String::as_str),
                &scope,
                errors_before,
                |_, property| assembled.locate_key(origin, &format!("/inputSchema/properties/{property}")),
                "use it in the result template or the SQL statement, or remove it",
            );
        }
        let structured = run.json == Some(true) || spec.output_schema.is_some();
        let mut wire = wire_head(&spec.name, spec.title.as_ref(), spec.description.as_ref());
        wire.insert("inputSchema".to_owned(), Value::Object(input_schema));
        if let Some(schema) = &spec.output_schema {
            wire.insert("outputSchema".to_owned(), Value::Object(schema.clone()));
        }
        if let Some(annotations) = &spec.annotations {
            let mut map = Map::new();
            let pairs = [
                ("title", annotations.title.as_ref().map(|t| json!(t))),
                ("readOnlyHint", annotations.read_only_hint.map(Value::Bool)),
                ("destructiveHint", annotations.destructive_hint.map(Value::Bool)),
                ("idempotentHint", annotations.idempotent_hint.map(Value::Bool)),
                ("openWorldHint", annotations.open_world_hint.map(Value::Bool)),
            ];
            for (key, value) in pairs {
                if let Some(value) = value {
                    map.insert(key.to_owned(), value);
                }
            }
            wire.insert("annotations".to_owned(), Value::Object(map));
        }
        let input = input?;
        let output = match output {
            Some(compiled) => Some(compiled?),
            None => None,
        };
        let task = match &spec.task {
            Some(task) => Some(self.task(task, declared_steps, origin)?),
            None => None,
        };
        let scopes = self.scopes(spec.scopes.as_deref().unwrap_or_default(), origin);
        let result = result?;
        let steps = steps?;
        let effect = effect?;
        Some(Tool { name: spec.name.clone(), wire, input, output, structured, steps, effect, result, task, scopes })
    }

    /// A tool's `scopes:`, each a scope token (RFC 6749 §3.3: printable
    /// ASCII but space, `"` and `\`); a duplicate is dropped.
    fn scopes(&mut self, scopes: &[String], origin: &Origin) -> Vec<String> {
        let mut kept: Vec<String> = Vec::with_capacity(scopes.len());
        for (idx, scope) in scopes.iter().enumerate() {
            let token = !scope.is_empty() && scope.bytes().all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
            if !token {
                let location = self.assembled.locate(origin, &format!("/scopes/{idx}"));
                self.error("tool-scope", location, format!("scope {scope:?} is not a scope token")).hint = Some(
                    "a scope is one word of printable ASCII without spaces, quotes or backslashes, e.g. `orders:read`"
                        .to_owned(),
                );
            } else if !kept.contains(scope) {
                kept.push(scope.clone());
            }
        }
        kept
    }

    /// Checks a tool's `task:`: its durations, and that `askFirst` has
    /// input steps to ask.
    fn task(&mut self, spec: &TaskSpec, steps: &[StepSpec], origin: &Origin) -> Option<TaskOptions> {
        let ttl = match spec
            .ttl
            .as_ref()
            .map(|ttl| positive_at_most(ttl, MAX_TASK_TTL, "a ttl", "drop every task at once"))
        {
            None => Some(DEFAULT_TASK_TTL),
            Some(Ok(ttl)) => Some(ttl),
            Some(Err(message)) => {
                let location = self.assembled.locate(origin, "/task/ttl");
                self.error("task-ttl", location, message).hint = Some(
                    "the ttl is how long a task may run and how long its result is kept after; write e.g. `5m` or `1h`, at most `24h`".to_owned(),
                );
                None
            }
        };
        let poll_interval = match spec.poll_interval.as_ref().map(|poll| {
            let poll = positive_at_most(poll, MAX_TASK_TTL, "a pollInterval", "ask clients to poll without pause")?;
            if poll < MIN_POLL_INTERVAL {
                return Err(format!("a pollInterval of {} is shorter than 100ms", show_duration(poll)));
            }
            Ok(poll)
        }) {
            None => Some(DEFAULT_POLL_INTERVAL),
            Some(Ok(poll)) => Some(poll),
            Some(Err(message)) => {
                let location = self.assembled.locate(origin, "/task/pollInterval");
                self.error("task-poll-interval", location, message).hint = Some(
                    "clients call `tasks/get` this often while the task runs; write e.g. `1s` (at least `100ms`)"
                        .to_owned(),
                );
                None
            }
        };
        let asks = |step: &&StepSpec| {
            step.elicit.is_some() || step.sample.is_some() || step.roots.is_some() || step.ask.is_some()
        };
        let asked = steps.iter().take_while(asks).count();
        let ask_first = if spec.ask_first == Some(true) {
            if asked == 0 {
                let location = self.assembled.locate(origin, "/task/askFirst");
                self.error("task-ask-first", location, "`askFirst` asks the leading input steps (`elicit`, `sample`, `roots`, `ask`) before the task starts, but this tool's steps do not start with one").hint = Some(
                    "put the questions to ask before the task at the start of `run.steps`, or remove `askFirst`".to_owned(),
                );
                return None;
            }
            asked
        } else {
            0
        };
        Some(TaskOptions { mode: spec.mode.unwrap_or_default(), ttl: ttl?, poll_interval: poll_interval?, ask_first })
    }

    /// Checks the effect of `run`: `Some(None)` if it has none, `None` once
    /// it reported why the effect cannot run.
    fn effect(
        &mut self,
        run: &RunSpec,
        arguments: (&[String], &[String]),
        origin: &Origin,
        owner: &str,
        scope: &mut Scope,
    ) -> Option<Option<Effect>> {
        self.with_effect_host(arguments, origin, owner, scope, |sections, check| run.effects.check(sections, check))
    }

    /// Runs `check` with what an effect is checked against: the top-level
    /// blocks it may name, and this builder as its host, at `origin`.
    pub(super) fn with_effect_host<T>(
        &mut self,
        (arguments, free_text): (&[String], &[String]),
        origin: &Origin,
        owner: &str,
        scope: &mut Scope,
        check: impl FnOnce(&effect::Sections<'_>, &mut effect::Check<'_>) -> T,
    ) -> T {
        let assembled = self.assembled;
        let left_out = |block: &str, name: &str| match block {
            "databases" => assembled.databases.contains_key(name) || assembled.dropped.database(name),
            "apis" => assembled.apis.contains_key(name) || assembled.dropped.api(name),
            _ => false,
        };
        // Out of the builder while the effect is checked, which needs the builder too.
        let databases = std::mem::take(&mut self.databases);
        let apis = std::mem::take(&mut self.apis);
        let sections = effect::Sections { databases: &databases, apis: &apis, left_out: &left_out };
        let mut host = EffectHost { builder: self, origin, owner, scope };
        let checked = check(&sections, &mut effect::Check { arguments, free_text, host: &mut host });
        self.databases = databases;
        self.apis = apis;
        checked
    }

    /// Checks the steps at `base` (`/run/steps` of a tool, `/steps` of a
    /// prompt or resource) and registers their templates; input steps get
    /// their keys (default `stepN`, `stepN.M` inside an `ask`), which must be
    /// unique and well formed.
    pub(super) fn steps(
        &mut self,
        specs: &[StepSpec],
        owner: &str,
        origin: &Origin,
        base: &str,
        scope: &mut Scope,
    ) -> Option<Vec<Step>> {
        let mut steps = Vec::new();
        let mut ok = true;
        // Each key, and where it is written (or would be, for a default one).
        let mut keys: Vec<(String, Location, bool)> = Vec::new();
        for (idx, spec) in specs.iter().enumerate() {
            let below = format!("{base}/{idx}");
            let kinds = step_kinds(spec);
            if kinds.len() != 1 {
                let location = self.assembled.locate(origin, &below);
                let message = if kinds.is_empty() {
                    "this step does nothing".to_owned()
                } else {
                    format!("a step does one thing, but this one has `{}`", kinds.join("` and `"))
                };
                self.error("step", location, message).hint = Some(
                    "write each as its own list item: `- log: …`, `- progress: …`, `- sleep: 50ms`, `- elicit: …`, `- sample: …`, `- roots: {}`, `- ask: […]`"
                        .to_owned(),
                );
                ok = false;
                continue;
            }
            let name = |key: &str| format!("{owner}{below}/{key}");
            let step = if let Some(log) = &spec.log {
                let data = match &log.data {
                    Value::String(text) => self
                        .inline(name("log/data"), text, origin, &format!("{below}/log/data"), scope)
                        .map(StepData::Template),
                    other => Some(StepData::Literal(other.clone())),
                };
                data.map(|data| Step::Log { level: log.level, logger: log.logger.clone(), data })
            } else if let Some(progress) = &spec.progress {
                let amount = |builder: &mut Self, value: &NumberSpec, key: &str, scope: &mut Scope| match value {
                    NumberSpec::Number(n) => Some(Amount::Number(*n)),
                    NumberSpec::Template(text) => builder
                        .inline(
                            name(&format!("progress/{key}")),
                            text,
                            origin,
                            &format!("{below}/progress/{key}"),
                            scope,
                        )
                        .map(Amount::Template),
                };
                let value = amount(self, &progress.progress, "progress", scope);
                let total = match &progress.total {
                    Some(total) => amount(self, total, "total", scope).map(Some),
                    None => Some(None),
                };
                let message = match &progress.message {
                    Some(text) => self
                        .inline(name("progress/message"), text, origin, &format!("{below}/progress/message"), scope)
                        .map(Some),
                    None => Some(None),
                };
                match (value, total, message) {
                    (Some(progress), Some(total), Some(message)) => Some(Step::Progress { progress, total, message }),
                    _ => None,
                }
            } else if let Some(SleepSpec::Text(text)) = &spec.sleep
                && ["{{", "{%", "{#"].iter().any(|open| text.contains(open))
            {
                // A template: its output is read as a duration on each call.
                let template = self.inline(name("sleep"), text, origin, &format!("{below}/sleep"), scope);
                template.map(|template| Step::Sleep(Wait::Template(template)))
            } else if let Some(sleep) = &spec.sleep {
                match parse_duration(sleep) {
                    Ok(duration) => Some(Step::Sleep(Wait::Fixed(duration))),
                    Err(message) => {
                        let location = self.assembled.locate(origin, &format!("{below}/sleep"));
                        self.error("step", location, message).hint =
                            Some("write a duration such as `50ms`, `2s` or `1m` (at most 10m)".to_owned());
                        None
                    }
                }
            } else if let Some(asked) = &spec.ask {
                self.ask(asked, owner, origin, &below, idx + 1, scope, &mut keys).map(Step::Ask)
            } else {
                let default_key = format!("step{}", idx + 1);
                self.input(spec, owner, origin, &below, default_key, scope, &mut keys).map(Step::Input)
            };
            match step {
                Some(step) => steps.push(step),
                None => ok = false,
            }
        }
        let mut seen: HashMap<&str, (&Location, bool)> = HashMap::new();
        for (key, location, explicit) in &keys {
            let Some((first, first_explicit)) = seen.insert(key, (location, *explicit)) else { continue };
            let message = format!("two input steps have the key `{key}`");
            let note = crate::diag::Note { message: "first used here".to_owned(), location: first.clone() };
            let hint = match (first_explicit, *explicit) {
                (false, _) => format!(
                    "the first has no `key:`, so it is named `{key}` after its number; choose another key here, or give the first its own `key:`"
                ),
                (true, false) => format!(
                    "this step has no `key:`, so it is named `{key}` after its number, which the first already takes; give this step its own `key:`, or rename the first"
                ),
                (true, true) => format!(
                    "give each input step its own `key:`: the answer is found by it (`answers.{key}`, and the client's `inputResponses`)"
                ),
            };
            let diagnostic = self.error("step-key", location.clone(), message);
            diagnostic.notes.push(note);
            diagnostic.hint = Some(hint);
            ok = false;
        }
        ok.then_some(steps)
    }

    /// Checks the steps of an `ask` (step number `number`): only input steps, at least one.
    #[allow(clippy::too_many_arguments)]
    fn ask(
        &mut self,
        specs: &[StepSpec],
        owner: &str,
        origin: &Origin,
        below: &str,
        number: usize,
        scope: &mut Scope,
        keys: &mut Vec<(String, Location, bool)>,
    ) -> Option<Vec<Input>> {
        if specs.is_empty() {
            let location = self.assembled.locate(origin, &format!("{below}/ask"));
            self.error("step", location, "`ask` is empty").hint = Some(
                "list the questions to ask together (`- elicit: …`, `- sample: …`, `- roots: {}`), or remove the `ask`"
                    .to_owned(),
            );
            return None;
        }
        let mut inputs = Vec::new();
        let mut ok = true;
        for (at, spec) in specs.iter().enumerate() {
            let inner = format!("{below}/ask/{at}");
            let kinds = step_kinds(spec);
            let others: Vec<&str> =
                kinds.iter().copied().filter(|kind| !matches!(*kind, "elicit" | "sample" | "roots")).collect();
            if kinds.len() != 1 || !others.is_empty() {
                let location = self.assembled.locate(origin, &inner);
                let (message, hint) = match (kinds.len(), others.first()) {
                    (1, Some(&"ask")) => (
                        "an `ask` cannot hold another `ask`".to_owned(),
                        "list its questions directly in this `ask`: all of them are asked together".to_owned(),
                    ),
                    (0, _) => (
                        "this question asks nothing".to_owned(),
                        "write `- elicit: …`, `- sample: …` or `- roots: {}`".to_owned(),
                    ),
                    (1, Some(other)) => (
                        format!("`ask` holds only `elicit`, `sample` and `roots` steps, not `{other}`"),
                        format!(
                            "move the `{other}` step before or after the `ask`: the steps of an `ask` are questions asked together"
                        ),
                    ),
                    _ => (
                        format!("a question asks one thing, but this one has `{}`", kinds.join("` and `")),
                        "write each question as its own list item of the `ask`".to_owned(),
                    ),
                };
                self.error("step", location, message).hint = Some(hint);
                ok = false;
                continue;
            }
            let default_key = format!("step{number}.{}", at + 1);
            match self.input(spec, owner, origin, &inner, default_key, scope, keys) {
                Some(input) => inputs.push(input),
                None => ok = false,
            }
        }
        ok.then_some(inputs)
    }

    /// Checks an input step (`elicit`, `sample` or `roots`) at `below`, and
    /// records its key (`default_key` when it has none) in `keys`.
    #[allow(clippy::too_many_arguments)]
    fn input(
        &mut self,
        spec: &StepSpec,
        owner: &str,
        origin: &Origin,
        below: &str,
        default_key: String,
        scope: &mut Scope,
        keys: &mut Vec<(String, Location, bool)>,
    ) -> Option<Input> {
        let name = |key: &str| format!("{owner}{below}/{key}");
        let (kind_key, key, optional) = if let Some(elicit) = &spec.elicit {
            ("elicit", &elicit.key, elicit.optional)
        } else if let Some(sample) = &spec.sample {
            ("sample", &sample.key, sample.optional)
        } else if let Some(roots) = &spec.roots {
            ("roots", &roots.key, roots.optional)
        } else {
            return None;
        };
        let key_ok = match key {
            Some(key) => {
                let location = self.assembled.locate(origin, &format!("{below}/{kind_key}/key"));
                let bad = key.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')));
                let message = if key.is_empty() {
                    Some("the key is empty".to_owned())
                } else {
                    bad.map(|c| {
                        let shown = if c == ' ' { "a space".to_owned() } else { format!("`{}`", c.escape_default()) };
                        format!("`{key}` is not a valid key: it holds {shown}")
                    })
                };
                if let Some(message) = message {
                    self.error("step-key", location.clone(), message).hint = Some(
                        "a key is letters, digits, `_`, `.` and `-`, e.g. `user_name`: templates read the answer as `answers.user_name`"
                            .to_owned(),
                    );
                }
                keys.push((key.clone(), location, true));
                !key.is_empty() && bad.is_none()
            }
            None => {
                keys.push((
                    default_key.clone(),
                    self.assembled.locate_key(origin, &format!("{below}/{kind_key}")),
                    false,
                ));
                true
            }
        };
        let kind = if let Some(elicit) = &spec.elicit {
            let message =
                self.inline(name("elicit/message"), &elicit.message, origin, &format!("{below}/elicit/message"), scope);
            if elicit.requested_schema.get("type").and_then(Value::as_str) != Some("object") {
                let location = self.assembled.locate(origin, &format!("{below}/elicit/requestedSchema"));
                self.error("step", location, "`requestedSchema` must have `type: object` at the top").hint = Some(
                    "an elicitation form is an object of primitive properties: `type: object` with `properties:`"
                        .to_owned(),
                );
                None
            } else {
                message.map(|message| InputKind::Elicit {
                    message,
                    schema: Value::Object(elicit.requested_schema.clone()),
                })
            }
        } else if let Some(sample) = &spec.sample {
            let mut messages = Vec::new();
            let mut all = true;
            for (at, message) in sample.messages.iter().enumerate() {
                let key = format!("sample/messages/{at}/text");
                match self.inline(name(&key), &message.text, origin, &format!("{below}/{key}"), scope) {
                    Some(template) => messages.push((message.role, template)),
                    None => all = false,
                }
            }
            let system = match &sample.system_prompt {
                Some(text) => self
                    .inline(name("sample/systemPrompt"), text, origin, &format!("{below}/sample/systemPrompt"), scope)
                    .map(Some),
                None => Some(None),
            };
            match system {
                Some(system) if all => Some(InputKind::Sample { messages, max_tokens: sample.max_tokens, system }),
                _ => None,
            }
        } else {
            Some(InputKind::Roots)
        };
        let kind = kind.filter(|_| key_ok)?;
        Some(Input { key: key.clone().unwrap_or(default_key), optional: optional.unwrap_or(false), kind })
    }

    pub(super) fn result(
        &mut self,
        run: &RunSpec,
        owner: &str,
        origin: &Origin,
        scope: &mut Scope,
    ) -> Option<ResultSpec> {
        let renderers = present([
            ("text", run.text.is_some()),
            ("template", run.template.is_some()),
            ("content", run.content.is_some()),
        ]);
        if renderers.len() > 1 {
            let location = self.assembled.locate(origin, "/run");
            self.error("run", location, format!("`run` has both `{}` and `{}`", renderers[0], renderers[1])).hint =
                Some("a tool renders its result with one of `text`, `template` or `content`".to_owned());
            return None;
        }
        if let Some(text) = &run.text {
            return self.inline(format!("{owner}/run/text"), text, origin, "/run/text", scope).map(ResultSpec::Text);
        }
        if let Some(template) = &run.template {
            return self.file_template(template, origin, "/run/template", scope).map(ResultSpec::Text);
        }
        if let Some(blocks) = &run.content {
            let mut built = Vec::new();
            let mut ok = true;
            for (idx, block) in blocks.iter().enumerate() {
                match self.block(block, owner, origin, &format!("/run/content/{idx}"), scope) {
                    Some(block) => built.push(block),
                    None => ok = false,
                }
            }
            if blocks.is_empty() {
                let location = self.assembled.locate(origin, "/run/content");
                self.error("run", location, "`content` is empty").hint =
                    Some("list at least one block, e.g. `- text: …`".to_owned());
                return None;
            }
            return ok.then_some(ResultSpec::Content(built));
        }
        if run.effects.any() {
            return Some(ResultSpec::EffectJson);
        }
        let location = self.assembled.locate_key(origin, "/run");
        self.error("run", location, "`run` does nothing").hint = Some(
            "give it `text:`, `template:` or `content:` to render a result, or an effect such as `sql:`".to_owned(),
        );
        None
    }
}

/// What an effect is checked with: the builder, at the tool (or resource)
/// being built.
pub(super) struct EffectHost<'h, 'b> {
    pub(super) builder: &'h mut Builder<'b>,
    pub(super) origin: &'h Origin,
    /// `tool NAME:`, the start of the names of the tool's templates.
    pub(super) owner: &'h str,
    /// What the effect's templates may use.
    pub(super) scope: &'h mut Scope,
}

impl effect::Host for EffectHost<'_, '_> {
    fn locate(&self, pointer: &str) -> Location {
        self.builder.assembled.locate(self.origin, pointer)
    }

    fn locate_key(&self, pointer: &str) -> Location {
        self.builder.assembled.locate_key(self.origin, pointer)
    }

    fn locate_in(&self, pointer: &str, text: &str, range: Range<usize>) -> Location {
        let at = self.builder.assembled.locate(self.origin, pointer);
        // Read again only for an error, so no cache is needed.
        let file = std::fs::read_to_string(&at.file).ok();
        file.and_then(|file| super::scalar_map::locate_in_scalar(&file, &at, text, range)).unwrap_or(at)
    }

    fn template(&mut self, pointer: &str, source: &str) -> Option<effect::Template> {
        let name = format!("{}{pointer}", self.owner);
        let name = self.builder.inline(name, source, self.origin, pointer, self.scope)?;
        let typed = single_expression(source).and_then(|expression| {
            let twin = format!("{name}#json");
            let twin_source = format!("{{{{ ({expression}) | tojson }}}}");
            self.builder.env.template_from_named_str(&twin, &twin_source).ok()?;
            self.builder.sources.insert(twin.clone(), twin_source);
            Some(twin)
        });
        Some(effect::Template { name, typed })
    }

    fn url_template(&mut self, pointer: &str, source: &str) -> Option<effect::Template> {
        let name = format!("{}{pointer}", self.owner);
        let name = self.builder.inline(name, source, self.origin, pointer, self.scope)?;
        self.builder.url_templates.insert(name.clone());
        Some(effect::Template { name, typed: None })
    }

    fn report(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        let idx = self.builder.diagnostics.len();
        self.builder.diagnostics.push(diagnostic);
        &mut self.builder.diagnostics[idx]
    }
}

/// The keys of a step that are set (a step must have exactly one).
fn step_kinds(spec: &StepSpec) -> Vec<&'static str> {
    present([
        ("log", spec.log.is_some()),
        ("progress", spec.progress.is_some()),
        ("sleep", spec.sleep.is_some()),
        ("elicit", spec.elicit.is_some()),
        ("sample", spec.sample.is_some()),
        ("roots", spec.roots.is_some()),
        ("ask", spec.ask.is_some()),
    ])
}

/// What templates after `steps` see besides the arguments: the answers of
/// its input steps (`answers`, and the last of each kind).
pub(super) fn produced_by(steps: &[StepSpec]) -> Vec<String> {
    let mut inputs: Vec<&StepSpec> = Vec::new();
    for step in steps {
        inputs.push(step);
        inputs.extend(step.ask.iter().flatten());
    }
    let mut names = Vec::new();
    for (name, any) in [
        ("elicited", inputs.iter().any(|s| s.elicit.is_some())),
        ("sampled", inputs.iter().any(|s| s.sample.is_some())),
        ("roots", inputs.iter().any(|s| s.roots.is_some())),
        ("answers", inputs.iter().any(|s| s.elicit.is_some() || s.sample.is_some() || s.roots.is_some())),
    ] {
        if any {
            names.push(name.to_owned());
        }
    }
    names
}

/// The expression of a template that is nothing but one `{{ expression }}`
/// (`"{{ count }}"`, `"{{- n + 1 }}"`), whose value can keep its type.
fn single_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix(['-', '+']).unwrap_or(inner);
    let inner = inner.strip_suffix(['-', '+']).unwrap_or(inner).trim();
    let nested = ["{{", "}}", "{%", "%}", "{#", "#}"].iter().any(|mark| inner.contains(mark));
    (!inner.is_empty() && !nested).then_some(inner)
}

/// Reads a `sleep` duration: milliseconds, or `250ms`, `2s`, `1m`.
pub(super) fn parse_duration(spec: &SleepSpec) -> Result<std::time::Duration, String> {
    match spec {
        SleepSpec::Millis(ms) => crate::duration::sleep_of(*ms),
        SleepSpec::Text(text) => crate::duration::parse_sleep(text),
    }
}

/// The properties of `input_schema` a client may send as any text: typed
/// `string` (or untyped), without `enum`, `const` or `pattern`.
fn free_text(input_schema: &Map<String, Value>) -> Vec<String> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    let texts = |schema: &Map<String, Value>| match schema.get("type") {
        None => true,
        Some(Value::String(kind)) => kind == "string",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "string"),
        Some(_) => false,
    };
    properties
        .iter()
        .filter(|(_, schema)| {
            schema.as_object().is_none_or(|schema| {
                texts(schema) && !["enum", "const", "pattern"].iter().any(|key| schema.contains_key(*key))
            })
        })
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::single_expression;

    #[test]
    fn a_template_of_one_expression_is_told_from_others() {
        assert_eq!(single_expression("{{ count }}"), Some("count"));
        assert_eq!(single_expression(" {{- n + 1 -}} "), Some("n + 1"));
        assert_eq!(single_expression("{{ a }}-{{ b }}"), None);
        assert_eq!(single_expression("id {{ a }}"), None);
        assert_eq!(single_expression("{% if a %}x{% endif %}"), None);
        assert_eq!(single_expression("{{ }}"), None);
    }
}
