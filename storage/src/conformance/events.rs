//! Event store and entity state cases.

use super::fixtures::*;
use crate::Inspect;
use shardbox_core::storage::WriteBatch;
use shardbox_core::{Storage, StoredEvent};

/// Events page by `seq` (never by time), filtered by type and by `since`; duplicate ids are
/// ignored; events round-trip whole.
pub async fn event_store_pages_by_seq_with_filters<S: Storage + Inspect>(store: S) {
    assert_eq!(store.last_event_seq().await.expect("seq"), 0);
    let kind = |i: usize| if i % 2 == 0 { "Deposited" } else { "Withdrawn" };
    let all: Vec<_> = (0..10)
        .map(|i| event(&format!("e{i}"), kind(i), secs(i as i64 / 2 * 2)))
        .collect();
    let first = WriteBatch {
        events: all[..6].to_vec(),
        messages: vec![],
    };
    assert_eq!(store.write(first).await.expect("write").events, 6);
    let mut second = all[6..].to_vec();
    second.push(all[3].clone());
    let report = store
        .write(WriteBatch {
            events: second,
            messages: vec![],
        })
        .await
        .expect("write");
    assert_eq!(report.events, 4, "the duplicate e3 is ignored");

    let read_all = |types: Vec<String>, since, limit| {
        let store = &store;
        async move {
            let mut out: Vec<StoredEvent> = Vec::new();
            let mut after = 0;
            loop {
                let page = store
                    .read_events(after, &types, since, limit)
                    .await
                    .expect("read_events");
                assert!(page.len() <= limit);
                let Some(last) = page.last() else { break };
                after = last.seq;
                out.extend(page);
            }
            out
        }
    };
    let got = read_all(vec![], None, 3).await;
    assert_eq!(
        got.iter().map(|e| &e.event).collect::<Vec<_>>(),
        all.iter().collect::<Vec<_>>()
    );
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(store.last_event_seq().await.expect("seq"), got[9].seq);

    let ids = |events: Vec<StoredEvent>| -> Vec<String> {
        events.into_iter().map(|e| e.event.id.0).collect()
    };
    assert_eq!(
        ids(read_all(vec!["Withdrawn".into()], None, 2).await),
        ["e1", "e3", "e5", "e7", "e9"]
    );
    assert_eq!(
        ids(read_all(vec![], Some(secs(6)), 2).await),
        ["e6", "e7", "e8", "e9"],
        "events at or after `since` (e6 occurred exactly then)"
    );
    assert_eq!(
        ids(read_all(vec!["Deposited".into(), "Other".into()], Some(secs(4)), 5).await),
        ["e4", "e6", "e8"]
    );
    let after_last = store
        .read_events(got[9].seq, &[], None, 10)
        .await
        .expect("read_events");
    assert!(after_last.is_empty());
}

/// Each stored state counts its versions; `None` deletes it (a later write starts over at 1);
/// writes of one commit apply in order; missing keys are simply absent.
pub async fn entity_state_versions_and_delete<S: Storage + Inspect>(store: S) {
    let lease = pick(&store, 0, "node-a", t0()).await;
    let commit_states = |now, states| {
        let mut commit = stage(&lease, now, vec![]);
        commit.states = states;
        commit
    };
    let load = |keys: Vec<&'static str>| {
        let store = &store;
        async move {
            let keys: Vec<_> = keys.into_iter().map(key).collect();
            let mut states = store.load_states(&keys).await.expect("load");
            states.sort_by(|a, b| a.key.cmp(&b.key));
            states
                .into_iter()
                .map(|s| {
                    let text = String::from_utf8(s.state).unwrap_or_default();
                    (s.key.id, s.version, text, s.updated_at)
                })
                .collect::<Vec<_>>()
        }
    };

    store
        .commit_stage(commit_states(secs(1), vec![state(key("a"), Some("1"))]))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a"]).await,
        [("a".into(), 1, "1".into(), secs(1))]
    );

    store
        .commit_stage(commit_states(
            secs(2),
            vec![state(key("a"), Some("2")), state(key("b"), Some("x"))],
        ))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a", "b", "missing"]).await,
        [
            ("a".into(), 2, "2".into(), secs(2)),
            ("b".into(), 1, "x".into(), secs(2))
        ]
    );

    store
        .commit_stage(commit_states(
            secs(3),
            vec![
                state(key("a"), None),
                state(key("b"), Some("y")),
                state(key("b"), Some("z")),
            ],
        ))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a", "b"]).await,
        [("b".into(), 3, "z".into(), secs(3))]
    );

    store
        .commit_stage(commit_states(secs(4), vec![state(key("a"), Some("again"))]))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a"]).await,
        [("a".into(), 1, "again".into(), secs(4))]
    );
    assert!(store.load_states(&[]).await.expect("load").is_empty());
}
