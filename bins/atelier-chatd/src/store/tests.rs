use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::history::{rebuild, HistoryEntry, INTERRUPTED_TOOL_RESULT_ERROR};
use super::*;

const ALICE: &str = "user-alice";
const BOB: &str = "user-bob";

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("chatd.sqlite3")).unwrap();
    (dir, store)
}

fn new_conversation(scope: Scope, title: Option<&str>) -> NewConversation {
    NewConversation {
        scope,
        title: title.map(str::to_owned),
        credential_id: "cred-1".into(),
        model_id: "model-1".into(),
    }
}

fn text(role: Role, text: &str) -> NewMessage {
    NewMessage {
        role,
        content: vec![ContentBlock::Text { text: text.into() }],
        tool_call: None,
    }
}

fn call(id: &str) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolCall {
            tool_call_id: id.into(),
            tool_name: "read_page".into(),
            input: serde_json::json!({"path": "/"}),
        }],
        tool_call: Some(ToolCallRef {
            id: id.into(),
            name: "read_page".into(),
        }),
    }
}

fn result(id: &str, ok: bool) -> NewMessage {
    NewMessage {
        role: Role::Tool,
        content: vec![ContentBlock::ToolResult {
            ok,
            error: (!ok).then(|| "Tool call failed.".to_owned()),
        }],
        tool_call: Some(ToolCallRef {
            id: id.into(),
            name: "read_page".into(),
        }),
    }
}

#[test]
fn conversations_are_per_user_and_per_scope_newest_first() {
    let (_dir, store) = open();
    let first = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, Some("  First  ")))
        .unwrap();
    let second = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, Some("   ")))
        .unwrap();
    store
        .create_conversation(ALICE, &new_conversation(Scope::Content, None))
        .unwrap();
    store
        .create_conversation(BOB, &new_conversation(Scope::Site, None))
        .unwrap();

    assert_eq!(first.title, "First");
    assert_eq!(second.title, DEFAULT_TITLE);
    assert!(
        first.created_at.ends_with('Z') && first.created_at.contains('T'),
        "{}",
        first.created_at
    );

    // Touching the first conversation makes it the most recent.
    store
        .append_message(&first.id, &text(Role::User, "hello"))
        .unwrap();
    let listed: Vec<String> = store
        .list_conversations(ALICE, Scope::Site)
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed, [first.id.clone(), second.id.clone()]);

    assert!(
        store.conversation(BOB, &first.id).unwrap().is_none(),
        "Bob cannot read Alice's"
    );
    assert!(matches!(
        store.update_conversation(BOB, &first.id, &ConversationUpdate::default()),
        Err(StoreError::ConversationNotFound)
    ));
    assert!(!store.delete_conversation(BOB, &first.id).unwrap());
    assert!(store.conversation(ALICE, &first.id).unwrap().is_some());
}

#[test]
fn updates_keep_what_is_not_given_and_a_blank_title() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Data, Some("Keep")))
        .unwrap();
    let updated = store
        .update_conversation(
            ALICE,
            &conversation.id,
            &ConversationUpdate {
                title: Some("  ".into()),
                credential_id: None,
                model_id: Some("model-2".into()),
            },
        )
        .unwrap();
    assert_eq!(updated.title, "Keep");
    assert_eq!(updated.model_id, "model-2");
    assert_eq!(updated.credential_id.as_deref(), Some("cred-1"));
}

#[test]
fn soft_delete_hides_and_repeats_and_refuses_appends() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Plugin, None))
        .unwrap();
    assert!(store.delete_conversation(ALICE, &conversation.id).unwrap());
    assert!(
        store.delete_conversation(ALICE, &conversation.id).unwrap(),
        "deleting again succeeds"
    );
    assert!(store
        .conversation(ALICE, &conversation.id)
        .unwrap()
        .is_none());
    assert!(store
        .list_conversations(ALICE, Scope::Plugin)
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.append_message(&conversation.id, &text(Role::User, "late")),
        Err(StoreError::ConversationNotFound)
    ));
    assert!(store.messages(&conversation.id).unwrap().is_empty());
}

#[test]
fn appends_number_positions_without_gaps_and_round_trip_blocks() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    let image = NewMessage {
        role: Role::User,
        content: vec![
            ContentBlock::Text {
                text: "look".into(),
            },
            ContentBlock::Image {
                mime_type: "image/jpeg".into(),
                data: "/9j/".into(),
            },
        ],
        tool_call: None,
    };
    let written = [
        image,
        call("c1"),
        result("c1", true),
        text(Role::Assistant, "done"),
    ]
    .iter()
    .map(|m| store.append_message(&conversation.id, m).unwrap())
    .collect::<Vec<_>>();
    assert_eq!(
        written.iter().map(|m| m.position).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(store.messages(&conversation.id).unwrap(), written);
}

#[test]
fn malformed_messages_are_refused_before_anything_is_written() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    let cases: Vec<(&str, NewMessage)> = vec![
        (
            "tool row without its call",
            NewMessage {
                tool_call: None,
                ..result("c1", true)
            },
        ),
        (
            "user row naming a call",
            NewMessage {
                tool_call: Some(ToolCallRef {
                    id: "c".into(),
                    name: "t".into(),
                }),
                ..text(Role::User, "x")
            },
        ),
        (
            "assistant call without its call",
            NewMessage {
                tool_call: None,
                ..call("c1")
            },
        ),
    ];
    for (name, message) in cases {
        let error = store
            .append_message(&conversation.id, &message)
            .unwrap_err();
        assert!(
            matches!(error, StoreError::InvalidMessage(_)),
            "case {name}: {error:?}"
        );
    }
    assert!(store.messages(&conversation.id).unwrap().is_empty());
}

#[test]
fn a_stored_row_that_no_longer_validates_reads_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chatd.sqlite3");
    let store = Store::open(&path).unwrap();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    store
        .append_message(&conversation.id, &text(Role::User, "fine"))
        .unwrap();
    let broken = store
        .append_message(&conversation.id, &text(Role::User, "to break"))
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE ai_messages SET content_json = '[{\"kind\":\"video\"}]' WHERE id = ?1",
            [&broken.id],
        )
        .unwrap();
    let messages = store.messages(&conversation.id).unwrap();
    assert_eq!(
        messages[0].content,
        [ContentBlock::Text {
            text: "fine".into()
        }]
    );
    assert!(messages[1].content.is_empty());
}

#[test]
fn a_database_from_a_newer_chatd_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chatd.sqlite3");
    drop(Store::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let known = i64::try_from(MIGRATIONS.len()).unwrap();
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::NewerSchema { found: 99, known: k }) if k == known
    ));
    // Reopening a current database migrates nothing twice.
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", known)
        .unwrap();
    Store::open(&path).unwrap();
}

#[test]
fn the_lease_admits_one_writer_until_released() {
    let leases = Leases::default();
    let lease = leases.try_acquire("conv-1").expect("free");
    assert!(
        leases.try_acquire("conv-1").is_none(),
        "a second send is refused"
    );
    assert!(
        leases.try_acquire("conv-2").is_some(),
        "other conversations are independent"
    );
    assert!(leases.is_held("conv-1"));
    assert_eq!(lease.conversation_id(), "conv-1");
    drop(lease);
    assert!(!leases.is_held("conv-1"));
    assert!(leases.try_acquire("conv-1").is_some(), "released on drop");
}

fn row(role: Role, content: Vec<ContentBlock>, call: Option<&str>) -> Message {
    Message {
        id: String::new(),
        position: 0,
        role,
        content,
        tool_call: call.map(|id| ToolCallRef {
            id: id.into(),
            name: "t".into(),
        }),
        created_at: String::new(),
    }
}

fn call_block(id: &str) -> ContentBlock {
    ContentBlock::ToolCall {
        tool_call_id: id.into(),
        tool_name: "t".into(),
        input: serde_json::json!({}),
    }
}

fn healed(id: &str) -> HistoryEntry {
    HistoryEntry::ToolResult {
        tool_call_id: id.into(),
        ok: false,
        error: Some(INTERRUPTED_TOOL_RESULT_ERROR.into()),
    }
}

#[test]
fn history_heals_every_unanswered_call() {
    let hi = || vec![ContentBlock::Text { text: "hi".into() }];
    let ok = |ok: bool| vec![ContentBlock::ToolResult { ok, error: None }];
    let answered = |id: &str, ok: bool| HistoryEntry::ToolResult {
        tool_call_id: id.into(),
        ok,
        error: None,
    };
    let cases: Vec<(&str, Vec<Message>, Vec<HistoryEntry>)> = vec![
        (
            "answered call replays as is",
            vec![
                row(Role::User, hi(), None),
                row(Role::Assistant, vec![call_block("a")], Some("a")),
                row(Role::Tool, ok(true), Some("a")),
            ],
            vec![
                HistoryEntry::User(hi()),
                HistoryEntry::Assistant(vec![call_block("a")]),
                answered("a", true),
            ],
        ),
        (
            "unanswered call at the end is healed",
            vec![
                row(Role::User, hi(), None),
                row(Role::Assistant, vec![call_block("a")], Some("a")),
            ],
            vec![
                HistoryEntry::User(hi()),
                HistoryEntry::Assistant(vec![call_block("a")]),
                healed("a"),
            ],
        ),
        (
            "a user turn closes open calls first, in call order",
            vec![
                row(Role::Assistant, vec![call_block("a")], Some("a")),
                row(Role::Assistant, vec![call_block("b")], Some("b")),
                row(Role::User, hi(), None),
            ],
            vec![
                HistoryEntry::Assistant(vec![call_block("a")]),
                HistoryEntry::Assistant(vec![call_block("b")]),
                healed("a"),
                healed("b"),
                HistoryEntry::User(hi()),
            ],
        ),
        (
            "an orphan result is dropped",
            vec![
                row(Role::User, hi(), None),
                row(Role::Tool, ok(true), Some("ghost")),
            ],
            vec![HistoryEntry::User(hi())],
        ),
        (
            "a late result after the user moved on is dropped",
            vec![
                row(Role::Assistant, vec![call_block("a")], Some("a")),
                row(Role::User, hi(), None),
                row(Role::Tool, ok(true), Some("a")),
            ],
            vec![
                HistoryEntry::Assistant(vec![call_block("a")]),
                healed("a"),
                HistoryEntry::User(hi()),
            ],
        ),
        (
            "a tool row without a result block counts as interrupted",
            vec![
                row(Role::Assistant, vec![call_block("a")], Some("a")),
                row(Role::Tool, vec![], Some("a")),
            ],
            vec![HistoryEntry::Assistant(vec![call_block("a")]), healed("a")],
        ),
        (
            "results out of order answer their own calls",
            vec![
                row(
                    Role::Assistant,
                    vec![call_block("a"), call_block("b")],
                    None,
                ),
                row(Role::Tool, ok(false), Some("b")),
                row(Role::Tool, ok(true), Some("a")),
            ],
            vec![
                HistoryEntry::Assistant(vec![call_block("a"), call_block("b")]),
                answered("b", false),
                answered("a", true),
            ],
        ),
    ];
    for (name, rows, expected) in cases {
        assert_eq!(rebuild(&rows), expected, "case {name}");
    }
}

/// The environment variable that turns this test binary into the crash test's writer.
const CRASH_CHILD_DB: &str = "ATELIER_CHATD_CRASH_CHILD_DB";

/// The writer half of the crash test: appends and acknowledges on stdout after each commit,
/// forever, until the parent kills it with SIGKILL.
#[test]
#[ignore = "run as a child by acknowledged_appends_survive_kill_9"]
fn crash_child() {
    let Some(path) = std::env::var_os(CRASH_CHILD_DB) else {
        return;
    };
    let store = Store::open(std::path::Path::new(&path)).unwrap();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    println!("conversation {}", conversation.id);
    for n in 0.. {
        let message = store
            .append_message(&conversation.id, &text(Role::User, &format!("message {n}")))
            .unwrap();
        println!("acked {}", message.position);
    }
}

#[test]
fn acknowledged_appends_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chatd.sqlite3");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::tests::crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD_DB, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut conversation = None;
    let mut last_acked = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        // libtest may print "test … " on the same line before the child's first words.
        if let Some(id) = line.split("conversation ").nth(1) {
            conversation = Some(id.to_owned());
        }
        if let Some(position) = line.split("acked ").nth(1) {
            last_acked = Some(position.trim().parse::<i64>().unwrap());
            if last_acked >= Some(200) {
                break;
            }
        }
    }
    // SIGKILL: no destructor, no checkpoint, no chance to flush anything more.
    child.kill().unwrap();
    child.wait().unwrap();
    let last_acked = last_acked.expect("the child acknowledged appends");

    let store = Store::open(&path).unwrap();
    let messages = store
        .messages(&conversation.expect("the child created a conversation"))
        .unwrap();
    assert!(
        messages.len() as i64 > last_acked,
        "acknowledged up to position {last_acked}, found {} rows",
        messages.len()
    );
    for (expected, message) in messages.iter().enumerate() {
        assert_eq!(message.position, expected as i64, "positions have no gap");
        assert_eq!(
            message.content,
            [ContentBlock::Text {
                text: format!("message {expected}")
            }]
        );
    }
}

#[test]
fn a_user_turn_titles_a_new_conversation_in_the_same_commit_but_never_renames() {
    let (_dir, store) = open();
    let fresh = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    store
        .append_user_turn(&fresh.id, &text(Role::User, "hello"), "Hello", ALICE)
        .unwrap();
    assert_eq!(
        store.conversation(ALICE, &fresh.id).unwrap().unwrap().title,
        "Hello"
    );
    store
        .append_user_turn(&fresh.id, &text(Role::User, "again"), "Again", ALICE)
        .unwrap();
    assert_eq!(
        store.conversation(ALICE, &fresh.id).unwrap().unwrap().title,
        "Hello",
        "only a default title is replaced"
    );
    let named = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, Some("Mine")))
        .unwrap();
    store
        .append_user_turn(&named.id, &text(Role::User, "hi"), "Hi", ALICE)
        .unwrap();
    assert_eq!(
        store.conversation(ALICE, &named.id).unwrap().unwrap().title,
        "Mine"
    );
}

/// A write to a conversation, named by its id.
type Change = fn(&Store, &str);

#[test]
fn a_turn_read_stays_current_until_something_is_written() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    store
        .append_message(&conversation.id, &text(Role::User, "hello"))
        .unwrap();
    let read = store
        .read_for_turn(ALICE, &conversation.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        read.conversation,
        conversation_now(&store, &conversation.id)
    );
    assert_eq!(read.messages, store.messages(&conversation.id).unwrap());
    assert_eq!(read.messages.len(), 1);
    assert!(store
        .read_for_turn(BOB, &conversation.id)
        .unwrap()
        .is_none());
    // Reads, and marking a credential used, change no conversation.
    store.conversation(ALICE, &conversation.id).unwrap();
    store.messages(&conversation.id).unwrap();
    store.touch_credential("cred-1").unwrap();
    assert!(store.unchanged_since(read.mark));

    // Each way a conversation or its messages change makes the read stale.
    let writes: [(&str, Change); 4] = [
        ("an append", |store, id| {
            store
                .append_message(id, &text(Role::Assistant, "hi"))
                .map(drop)
                .unwrap();
        }),
        ("a user turn", |store, id| {
            store
                .append_user_turn(id, &text(Role::User, "more"), "More", ALICE)
                .map(drop)
                .unwrap();
        }),
        ("a repoint", |store, id| {
            let update = ConversationUpdate {
                model_id: Some("model-2".into()),
                ..ConversationUpdate::default()
            };
            store
                .update_conversation(ALICE, id, &update)
                .map(drop)
                .unwrap();
        }),
        ("a deletion", |store, id| {
            store.delete_conversation(ALICE, id).map(drop).unwrap();
        }),
    ];
    for (name, write) in writes {
        let mark = store
            .read_for_turn(ALICE, &conversation.id)
            .unwrap()
            .expect("live until the last write")
            .mark;
        assert!(store.unchanged_since(mark), "{name}");
        write(&store, &conversation.id);
        assert!(!store.unchanged_since(mark), "{name}");
    }
}

#[test]
fn a_credential_is_marked_used_before_the_writes_queued_after_it() {
    let (_dir, store) = open();
    let credential = store
        .create_credential(
            ALICE,
            &NewCredential {
                provider_id: "ollama".into(),
                auth_mode: AuthMode::BaseUrl,
                display_label: "Local".into(),
                sealed: None,
                base_url: Some("http://127.0.0.1:11434".into()),
            },
        )
        .unwrap();
    assert_eq!(credential.last_used_at, None);
    let conversation = store
        .create_conversation(ALICE, &new_conversation(Scope::Site, None))
        .unwrap();
    store.touch_credential(&credential.id).unwrap();
    // Queued behind the mark, this commit returning means the mark is stored.
    store
        .append_message(&conversation.id, &text(Role::User, "hello"))
        .unwrap();
    let marked = store.credential(ALICE, &credential.id).unwrap().unwrap();
    assert!(marked.last_used_at.is_some());
}

fn conversation_now(store: &Store, id: &str) -> Conversation {
    store.conversation(ALICE, id).unwrap().unwrap()
}

/// A usage slot row: slot, conversation, messages, prompt, completion, cost, cache read, write.
type SlotRow = (i64, String, i64, i64, i64, f64, i64, i64);

#[test]
fn usage_slots_follow_every_append_and_booking_exactly() {
    let (_dir, store) = open();
    let conversation = store
        .create_conversation("u1", &new_conversation(Scope::Site, None))
        .unwrap();
    let usage = TurnUsage {
        prompt_tokens: 100,
        completion_tokens: 20,
        cost_usd: 0.5,
        cache_read_tokens: 3,
        cache_creation_tokens: 4,
        context_tokens: 100,
    };
    store
        .append_message(&conversation.id, &text(Role::User, "hi"))
        .unwrap();
    let reply = store
        .append_message(&conversation.id, &text(Role::Assistant, "hello"))
        .unwrap();
    store
        .record_usage(&conversation.id, &reply.id, &usage)
        .unwrap();
    // Booking the same row again replaces its numbers; the slot must not count them twice.
    store
        .record_usage(&conversation.id, &reply.id, &usage)
        .unwrap();
    let slots = |store: &Store| -> Vec<SlotRow> {
        let connection = store.connection().unwrap();
        let mut statement = connection
            .prepare("SELECT * FROM ai_usage_slots ORDER BY slot, conversation_id")
            .unwrap();
        statement
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let incremental = slots(&store);
    assert_eq!(incremental.iter().map(|s| s.2).sum::<i64>(), 2);
    assert_eq!(incremental.iter().map(|s| s.3).sum::<i64>(), 100);
    store.rebuild_usage_slots().unwrap();
    assert_eq!(slots(&store), incremental);
}

#[test]
fn a_new_database_has_no_content_copy_and_one_that_kept_it_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chatd.sqlite3");
    drop(Store::open(&path).unwrap());
    let connection = Connection::open(&path).unwrap();
    let content_tables = |connection: &Connection| -> i64 {
        connection
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'content\\_%' ESCAPE '\\'",
                [],
                |row| row.get(0),
            )
            .unwrap()
    };
    assert_eq!(content_tables(&connection), 0);
    // A database made while chatd still kept a copy of the CMS's content has the tables, rows
    // and all, past the step that no longer makes them.
    connection
        .execute_batch(
            "CREATE TABLE content_collections (id TEXT PRIMARY KEY, position INTEGER NOT NULL,
                 record_json TEXT NOT NULL);
             INSERT INTO content_collections VALUES ('t-posts', 0, '{}');",
        )
        .unwrap();
    drop(connection);
    let store = Store::open(&path).unwrap();
    store
        .create_conversation(ALICE, &new_conversation(Scope::Content, None))
        .unwrap();
    assert_eq!(content_tables(&Connection::open(&path).unwrap()), 1);
}
