//! Unit tests of `hub`.

use super::*;

/// Adds a session member without a transport; its notes land in the receiver.
fn joined(hub: &Hub) -> (Arc<Session>, mpsc::Receiver<Note>) {
    joined_in(hub, None)
}

/// Like [`joined`], for a client of `toolset`.
fn joined_in(hub: &Hub, toolset: Option<&str>) -> (Arc<Session>, mpsc::Receiver<Note>) {
    let session = hub.new_session_in(toolset.map(Arc::from));
    let (outbox, notes) = mpsc::channel(QUEUE);
    let toolset = session.toolset.clone();
    let member = Member { outbox, kind: Kind::Session(session.clone()), toolset, uris: HashSet::new() };
    lock(&hub.state).insert(session.id, member);
    (session, notes)
}

fn drain(notes: &mut mpsc::Receiver<Note>) -> Vec<Note> {
    std::iter::from_fn(|| notes.try_recv().ok()).collect()
}

#[test]
fn a_toolsets_clients_hear_of_tools_only_when_its_tools_changed() {
    let hub = Hub::default();
    let (_all, mut all_notes) = joined(&hub);
    let (_readonly, mut readonly_notes) = joined_in(&hub, Some("readonly"));
    let (_booking, mut booking_notes) = joined_in(&hub, Some("booking"));
    let outside = Changes { tools: true, prompts: true, ..Changes::default() };
    hub.announce(&outside, None);
    assert_eq!(drain(&mut all_notes), [Note::ToolsChanged, Note::PromptsChanged]);
    assert_eq!(drain(&mut readonly_notes), [Note::PromptsChanged]);
    assert_eq!(drain(&mut booking_notes), [Note::PromptsChanged]);
    let inside = Changes { tools: true, toolsets: BTreeSet::from(["readonly".to_owned()]), ..Changes::default() };
    hub.announce(&inside, None);
    assert_eq!(drain(&mut all_notes), [Note::ToolsChanged]);
    assert_eq!(drain(&mut readonly_notes), [Note::ToolsChanged]);
    assert_eq!(drain(&mut booking_notes), []);
}

#[test]
fn levels_filter_messages() {
    let hub = Hub::default();
    let session = hub.new_session();
    assert!(session.admits(LoggingLevel::Error));
    assert!(!session.admits(LoggingLevel::Info));
    session.set_level(LoggingLevel::Debug);
    assert!(session.admits(LoggingLevel::Debug));
    session.set_level(LoggingLevel::Critical);
    assert!(!session.admits(LoggingLevel::Error));
}

#[test]
fn subscriptions_are_capped_per_session() {
    let hub = Hub::default();
    let (session, _notes) = joined(&hub);
    for idx in 0..MAX_SUBSCRIPTIONS {
        hub.subscribe(&session, &format!("x://{idx}")).unwrap();
    }
    assert_eq!(hub.subscribe(&session, "x://one-more"), Err(SubscribeError::TooMany));
    // Subscribing again to a URI it has costs nothing; unsubscribing makes room.
    hub.subscribe(&session, "x://0").unwrap();
    hub.unsubscribe(&session, "x://0");
    hub.subscribe(&session, "x://one-more").unwrap();
    let (other, _other_notes) = joined(&hub);
    hub.subscribe(&other, "x://1").unwrap();
    assert_eq!(hub.subscribed_uris().len(), MAX_SUBSCRIPTIONS);
    let stranger = hub.new_session();
    assert_eq!(hub.subscribe(&stranger, "x://1"), Err(SubscribeError::NotJoined));
}

#[test]
fn the_index_follows_subscribe_unsubscribe_and_leave() {
    let hub = Hub::default();
    let (first, _a) = joined(&hub);
    let (second, _b) = joined(&hub);
    hub.subscribe(&first, "x://shared").unwrap();
    hub.subscribe(&second, "x://shared").unwrap();
    hub.subscribe(&second, "x://own").unwrap();
    assert_eq!(hub.subscribed_uris(), BTreeSet::from(["x://own".to_owned(), "x://shared".to_owned()]));
    hub.unsubscribe(&first, "x://shared");
    assert!(hub.subscribed_uris().contains("x://shared"));
    hub.leave(second.id);
    assert!(hub.subscribed_uris().is_empty());
    assert!(lock(&hub.state).subscribers.is_empty());
}

#[test]
fn each_client_hears_of_its_own_subscriptions_only() {
    let hub = Hub::default();
    let (first, mut first_notes) = joined(&hub);
    let (second, mut second_notes) = joined(&hub);
    first.set_level(LoggingLevel::Info);
    second.set_level(LoggingLevel::Info);
    hub.subscribe(&first, "x://first").unwrap();
    hub.subscribe(&second, "x://second").unwrap();
    let changes = Changes {
        tools: true,
        updated: BTreeSet::from(["x://first".to_owned(), "x://second".to_owned()]),
        ..Changes::default()
    };
    let data = |uris: &[&str]| Value::from(uris.join(" "));
    hub.announce(&changes, Some(&Report { level: LogLevel::Info, logger: "l", data: &data }));
    let log = |text: &str| Note::Log { level: LoggingLevel::Info, logger: "l".to_owned(), data: Value::from(text) };
    assert_eq!(drain(&mut first_notes), [Note::ToolsChanged, Note::Updated("x://first".to_owned()), log("x://first")]);
    assert_eq!(
        drain(&mut second_notes),
        [Note::ToolsChanged, Note::Updated("x://second".to_owned()), log("x://second")]
    );
    // A session whose level is above the report's gets the notifications only.
    second.set_level(LoggingLevel::Error);
    hub.announce(&changes, Some(&Report { level: LogLevel::Info, logger: "l", data: &data }));
    assert_eq!(drain(&mut second_notes), [Note::ToolsChanged, Note::Updated("x://second".to_owned())]);
}

#[test]
fn contents_are_recorded_for_subscribed_uris_only_and_go_with_the_last_subscriber() {
    let hub = Hub::default();
    let (first, _a) = joined(&hub);
    let (second, _b) = joined(&hub);
    let (one, two) = (Fingerprint::of(b"one"), Fingerprint::of(b"two"));
    assert!(!hub.record("x://live", one), "nobody subscribed: not recorded");
    hub.subscribe(&first, "x://live").unwrap();
    hub.subscribe(&second, "x://live").unwrap();
    assert!(hub.record("x://live", one), "never recorded: changed");
    assert!(!hub.record("x://live", one));
    hub.record_first("x://live", two);
    assert!(!hub.record("x://live", one), "a first read does not replace a later one");
    assert!(hub.record("x://live", two));
    hub.unsubscribe(&first, "x://live");
    assert!(!hub.record("x://live", two), "kept while someone subscribes");
    hub.leave(second.id);
    assert!(lock(&hub.state).contents.is_empty());
    hub.subscribe(&first, "x://live").unwrap();
    hub.record_first("x://live", one);
    assert!(!hub.record("x://live", one), "the first read is what a write is compared with");
}
