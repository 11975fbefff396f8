//! Steps (`run.steps` of a tool, `steps` of a prompt or resource): each
//! step's one kind, its templates and amounts, input steps' keys (unique,
//! well formed) and what later templates see of their answers.

use std::collections::HashMap;

use serde_json::Value;

use crate::catalog::assemble::Origin;
use crate::catalog::model::{NumberSpec, SleepSpec, StepSpec};
use crate::catalog::{Amount, Input, InputKind, Step, StepData, Wait};
use crate::diag::Location;

use super::{Builder, Scope, present};

impl Builder<'_> {
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
            match (&elicit.requested_schema, &elicit.url) {
                (Some(_), Some(_)) | (None, None) => {
                    let location = self.assembled.locate_key(origin, &format!("{below}/elicit"));
                    let message = if elicit.url.is_some() {
                        "an `elicit` step has both `requestedSchema` and `url`"
                    } else {
                        "an `elicit` step needs `requestedSchema` (a form) or `url` (a page)"
                    };
                    self.error("step", location, message).hint = Some(
                        "a form asks for values (`requestedSchema:`); `url:` sends the user to a page and says only whether they went"
                            .to_owned(),
                    );
                    None
                }
                (None, Some(url)) => {
                    let page = self.inline(name("elicit/url"), url, origin, &format!("{below}/elicit/url"), scope);
                    let written = url.trim_start();
                    if !written.starts_with("https://") && !written.starts_with("http://") && !written.starts_with("{{")
                    {
                        let location = self.assembled.locate(origin, &format!("{below}/elicit/url"));
                        self.error("step", location, format!("`elicit.url` `{url}` is not an http(s) URL")).hint = Some(
                            "write the page's full address, e.g. `https://shop.example/pay?order={{ order }}`"
                                .to_owned(),
                        );
                        None
                    } else {
                        message.zip(page).map(|(message, url)| InputKind::ElicitUrl { message, url })
                    }
                }
                (Some(schema), None) if schema.get("type").and_then(Value::as_str) != Some("object") => {
                    let location = self.assembled.locate(origin, &format!("{below}/elicit/requestedSchema"));
                    self.error("step", location, "`requestedSchema` must have `type: object` at the top").hint = Some(
                        "an elicitation form is an object of primitive properties: `type: object` with `properties:`"
                            .to_owned(),
                    );
                    None
                }
                (Some(schema), None) => {
                    message.map(|message| InputKind::Elicit { message, schema: Value::Object(schema.clone()) })
                }
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

/// Reads a `sleep` duration: milliseconds, or `250ms`, `2s`, `1m`.
pub(super) fn parse_duration(spec: &SleepSpec) -> Result<std::time::Duration, String> {
    match spec {
        SleepSpec::Millis(ms) => crate::duration::sleep_of(*ms),
        SleepSpec::Text(text) => crate::duration::parse_sleep(text),
    }
}
