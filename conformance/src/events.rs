//! Event store and entity state cases.

use super::fixtures::*;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{EntityStateWrite, WriteBatch};
use shardbox_core::{EventSource, Storage, StoredEvent};

/// Events page by `seq` (never by time), filtered by type and by `since`; duplicate ids are
/// ignored; events round-trip whole.
pub async fn event_store_pages_by_seq_with_filters<S: Storage + Inspect>(store: S) {
    assert_eq!(store.last_event_seq().await.expect("seq"), 0);
    let kind = |i: usize| if i % 2 == 0 { "Deposited" } else { "Withdrawn" };
    // Versions 1 to 3 (the version of each event's type shape), kept whole.
    let all: Vec<_> = (0..10)
        .map(|i| {
            let mut e = event(&format!("e{i}"), kind(i), secs(i as i64 / 2 * 2));
            e.version = 1 + (i % 3) as u32;
            e
        })
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

/// One producer's events (tenant, source kind, source id) read back in `seq` order, paged by
/// `seq`: interleaved with other producers' (another id, another kind with the same id, the
/// same kind and id of another tenant), appended by writes and by a stage commit alike; a
/// duplicate id is not read twice.
pub async fn events_of_one_source_in_seq_order<S: Storage + Inspect>(store: S) {
    let of = |id: &str, tenant: &str, kind: &str, source: &str| {
        let mut e = event(id, "Deposited", secs(1));
        e.tenant = tenant.into();
        e.source = EventSource {
            kind: kind.into(),
            id: source.into(),
        };
        e
    };
    let mine = |id: &str| of(id, "t-1", "account", "acc-1");
    let first = vec![
        mine("m0"),
        of("x0", "t-1", "account", "acc-2"),
        of("x1", "t-1", "ledger", "acc-1"),
        mine("m1"),
        of("x2", "t-2", "account", "acc-1"),
        mine("m2"),
    ];
    store
        .write(WriteBatch {
            events: first,
            messages: vec![],
        })
        .await
        .expect("write");
    // A stage commit appends too; a duplicate of m1 is ignored.
    let lease = pick(&store, 0, "node-a", t0()).await;
    let mut commit = stage(&lease, secs(2), vec![]);
    let mut m3 = mine("m3");
    m3.version = 2;
    commit.writes.events = vec![
        of("x3", "t-1", "account", "acc-2"),
        m3.clone(),
        mine("m1"),
        mine("m4"),
    ];
    store.commit_stage(commit).await.expect("commit");

    let source = EventSource {
        kind: "account".into(),
        id: "acc-1".into(),
    };
    let read_all = |tenant: &'static str, source: EventSource, limit: usize| {
        let store = &store;
        async move {
            let mut out: Vec<StoredEvent> = Vec::new();
            let mut after = 0;
            loop {
                let page = store
                    .read_source_events(tenant, &source, after, limit)
                    .await
                    .expect("read_source_events");
                assert!(page.len() <= limit);
                let Some(last) = page.last() else { break };
                after = last.seq;
                out.extend(page);
            }
            out
        }
    };
    let got = read_all("t-1", source.clone(), 2).await;
    assert_eq!(
        got.iter()
            .map(|e| e.event.id.0.as_str())
            .collect::<Vec<_>>(),
        ["m0", "m1", "m2", "m3", "m4"]
    );
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq), "{got:?}");
    assert_eq!(got[0].event, mine("m0"), "round-trips whole");
    assert_eq!(
        got[3].event, m3,
        "a stage commit's event round-trips whole, its version too"
    );
    let other_tenant = read_all("t-2", source.clone(), 10).await;
    assert_eq!(
        other_tenant
            .iter()
            .map(|e| e.event.id.0.as_str())
            .collect::<Vec<_>>(),
        ["x2"]
    );
    let nobody = EventSource {
        kind: "account".into(),
        id: "acc-9".into(),
    };
    assert!(read_all("t-1", nobody, 10).await.is_empty());
    let after_third = store
        .read_source_events("t-1", &source, got[2].seq, 10)
        .await
        .expect("read_source_events");
    assert_eq!(after_third, got[3..].to_vec());
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
                    (s.key.id, s.version, text, s.updated_at, s.state_version)
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
        [("a".into(), 1, "1".into(), secs(1), 1)]
    );

    store
        .commit_stage(commit_states(
            secs(2),
            vec![
                EntityStateWrite {
                    state_version: 2,
                    ..state(key("a"), Some("2"))
                },
                state(key("b"), Some("x")),
            ],
        ))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a", "b", "missing"]).await,
        [
            ("a".into(), 2, "2".into(), secs(2), 2),
            ("b".into(), 1, "x".into(), secs(2), 1)
        ],
        "a state keeps the state version it was last saved at"
    );

    store
        .commit_stage(commit_states(
            secs(3),
            vec![
                state(key("a"), None),
                state(key("b"), Some("y")),
                EntityStateWrite {
                    state_version: 4,
                    ..state(key("b"), Some("z"))
                },
            ],
        ))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a", "b"]).await,
        [("b".into(), 3, "z".into(), secs(3), 4)],
        "the last write's state version"
    );

    store
        .commit_stage(commit_states(secs(4), vec![state(key("a"), Some("again"))]))
        .await
        .expect("commit");
    assert_eq!(
        load(vec!["a"]).await,
        [("a".into(), 1, "again".into(), secs(4), 1)]
    );
    assert!(store.load_states(&[]).await.expect("load").is_empty());
}
