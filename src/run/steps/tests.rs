//! Unit tests of `steps`.

use std::sync::Mutex;

use super::*;

fn question(method: &'static str, params: Value) -> Question {
    Question { key: "q".to_owned(), method, params }
}

fn form() -> Question {
    question(
        "elicitation/create",
        json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
    )
}

#[test]
fn an_elicitation_answer_fits_its_form() {
    assert_eq!(fits(&form(), &json!({"action": "accept", "content": {"name": "Ada"}})), Ok(()));
    assert_eq!(fits(&form(), &json!({"action": "decline"})), Ok(()));
    assert_eq!(fits(&form(), &json!({"action": "cancel", "content": null})), Ok(()));
    for (answer, says) in [
        (json!(12345), "not an object"),
        (json!({"action": "accept", "content": {"name": 7}}), "does not fit its form: `name` must be of type string"),
        (json!({"action": "accept", "content": {}}), "`name` is required"),
        (json!({"action": "accept"}), "no `content` object"),
        (json!({"action": "maybe"}), "no `action` of accept, decline or cancel"),
        (json!({"content": {"name": "Ada"}}), "no `action`"),
    ] {
        let err = fits(&form(), &answer).unwrap_err();
        assert!(err.contains(says), "{answer}: {err}");
    }
}

#[test]
fn sampling_and_roots_answers_have_their_shapes() {
    let sample = question("sampling/createMessage", json!({"messages": [], "maxTokens": 5}));
    let reply = json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
    assert_eq!(fits(&sample, &reply), Ok(()));
    assert!(fits(&sample, &json!({"role": "assistant", "content": {"type": "text", "text": "hi"}})).is_err());
    assert!(fits(&sample, &json!({"role": "robot", "content": {}, "model": "m"})).is_err());
    let roots = question("roots/list", json!({}));
    assert_eq!(fits(&roots, &json!({"roots": [{"uri": "file:///a", "name": "A"}]})), Ok(()));
    assert_eq!(fits(&roots, &json!({"roots": []})), Ok(()));
    assert!(fits(&roots, &json!({"roots": [{"name": "A"}]})).is_err());
    assert!(fits(&roots, &json!({"roots": "file:///a"})).is_err());
    // An answer of one kind does not answer another.
    assert!(fits(&roots, &reply).is_err());
    assert!(fits(&form(), &json!({"roots": []})).is_err());
}

#[test]
fn a_resume_travels_as_json() {
    let mut answers = Map::new();
    answers.insert("step1".to_owned(), json!({"action": "accept", "content": {"name": "Ada"}}));
    let resume = Resume { step: 3, answers };
    let text = serde_json::to_string(&resume).unwrap();
    assert_eq!(serde_json::from_str::<Resume>(&text).unwrap(), resume);
    assert_eq!(serde_json::from_str::<Resume>(r#"{"step": 0, "answers": {}}"#).unwrap(), Resume::default());
}

/// What a test client was sent.
#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<String>>,
    asked: Mutex<Vec<Vec<String>>>,
    /// The answers it has, by key; a question without one stays open.
    answers: Map<String, Value>,
    can: bool,
}

impl Client for Recorder {
    fn log(&self, _level: LogLevel, _logger: &str, data: Value) -> ClientFuture<'_, ()> {
        self.logs.lock().unwrap().push(data.as_str().unwrap_or_default().to_owned());
        Box::pin(std::future::ready(()))
    }

    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) -> ClientFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>> {
        self.asked.lock().unwrap().push(questions.iter().map(|q| q.key.clone()).collect());
        let (mut answered, mut open) = (Map::new(), Vec::new());
        for question in questions {
            match self.answers.get(&question.key) {
                Some(answer) if fits(&question, answer).is_ok() => {
                    answered.insert(question.key, answer.clone());
                }
                _ => open.push(question),
            }
        }
        let result = if open.is_empty() { Ok(answered) } else { Err(Unanswered::Open { open, answered }) };
        Box::pin(std::future::ready(result))
    }

    fn can_answer(&self, _capability: &str) -> bool {
        self.can
    }

    fn cancelled(&self) -> bool {
        false
    }

    fn until_cancelled(&self) -> ClientFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    fn caller(&self) -> Option<&Map<String, Value>> {
        None
    }

    fn access_token(&self) -> Option<&crate::effect::http::AccessToken> {
        None
    }

    fn render_caller(&self) -> render::Caller {
        render::Caller::new("test")
    }
}

const CATALOG: &str = r#"
tools:
  - name: t
    description: Asks twice.
    run:
      steps:
        - log: { level: info, data: "before" }
        - elicit:
            message: "Name?"
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
        - log: { level: info, data: "between {{ elicited.content.name }}" }
        - ask:
            - roots: { key: where }
            - sample: { key: model, optional: true, messages: [{ role: user, text: "Hi {{ answers.step2.content.name }}" }], maxTokens: 5 }
      text: "{{ answers.step2.content.name }} {{ roots | length }} {{ sampled.content.text | default('-') }}"
"#;

fn catalog() -> Arc<Catalog> {
    Arc::new(crate::catalog::from_text(CATALOG))
}

fn run_once(catalog: &Arc<Catalog>, client: &Recorder, resume: Resume) -> Result<Resume, Stopped> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let steps = &catalog.tool("t").unwrap().steps;
    let mut context = BTreeMap::new();
    let owner = Owner { catalog, what: "tool `t`" };
    runtime.block_on(run(owner, steps, &mut context, client, resume, None))
}

#[test]
fn a_run_stops_for_input_and_resumes_without_repeating_steps() {
    let catalog = catalog();
    let name = json!({"action": "accept", "content": {"name": "Ada"}});
    // Round 1: the first question is open; nothing after it ran.
    let client = Recorder::default();
    let Err(Stopped::InputRequired(InputRequired { questions, resume })) =
        run_once(&catalog, &client, Resume::default())
    else {
        panic!("no input required")
    };
    assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["step2"]);
    assert_eq!(questions[0].params["message"], "Name?");
    assert_eq!(resume, Resume { step: 1, answers: Map::new() });
    assert_eq!(*client.logs.lock().unwrap(), ["before"]);

    // Round 2: the name is answered; the `ask` is open (sampling skipped: optional, not declared).
    let client =
        Recorder { answers: [("step2".to_owned(), name.clone())].into_iter().collect(), ..Recorder::default() };
    let Err(Stopped::InputRequired(InputRequired { questions, resume })) = run_once(&catalog, &client, resume) else {
        panic!("no second round")
    };
    assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["where"]);
    assert_eq!(resume.step, 3);
    assert_eq!(resume.answers.get("step2"), Some(&name));
    assert_eq!(*client.logs.lock().unwrap(), ["between Ada"], "the first log ran again");

    // Round 3: only the newest answer is sent; the earlier one comes from the resume.
    let roots = json!({"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]});
    let client = Recorder { answers: [("where".to_owned(), roots)].into_iter().collect(), ..Recorder::default() };
    let done = run_once(&catalog, &client, resume).unwrap_or_else(|stopped| panic!("{stopped:?}"));
    assert_eq!(done.step, 4);
    assert_eq!(done.answers.keys().collect::<Vec<_>>(), ["step2", "where"]);
    assert!(client.logs.lock().unwrap().is_empty(), "logs before the resumed step ran again");
    assert_eq!(*client.asked.lock().unwrap(), [vec!["where".to_owned()]]);
}

#[test]
fn optional_questions_are_asked_when_the_client_can_answer_them() {
    let catalog = catalog();
    let client = Recorder { can: true, ..Recorder::default() };
    let answered = [("step2".to_owned(), json!({"action": "accept", "content": {"name": "Ada"}}))];
    let resume = Resume { step: 3, answers: answered.into_iter().collect() };
    let stopped = run_once(&catalog, &client, resume);
    let Err(Stopped::InputRequired(InputRequired { questions, .. })) = stopped else { panic!("{stopped:?}") };
    assert_eq!(questions[1].params["messages"][0]["content"]["text"], "Hi Ada");
    assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["where", "model"]);
}

#[test]
fn needed_lists_the_unanswered_questions_that_are_not_optional() {
    let catalog = catalog();
    let steps = &catalog.tool("t").unwrap().steps;
    let keys = |resume: &Resume| needed(steps, resume).iter().map(|i| i.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&Resume::default()), ["step2", "where"]);
    assert_eq!(keys(&Resume { step: 3, answers: Map::new() }), ["where"]);
    let answered = [("where".to_owned(), json!({"roots": []}))].into_iter().collect();
    assert!(keys(&Resume { step: 3, answers: answered }).is_empty());
    assert!(keys(&Resume { step: 99, answers: Map::new() }).is_empty());
}

#[test]
fn steps_that_ask_nothing_leave_an_argument_named_answers_alone() {
    let catalog = catalog();
    let steps = &catalog.tool("t").unwrap().steps[..1];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut context = BTreeMap::from([("answers".to_owned(), TemplateValue::from(42))]);
    let owner = Owner { catalog: &catalog, what: "tool `t`" };
    let client = Recorder::default();
    runtime.block_on(run(owner, steps, &mut context, &client, Resume::default(), None)).unwrap();
    assert_eq!(context["answers"], TemplateValue::from(42));
    runtime.block_on(run(owner, &[], &mut context, &client, Resume::default(), None)).unwrap();
    assert_eq!(context["answers"], TemplateValue::from(42));
}

#[test]
fn a_resume_past_the_last_step_is_refused() {
    let catalog = catalog();
    let stopped = run_once(&catalog, &Recorder::default(), Resume { step: 9, answers: Map::new() });
    assert!(
        matches!(stopped, Err(Stopped::Failed(ref m)) if m.contains("changed since this call began")),
        "{stopped:?}"
    );
}
