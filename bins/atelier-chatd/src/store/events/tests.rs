use serde_json::json;

use super::*;
use crate::store::{ContentBlock, NewConversation, NewCredential, NewMessage, Role};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("chat.sqlite3")).unwrap();
    (dir, store)
}

fn turn(conversation_id: &str) -> ChatTurn {
    ChatTurn {
        conversation_id: conversation_id.into(),
        scope: Scope::Content,
        provider_id: Some("anthropic".into()),
        model_id: "claude-x".into(),
    }
}

fn credential() -> CredentialFacts {
    CredentialFacts {
        id: "cred-1".into(),
        provider_id: "openai".into(),
        display_label: "Work".into(),
    }
}

fn user_message(text: &str) -> NewMessage {
    NewMessage {
        role: Role::User,
        content: vec![ContentBlock::Text { text: text.into() }],
        tool_call: None,
    }
}

/// The stored rows as (action, target type, target id, metadata), newest first.
fn stored(store: &Store) -> Vec<(String, String, String, Value)> {
    store
        .audit_events(500, None)
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                e.action,
                e.target_type.unwrap_or_default(),
                e.target_id.unwrap_or_default(),
                e.metadata,
            )
        })
        .collect()
}

#[test]
fn every_action_is_stored_with_the_cms_target_and_metadata_keys() {
    let long_error = "x".repeat(MAX_ERROR_CHARS + 50);
    let totals = TurnTotals {
        prompt_tokens: 120,
        completion_tokens: 30,
        cost_usd: 0.1 + 0.2,
    };
    let cases: Vec<(AuditEvent, &str, &str, &str, Value)> = vec![
        (
            AuditEvent::ChatStarted(turn("conv-1")),
            "ai.chat.started",
            "ai_conversation",
            "conv-1",
            json!({"scope": "content", "providerId": "anthropic", "modelId": "claude-x"}),
        ),
        (
            AuditEvent::ChatCompleted {
                turn: turn("conv-1"),
                totals,
            },
            "ai.chat.completed",
            "ai_conversation",
            "conv-1",
            json!({"scope": "content", "providerId": "anthropic", "modelId": "claude-x",
                   "promptTokens": 120, "completionTokens": 30, "costUsd": 0.3}),
        ),
        (
            AuditEvent::ChatFailed {
                turn: turn("conv-2"),
                totals: TurnTotals::default(),
                error: long_error.clone(),
            },
            "ai.chat.failed",
            "ai_conversation",
            "conv-2",
            json!({"scope": "content", "providerId": "anthropic", "modelId": "claude-x",
                   "promptTokens": 0, "completionTokens": 0, "costUsd": 0.0,
                   "error": "x".repeat(MAX_ERROR_CHARS)}),
        ),
        (
            AuditEvent::CredentialCreated {
                credential: credential(),
                auth_mode: AuthMode::ApiKey,
            },
            "ai.credential.created",
            "ai_credential",
            "cred-1",
            json!({"providerId": "openai", "authMode": "apiKey", "displayLabel": "Work"}),
        ),
        (
            AuditEvent::CredentialUpdated {
                credential: credential(),
                fields_touched: vec![CredentialField::DisplayLabel, CredentialField::ApiKey],
            },
            "ai.credential.updated",
            "ai_credential",
            "cred-1",
            json!({"providerId": "openai", "displayLabel": "Work",
                   "fieldsTouched": ["displayLabel", "apiKey"]}),
        ),
        (
            AuditEvent::CredentialDeleted(credential()),
            "ai.credential.deleted",
            "ai_credential",
            "cred-1",
            json!({"providerId": "openai", "displayLabel": "Work"}),
        ),
        (
            AuditEvent::CredentialTested {
                credential: credential(),
                outcome: TestOutcome::Listed(7),
            },
            "ai.credential.tested",
            "ai_credential",
            "cred-1",
            json!({"providerId": "openai", "displayLabel": "Work", "ok": true, "modelCount": 7}),
        ),
        (
            AuditEvent::CredentialTested {
                credential: credential(),
                outcome: TestOutcome::Failed(long_error),
            },
            "ai.credential.tested",
            "ai_credential",
            "cred-1",
            json!({"providerId": "openai", "displayLabel": "Work", "ok": false,
                   "error": "x".repeat(MAX_ERROR_CHARS)}),
        ),
        (
            AuditEvent::DefaultUpdated {
                scope: Scope::Site,
                credential_id: "cred-1".into(),
                model_id: "gpt-x".into(),
                auto: false,
            },
            "ai.default.updated",
            "ai_default",
            "site",
            json!({"scope": "site", "credentialId": "cred-1", "modelId": "gpt-x"}),
        ),
        (
            AuditEvent::DefaultUpdated {
                scope: Scope::Data,
                credential_id: "cred-1".into(),
                model_id: "gpt-x".into(),
                auto: true,
            },
            "ai.default.updated",
            "ai_default",
            "data",
            json!({"scope": "data", "credentialId": "cred-1", "modelId": "gpt-x", "auto": true}),
        ),
        (
            AuditEvent::DefaultCleared {
                scope: Scope::Plugin,
            },
            "ai.default.cleared",
            "ai_default",
            "plugin",
            json!({"scope": "plugin"}),
        ),
    ];
    let (_dir, store) = open();
    for (event, ..) in &cases {
        store.record_event("user-alice", event).unwrap();
    }
    let expected: Vec<(String, String, String, Value)> = cases
        .iter()
        .rev()
        .map(|(_, action, kind, id, metadata)| {
            (
                (*action).to_owned(),
                (*kind).to_owned(),
                (*id).to_owned(),
                metadata.clone(),
            )
        })
        .collect();
    assert_eq!(stored(&store), expected);
    let events = store.audit_events(500, None).unwrap();
    assert!(events
        .iter()
        .all(|e| e.actor_user_id.as_deref() == Some("user-alice")
            && e.ip_address.is_none()
            && e.user_agent.is_none()
            && e.created_at.ends_with('Z')));
}

#[test]
fn the_newest_come_first_limited_and_filtered_by_action_prefix() {
    let (_dir, store) = open();
    for index in 0..5 {
        store
            .record_event(
                "u",
                &AuditEvent::ChatStarted(turn(&format!("conv-{index}"))),
            )
            .unwrap();
        store
            .record_event("u", &AuditEvent::DefaultCleared { scope: Scope::Site })
            .unwrap();
    }
    let targets = |events: Vec<StoredEvent>| -> Vec<String> {
        events
            .into_iter()
            .map(|e| e.target_id.unwrap_or_default())
            .collect()
    };
    assert_eq!(
        targets(store.audit_events(3, Some("ai.chat.")).unwrap()),
        ["conv-4", "conv-3", "conv-2"]
    );
    let all = store.audit_events(100, None).unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(all[0].action, "ai.default.cleared");
    assert_eq!(all[1].target_id.as_deref(), Some("conv-4"));
    // A prefix is matched literally: `_` and `%` are no wildcards.
    assert!(store.audit_events(100, Some("ai_")).unwrap().is_empty());
    assert!(store.audit_events(100, Some("%")).unwrap().is_empty());
    assert_eq!(
        store.audit_events(100, Some("ai.default.")).unwrap().len(),
        5
    );
}

#[test]
fn metadata_the_cms_would_not_accept_reads_as_an_empty_object() {
    let cases = [
        (
            "flat",
            r#"{"a":"x","b":1,"c":true,"d":null,"e":["p","q"]}"#,
            true,
        ),
        ("nested object", r#"{"a":{"b":1}}"#, false),
        ("list of numbers", r#"{"a":[1,2]}"#, false),
        ("not an object", r#"["a"]"#, false),
        ("not JSON", "{", false),
    ];
    for (name, text, kept) in cases {
        let read = read_metadata(text);
        if kept {
            assert_eq!(read, serde_json::from_str::<Value>(text).unwrap(), "{name}");
        } else {
            assert_eq!(read, json!({}), "{name}");
        }
    }
}

#[test]
fn a_user_turn_records_its_start_in_the_same_commit_with_the_credential_s_provider() {
    let (_dir, store) = open();
    let credential = store
        .create_credential(
            "alice",
            &NewCredential {
                provider_id: "openai-compatible".into(),
                auth_mode: AuthMode::BaseUrl,
                display_label: "Local".into(),
                sealed: None,
                base_url: Some("http://127.0.0.1:9/v1".into()),
            },
        )
        .unwrap();
    let conversation = store
        .create_conversation(
            "alice",
            &NewConversation {
                scope: Scope::Data,
                title: None,
                credential_id: credential.id.clone(),
                model_id: "llama".into(),
            },
        )
        .unwrap();
    let started = store
        .append_user_turn(&conversation.id, &user_message("hi"), "Hi", "alice")
        .unwrap();
    assert_eq!(
        started.turn,
        ChatTurn {
            conversation_id: conversation.id.clone(),
            scope: Scope::Data,
            provider_id: Some("openai-compatible".into()),
            model_id: "llama".into(),
        }
    );
    assert_eq!(
        stored(&store),
        [(
            "ai.chat.started".to_owned(),
            "ai_conversation".to_owned(),
            conversation.id.clone(),
            json!({"scope": "data", "providerId": "openai-compatible", "modelId": "llama"}),
        )]
    );
    // A turn refused by the store (its conversation is gone) records no start.
    assert!(store
        .delete_conversation("alice", &conversation.id)
        .unwrap());
    assert!(matches!(
        store.append_user_turn(&conversation.id, &user_message("again"), "Again", "alice"),
        Err(StoreError::ConversationNotFound)
    ));
    assert_eq!(store.audit_events(100, None).unwrap().len(), 1);
}

#[test]
fn every_start_without_an_end_is_closed_as_failed_once() {
    let (_dir, store) = open();
    let record = |event: AuditEvent| store.record_event("alice", &event).unwrap();
    let completed = |id: &str| AuditEvent::ChatCompleted {
        turn: turn(id),
        totals: TurnTotals::default(),
    };
    // Ended: a start then its end.
    record(AuditEvent::ChatStarted(turn("ended")));
    record(completed("ended"));
    // Killed mid-turn, then a later turn ran and ended: only the first start is open.
    record(AuditEvent::ChatStarted(turn("killed-then-ran")));
    record(AuditEvent::ChatStarted(turn("killed-then-ran")));
    record(completed("killed-then-ran"));
    // Killed during its last turn.
    record(AuditEvent::ChatStarted(turn("killed")));
    // Settings records never pair.
    record(AuditEvent::DefaultCleared { scope: Scope::Site });

    assert_eq!(store.close_interrupted_turns().unwrap(), 2);
    assert_eq!(store.close_interrupted_turns().unwrap(), 0, "closed once");

    let failed = store.audit_events(100, Some("ai.chat.failed")).unwrap();
    let mut closed: Vec<&str> = failed
        .iter()
        .map(|e| e.target_id.as_deref().unwrap_or_default())
        .collect();
    closed.sort_unstable();
    assert_eq!(closed, ["killed", "killed-then-ran"]);
    assert_eq!(
        failed[0].metadata,
        json!({"scope": "content", "providerId": "anthropic", "modelId": "claude-x",
               "promptTokens": 0, "completionTokens": 0, "costUsd": 0.0,
               "error": TURN_INTERRUPTED_ERROR})
    );
    assert!(failed
        .iter()
        .all(|e| e.actor_user_id.as_deref() == Some("alice")));

    // Killed again: only the new start is closed, with its own facts.
    record(AuditEvent::ChatStarted(ChatTurn {
        model_id: "claude-y".into(),
        ..turn("killed")
    }));
    assert_eq!(store.close_interrupted_turns().unwrap(), 1);
    let newest = &store.audit_events(1, None).unwrap()[0];
    assert_eq!(
        (newest.action.as_str(), newest.target_id.as_deref()),
        ("ai.chat.failed", Some("killed"))
    );
    assert_eq!(newest.metadata["modelId"], "claude-y");
    assert_eq!(store.close_interrupted_turns().unwrap(), 0);
}
